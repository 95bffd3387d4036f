"""The channel scores of the real bundled model: right, and kept off the conversation's cache."""

from __future__ import annotations

import numpy as np
import pytest

from bolt_agent.core.llm.llama.engine import LlamaConfig, LlamaEngine


@pytest.fixture(scope="module")
def model_path():
    from bolt_agent.core.models import resolve_model

    return str(resolve_model("", kind="llm"))


@pytest.fixture(scope="module")
def engine(model_path):
    engine = LlamaEngine(LlamaConfig(model_path, n_ctx=1024)).load()
    yield engine
    engine.close()


NOD = 'The robot answered: "You want me to nod yes? Here is a happy nod."\nThe person had said:'
SCAN = 'The robot answered: "You want me to look around? Let me scan it."\nThe person had said:'


def test_scores_are_the_log_probability_of_the_text_after_each_prefix(engine, model_path):
    from llama_cpp import Llama

    text = " Give me a little nod if you can hear me."
    got = engine.channel_scores([NOD, SCAN], text)
    reference = Llama(model_path, n_ctx=256, logits_all=True, verbose=False)
    try:
        for prefix, value in zip([NOD, SCAN], got):
            head = reference.tokenize(prefix.encode(), add_bos=True, special=False)
            tail = reference.tokenize(text.encode(), add_bos=False, special=False)
            reference.reset()
            reference.eval(head + tail)
            logits = np.asarray(reference.scores[: len(head) + len(tail)], dtype=np.float64)
            want = 0.0
            for j, token in enumerate(tail):
                row = logits[len(head) + j - 1]
                want += row[token] - row.max() - np.log(np.exp(row - row.max()).sum())
            assert value == pytest.approx(want, rel=0.01)  # batch shapes change the last digits
    finally:
        reference.close()
    assert got[0] > got[1]  # the nod explains a request for a nod better


def test_scoring_leaves_the_conversation_cache_and_repeats_exactly(engine):
    prompt = "<start_of_turn>user\nHello there, robot. How are you today?<end_of_turn>\n"
    engine.prefill(prompt)
    cached = engine.cached_tokens(prompt)
    assert cached > 10
    first = engine.channel_scores([NOD, SCAN], " Look around the room, please.")
    assert engine.cached_tokens(prompt) == cached  # its own context: no prefill next turn
    again = engine.channel_scores([NOD, SCAN], " Look around the room, please.")
    assert again == pytest.approx(first, rel=0.01) and first[1] > first[0]
    # some of the cached prefixes alone (a selection's argument values): the same scores
    part = engine.channel_scores([NOD, SCAN], " Look around the room, please.", only=[1])
    assert part == pytest.approx([first[1]], rel=0.01)
    # other prefixes replace the cached ones
    other = engine.channel_scores([SCAN], " Look around the room, please.")
    assert other[0] == pytest.approx(first[1], rel=0.01)


def test_the_selection_time_bench_compares_the_three_ways_on_the_real_model(tmp_path, capsys):
    import json

    from bolt_agent.benchmarks.selection_time import main

    out = tmp_path / "selection_time.json"
    assert main(["--requests", "2", "--profiles", "reachy_mini", "--out", str(out)]) == 0
    result = json.loads(out.read_text())["profiles"]["reachy_mini"]
    assert result["requests"] == 2 and result["same_choice"] == 2
    assert set(result["median_s"]) == {"options", "one batch", "two steps"}
    assert all(v > 0 for v in result["median_s"].values())
    assert "| reachy_mini | 2 |" in capsys.readouterr().out

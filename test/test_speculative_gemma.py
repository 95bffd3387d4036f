"""Speculative decoding with the bundled gemma-3-270m: prompt lookup, DFlash refusal, full turns."""

from __future__ import annotations

from concurrent.futures import Future

import pytest
from tiny_gguf import DrafterSpec, generate, write_drafter

from bolt_agent.core.chat_template import Knobs
from bolt_agent.core.dialogue import Dialogue
from bolt_agent.core.llm_engine import LlamaConfig, LlamaEngine, SamplingParams
from bolt_agent.core.models import resolve_model
from bolt_agent.core.output_parser import _THINK
from bolt_agent.core.profile import load_profile
from bolt_agent.core.speculative import batch_invariant_weights
from bolt_agent.core.speculative.decoder import PHASE_MARKERS
from bolt_agent.core.turn_runner import RunnerConfig, ToolResult, TurnRequest, TurnRunner

GREEDY = SamplingParams(temperature=0.0)
PROMPTS = [
    "The colors are red, green, blue and yellow. Again, the colors are red,",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "Robot: Hello! I am Bolt, a small robot. User: Who are you? Robot:",
    "Question: What is the capital of France? Answer:",
]


class Sink:
    """Records what a turn streams (the order of deltas, sentences, thoughts and calls)."""

    def __init__(self):
        self.events: list[tuple] = []

    def on_first_token(self, turn_id):
        pass

    def on_thinking(self, turn_id, text):
        self.events.append(("think", text))

    def on_speech_delta(self, turn_id, text):
        self.events.append(("delta", text))

    def on_sentence(self, turn_id, seq, text):
        self.events.append(("sentence", seq, text))

    def dispatch(self, turn_id, name, arguments):
        self.events.append(("dispatch", name, arguments))
        future = Future()
        future.set_result(ToolResult(ok=True, result={"ok": True}))
        return future

    def on_turn_end(self, turn_id, seq, result):
        self.events.append(("end", seq))


def runner_for(engine, max_steps: int, max_new_tokens: int) -> TurnRunner:
    profile = load_profile("reachy_mini")
    config = RunnerConfig(
        sampling=SamplingParams(seed=7),  # temperature 1.0: seeded sampling, not greedy
        constrained=True,
        max_speech_chars=60,
        max_steps=max_steps,
        max_new_tokens=max_new_tokens,
    )
    return TurnRunner(engine, Dialogue(profile.persona), profile.registry, config)


def load(mode: str, draft: str = "") -> LlamaEngine:
    path = str(resolve_model("", kind="llm"))
    return LlamaEngine(
        LlamaConfig(model_path=path, n_ctx=2048, speculative=mode, draft_model=draft)
    ).load()


@pytest.fixture(scope="module")
def plain():
    # the reference: plain decoding with the weight layout speculative engines load (no CPU
    # repacking, see batch_invariant_weights); with repacking, rounding differs from the start
    with batch_invariant_weights():
        eng = load("none")
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def ngram():
    eng = load("ngram")
    yield eng
    eng.close()


def test_phase_markers_match_the_parser():
    assert set(PHASE_MARKERS) == {m for pair in _THINK for m in pair}


def test_ngram_greedy_output_is_identical_and_counted(plain, ngram):
    assert ngram.speculation.active == "ngram" and not ngram.speculation.reasons
    drafted = accepted = 0
    for prompt in PROMPTS:
        ref, _ = generate(plain, prompt, 40, GREEDY)
        got, stats = generate(ngram, prompt, 40, GREEDY)
        assert got == ref, prompt
        drafted += stats.drafted
        accepted += stats.accepted
        assert stats.accepted <= stats.drafted
    assert accepted > 10 and drafted >= accepted  # the repetitive prompts pay off


def test_dflash_with_a_gemma3_target_falls_back_cleanly(tmp_path, plain):
    # a drafter that fits gemma-3-270m in every respect but the architecture: llama.cpp would
    # abort on the first decode; the engine must refuse it and keep going with prompt lookup
    drafter = write_drafter(
        tmp_path / "dflash.gguf",
        DrafterSpec(n_embd=640, n_head=4, n_head_kv=1, n_ff=64, target_layers=(2, 8, 14)),
    )
    eng = load("dflash", str(drafter))
    try:
        info = eng.speculation
        assert info.requested == "dflash" and info.active == "ngram"
        assert "'gemma3' does not publish layer inputs" in info.reasons[0]
        got, _ = generate(eng, PROMPTS[0], 24, GREEDY)
        ref, _ = generate(plain, PROMPTS[0], 24, GREEDY)
        assert got == ref
    finally:
        eng.close()


CASES = [
    # constrained speech + a required tool call (grammar phase), two steps
    ("Look around the room.", Knobs(enable_thinking=False), "required", 2, 96),
    # thinking opened by the runner, closed by budget forcing, then the grammar phase
    ("What can you see?", Knobs(enable_thinking=True, thinking_token_budget=16), "none", 1, 80),
]


@pytest.mark.parametrize(("text", "knobs", "choice", "steps", "tokens"), CASES)
def test_turns_are_identical_with_prompt_lookup(plain, ngram, text, knobs, choice, steps, tokens):
    results = []
    for eng in (plain, ngram):
        runner = runner_for(eng, max_steps=steps, max_new_tokens=tokens)
        sink = Sink()
        results.append((runner.run(TurnRequest("t1", text, knobs, choice), sink), sink.events))
    (ref, ref_events), (got, got_events) = results
    assert ref.spoken_text
    assert got.spoken_text == ref.spoken_text
    assert got.thinking_text == ref.thinking_text
    assert got.thinking_tokens == ref.thinking_tokens
    assert got.tool_calls == ref.tool_calls
    assert got_events == ref_events
    assert sum(s.drafted for s in got.stats) >= sum(s.accepted for s in got.stats)

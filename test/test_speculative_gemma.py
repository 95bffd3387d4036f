"""Speculative decoding with the bundled gemma-3-270m: prompt lookup, DFlash refusal, a turn."""

from __future__ import annotations

import numpy as np
import pytest
from llama_cpp import llama_cpp as capi

from bolt_agent.core.llm.chat_template import Knobs
from bolt_agent.core.llm.llama.engine import LlamaConfig, LlamaEngine
from bolt_agent.core.llm.llama.speculative.decoder import PHASE_MARKERS
from bolt_agent.core.llm.output_parser import _THINK
from bolt_agent.core.llm.turn_runner import TurnRequest
from bolt_agent.core.llm.types import SamplingParams
from bolt_agent.core.models import resolve_model
from support.tiny_gguf import DrafterSpec, Sink, generate, runner_for, write_drafter

GREEDY = SamplingParams(temperature=0.0)
PROMPTS = [
    "The colors are red, green, blue and yellow. Again, the colors are red,",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "Robot: Hello! I am Bolt, a small robot. User: Who are you? Robot:",
    "Question: What is the capital of France? Answer:",
    "1, 2, 3, 4, 5, 6, 7, 8,",
    "The robot waved. The robot nodded. The robot",
    "Monday, Tuesday, Wednesday,",
]
NEAR_TIE = 1.0  # logits: batched and single-token kernels round differently (see docs)


def load(mode: str, draft: str = "") -> LlamaEngine:
    path = str(resolve_model("", kind="llm"))
    return LlamaEngine(
        LlamaConfig(model_path=path, n_ctx=2048, speculative=mode, draft_model=draft)
    ).load()


@pytest.fixture(scope="module")
def plain():
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


def margin_after(engine: LlamaEngine, prompt: str, tokens: list[int]) -> float:
    """Top-1 minus top-2 logit of plain decoding after `prompt` + `tokens`."""
    llm = engine.llm
    llm.n_tokens = 0
    llm.eval(engine.tokenize(prompt) + tokens)
    logits = np.ctypeslib.as_array(capi.llama_get_logits_ith(llm._ctx.ctx, -1), (llm.n_vocab(),))
    top = np.sort(logits)[-2:]
    return float(top[1] - top[0])


def test_ngram_greedy_output_matches_plain_decoding(plain, ngram):
    assert ngram.speculation.active == "ngram" and not ngram.speculation.reasons
    identical = drafted = accepted = 0
    for prompt in PROMPTS:
        ref, _ = generate(plain, prompt, 40, GREEDY)
        got, stats = generate(ngram, prompt, 40, GREEDY)
        drafted += stats.drafted
        accepted += stats.accepted
        assert stats.accepted <= stats.drafted
        if got == ref:
            identical += 1
            continue
        # a verified row's logits come from a batched matmul: they may differ from the
        # single-token decode by rounding, which can only flip a near-tie
        first = next(i for i, (a, b) in enumerate(zip(got, ref)) if a != b)
        assert margin_after(plain, prompt, ref[:first]) < NEAR_TIE, (prompt, first)
    assert identical >= len(PROMPTS) // 2
    assert accepted > 20 and drafted >= accepted  # the repetitive prompts pay off


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
        out, stats = generate(eng, PROMPTS[0], 24, GREEDY)
        assert len(out) == 24 and stats.accepted > 0
    finally:
        eng.close()


def test_a_constrained_turn_with_prompt_lookup(ngram):
    runner = runner_for(ngram, max_steps=2, max_new_tokens=96)
    sink = Sink()
    knobs = Knobs(enable_thinking=True, thinking_token_budget=16)
    result = runner.run(TurnRequest("t1", "Look around the room.", knobs, "required"), sink)
    assert result.spoken_text and 0 < result.thinking_tokens <= 16
    assert len(result.tool_calls) == 1
    assert sum(s.drafted for s in result.stats) >= sum(s.accepted for s in result.stats)

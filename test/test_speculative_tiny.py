"""Speculative decoding against tiny generated GGUFs (llama/qwen3 targets, a DFlash drafter)."""

from __future__ import annotations

import pytest

from bolt_agent.core.llm.chat_template import Knobs
from bolt_agent.core.llm.llama.engine import LlamaConfig, LlamaEngine
from bolt_agent.core.llm.llama.speculative import DrafterError, SpecConfig, build_speculator
from bolt_agent.core.llm.turn_runner import TurnRequest
from bolt_agent.core.llm.types import SamplingParams
from support.tiny_gguf import (
    MASK_CHAR,
    DrafterSpec,
    Sink,
    TargetSpec,
    generate,
    runner_for,
    truncate,
    write_drafter,
    write_target,
)

GREEDY = SamplingParams(temperature=0.0)
SAMPLED = SamplingParams(temperature=0.8, seed=11)
PROMPTS = [
    "hello world",
    "the quick brown fox jumps over the lazy dog",
    "abc abc abc abc",
    "once upon a time",
    "1, 2, 3, 4, 5,",
    "Bolt is a small robot.",
    "zzzz",
    "a",
    "The list: red, green, blue. Again: red, green,",
    '{"name": "wave", "arguments": {}}',
    "to be or not to be",
    "~!@#$%^&*()",
]
MODES = ["ngram", "dflash", "draft_model"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    return {
        "llama": write_target(d / "llama.gguf", TargetSpec(arch="llama", n_ctx=8192)),
        "qwen3": write_target(d / "qwen3.gguf", TargetSpec(arch="qwen3", seed=5)),
        "copy": write_target(d / "copy.gguf", TargetSpec(weights="copy")),
        "similar": write_target(d / "similar.gguf", TargetSpec(noise=0.3)),
        "other_vocab": write_target(d / "other_vocab.gguf", TargetSpec(extra_tokens=5)),
        "drafter": write_drafter(d / "drafter.gguf", DrafterSpec()),
        "zero": write_drafter(d / "zero.gguf", DrafterSpec(weights="zero")),
        "bad_ids": write_drafter(d / "bad_ids.gguf", DrafterSpec(target_layers=(0, 7))),
        "wide": write_drafter(d / "wide.gguf", DrafterSpec(n_embd=128)),
        "dir": d,
    }


def engine(models, target="llama", mode="none", draft=None, n_max=7):
    if draft is None:
        draft = {"dflash": "drafter", "draft_model": "similar"}.get(mode, "drafter")
    path = models.get(draft, draft)
    config = LlamaConfig(
        model_path=str(models[target]),
        n_ctx=512,
        n_batch=64,
        speculative=mode,
        draft_model=str(path),
        spec_n_max=n_max,
    )
    return LlamaEngine(config).load()


def outputs(models, mode, target="llama", n=40, **kw):
    eng = engine(models, target, mode, kw.pop("draft", None))
    sampling = kw.pop("sampling", GREEDY)
    try:
        assert eng.speculation is None or eng.speculation.active == mode, eng.speculation
        runs = [generate(eng, p, n, sampling, **kw) for p in PROMPTS]
        return [out for out, _ in runs], [stats for _, stats in runs]
    finally:
        eng.close()


@pytest.fixture(scope="module")
def plain(models):
    return {t: outputs(models, "none", t)[0] for t in ("llama", "qwen3")}


@pytest.mark.parametrize("target", ["llama", "qwen3"])
@pytest.mark.parametrize("mode", MODES)
def test_greedy_output_is_identical(models, plain, target, mode):
    got, stats = outputs(models, mode, target)
    assert got == plain[target]
    assert sum(s.drafted for s in stats) > 0
    assert all(s.accepted <= s.drafted for s in stats)


@pytest.mark.parametrize("mode", MODES)
def test_seeded_sampling_is_identical(models, mode):
    # one sampler call per emitted token, in order: a seeded run reproduces plain decoding
    kw = {"sampling": SAMPLED, "n": 30}
    assert outputs(models, mode, **kw)[0] == outputs(models, "none", **kw)[0]


@pytest.mark.parametrize("mode", MODES)
def test_grammar_and_budget_forcing_keep_output_identical(models, mode):
    kw = {"grammar": 'root ::= [a-z ]+ "." [a-z ]*', "force_at": 9, "n": 30}
    got = outputs(models, mode, **kw)[0]
    assert got == outputs(models, "none", **kw)[0]
    assert all("F" in out for out in got)


def mean_accepted(stats) -> float:
    steps = sum(s.draft_steps for s in stats)
    return sum(s.accepted for s in stats) / steps


@pytest.mark.parametrize("n_max", [3, 7])
def test_dflash_every_draft_accepted(models, n_max):
    # copy target: the next token is the last one; zero drafter: every draft is the mask char
    eng = engine(models, "copy", "dflash", "zero", n_max=n_max)
    try:
        _, stats = generate(eng, f"count {MASK_CHAR}", 10 * (n_max + 1) + 1, GREEDY)
    finally:
        eng.close()
    assert stats.draft_steps >= 9
    assert stats.accepted == stats.drafted
    assert mean_accepted([stats]) == n_max


@pytest.mark.parametrize("mode", ["dflash", "draft_model"])
def test_a_prefill_split_into_micro_batches_keeps_the_drafter_in_step(models, mode):
    """The target splits a 128-token batch into micro-batches of 32; the drafter still takes
    each batch in one (DFlash's drafter attends without a causal mask, and llama.cpp aborts
    the process on a non-causal decode larger than its micro-batch: the default n_ubatch 64
    with n_batch 256, the Jetson profile's too, did). The output stays the plain target's."""
    from llama_cpp import llama_cpp as capi

    prompt = " ".join(PROMPTS * 3)  # ~300 tokens: three batches, ten micro-batches
    got = {}
    for spec in ("none", mode):
        config = LlamaConfig(
            model_path=str(models["llama"]),
            n_ctx=1024,
            n_batch=128,
            n_ubatch=32,
            speculative=spec,
            draft_model=str(models["drafter" if mode == "dflash" else "similar"]),
        )
        eng = LlamaEngine(config).load()
        try:
            assert len(eng.tokenize(prompt)) > 2 * 128
            if spec != "none":
                drafter = eng.speculator.drafter._ctx
                assert (capi.llama_n_ubatch(drafter), capi.llama_n_batch(drafter)) == (128, 128)
                assert capi.llama_n_ubatch(eng.llm._ctx.ctx) == 32
            got[spec], stats = generate(eng, prompt, 24, GREEDY)
        finally:
            eng.close()
    assert got[mode] == got["none"]
    assert stats.drafted > 0


def test_dflash_no_draft_accepted_output_still_identical(models):
    prompt = "count y"
    eng = engine(models, "copy", "dflash", "zero")
    try:
        out, stats = generate(eng, prompt, 30, GREEDY)
    finally:
        eng.close()
    plain_eng = engine(models, "copy")
    try:
        ref, _ = generate(plain_eng, prompt, 30, GREEDY)
    finally:
        plain_eng.close()
    assert out == ref
    assert stats.drafted > 0 and stats.accepted == 0


def test_draft_model_identical_to_target_accepts_everything(models):
    eng = engine(models, "llama", "draft_model", "llama", n_max=5)
    try:
        _, stats = generate(eng, "hello world", 10 * 6 + 1, GREEDY)  # 10 full steps
    finally:
        eng.close()
    assert stats.accepted == stats.drafted > 0
    assert mean_accepted([stats]) == 5


@pytest.mark.parametrize("mode", MODES)
def test_step_respects_the_limit(models, mode):
    eng = engine(models, "llama", mode, "llama" if mode == "draft_model" else None)
    try:
        session = eng.start("abc abc abc abc abc")
        for limit in (1, 2, 3, 1, 8, 1):
            got = session.step(GREEDY, None, limit)
            assert 1 <= len(got) <= limit
    finally:
        eng.close()


@pytest.mark.parametrize("mode", MODES)
def test_prefix_reuse_across_turns_keeps_caches_consistent(models, mode):
    def turns(eng):
        texts, reused = [], []
        prompt = "Turn one: hello robot."
        for i in range(3):
            session = eng.start(prompt)
            reused.append(session.stats.reused_tokens)
            tokens = []
            while len(tokens) < 12:
                tokens += session.step(GREEDY, None, 12 - len(tokens))
            text = "".join(t.text for t in tokens)
            texts.append(text)
            prompt = f"{prompt}{text} Turn {i + 2}:"
        return texts, reused

    plain_eng = engine(models, "llama")
    try:
        ref, _ = turns(plain_eng)
    finally:
        plain_eng.close()
    eng = engine(models, "llama", mode)
    try:
        got, reused = turns(eng)
    finally:
        eng.close()
    assert got == ref
    assert reused[1] > 0 and reused[2] > reused[1]


@pytest.mark.parametrize(
    ("drafter", "reason"),
    [("bad_ids", "out of range for a 3-layer target"), ("wide", "hidden size 128")],
)
def test_mismatched_drafter_falls_back_with_the_reason(models, drafter, reason):
    eng = engine(models, "llama", "dflash", drafter)
    try:
        info = eng.speculation
        assert info.requested == "dflash" and info.active == "ngram"
        assert reason in info.reasons[0]
        assert reason in info.summary()
        out, _ = generate(eng, "hello world", 20, GREEDY)
        assert len(out) == 20
    finally:
        eng.close()


def test_truncated_drafter_falls_back_or_raises_when_strict(models, tmp_path):
    cut = truncate(models["drafter"], tmp_path / "cut.gguf", 0.7)
    eng = engine(models, "llama", "dflash", cut)
    try:
        assert eng.speculation.active == "ngram"
        assert "truncated" in eng.speculation.reasons[0]
        with pytest.raises(DrafterError, match="truncated"):
            build_speculator(eng.llm, SpecConfig(mode="dflash", draft_model=str(cut)), strict=True)
    finally:
        eng.close()


@pytest.mark.parametrize(
    ("draft", "reason"),
    [("drafter", "not a standalone draft model"), ("other_vocab", "vocabulary")],
)
def test_unusable_draft_model_falls_back(models, draft, reason):
    eng = engine(models, "llama", "draft_model", draft)
    try:
        assert eng.speculation.active == "ngram"
        assert eng.speculation.reasons[0].startswith("draft_model:")
        assert reason in eng.speculation.reasons[0]
    finally:
        eng.close()


def test_memory_is_reported(models):
    eng = engine(models, "llama", "dflash")
    try:
        mem = eng.speculation.memory
        assert set(mem) == {"target_kv_bytes", "drafter_weights_bytes", "drafter_kv_bytes"}
        assert all(v > 0 for v in mem.values())
        # 3 layers x 512 cells x 2 kv heads x (16 + 16) x f16
        assert mem["target_kv_bytes"] == 3 * 512 * 2 * 32 * 2
    finally:
        eng.close()


TURNS = [
    # constrained speech + a required tool call (grammar phase), two steps
    ("Look around the room.", Knobs(enable_thinking=False), "required", 2, 160),
    # thinking opened by the runner and closed by budget forcing, then the grammar phase
    ("What can you see?", Knobs(enable_thinking=True, thinking_token_budget=12), "none", 1, 48),
]


@pytest.fixture(scope="module")
def turn_engines(models):
    engines = {}
    for mode in ["none", *MODES]:
        draft = models["similar" if mode == "draft_model" else "drafter"]
        config = LlamaConfig(
            model_path=str(models["llama"]),
            n_ctx=8192,
            n_batch=256,
            speculative=mode,
            draft_model=str(draft),
        )
        engines[mode] = LlamaEngine(config).load()
    yield engines
    for eng in engines.values():
        eng.close()


@pytest.mark.parametrize(("text", "knobs", "choice", "steps", "tokens"), TURNS)
@pytest.mark.parametrize("mode", MODES)
def test_turns_are_identical(turn_engines, mode, text, knobs, choice, steps, tokens):
    """Seeded sampling (temperature 1.0) through the turn runner: streaming, grammar, thinking
    budget forcing and tool dispatch see exactly what plain decoding produces."""
    results = []
    for m in ("none", mode):
        sink = Sink()
        turn_engines[m].sessions = 0  # the seed's offsets from the first session on, in both
        runner = runner_for(turn_engines[m], max_steps=steps, max_new_tokens=tokens)
        results.append((runner.run(TurnRequest("t1", text, knobs, choice), sink), sink.events))
    (ref, ref_events), (got, got_events) = results
    assert ref.completion_tokens > 0
    assert got_events == ref_events
    assert (got.spoken_text, got.thinking_text, got.tool_calls) == (
        ref.spoken_text,
        ref.thinking_text,
        ref.tool_calls,
    )
    assert got.thinking_tokens == ref.thinking_tokens == (12 if knobs.enable_thinking else 0)
    assert got.errors == ref.errors  # e.g. a tool call cut short by the token cap
    assert sum(s.drafted for s in got.stats) > 0 or mode == "ngram"  # no lookup match: fine

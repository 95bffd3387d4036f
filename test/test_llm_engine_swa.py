"""Prefix reuse with a small sliding-window cache (swa_full=False) on the bundled Gemma 3 GGUF,
whose 15 sliding-window layers keep n_swa (512) + n_ubatch (64), padded to 256: 768 cells."""

from __future__ import annotations

import pytest
from llama_cpp import llama_cpp as capi

from bolt_agent.core.llm.llama.engine import LlamaConfig, LlamaEngine
from bolt_agent.core.llm.llama.swa_cache import ALL_CELLS, CUT_BACK_TOKENS, SWA_ONLY
from bolt_agent.core.llm.types import SamplingParams

GREEDY = SamplingParams(temperature=0.0)
HISTORY = " ".join(f"Shelf {i} holds a red cup and a blue plate." for i in range(70))
THOUGHT = " ".join(f"Thinking step {i}: the cup is on shelf {i}." for i in range(40))


@pytest.fixture(scope="module")
def model_path():
    from bolt_agent.core.models import resolve_model

    return str(resolve_model("", kind="llm"))


def _engine(model_path, **kw) -> LlamaEngine:
    return LlamaEngine(LlamaConfig(model_path, n_ctx=4096, n_threads=2, **kw)).load()


def test_defaults_use_the_small_sliding_window_cache(model_path):
    eng = _engine(model_path)
    try:
        assert eng.llama_kwargs()["swa_full"] is False
        assert eng.swa_guard is not None and eng.swa_guard.n_swa == 512
    finally:
        eng.close()
    full = _engine(model_path, swa_full=True)
    try:
        assert full.swa_guard is None  # a full-size cache never loses the window
    finally:
        full.close()


def test_rollback_past_the_window_restores_the_checkpoint(model_path):
    """A long generation (300 forced tokens) overwrites the window before the prompt's end; the
    next prompt shares the old prompt only. The guard restores the checkpoint taken when the
    second token was asked for, so the reuse stays and the window is back in the cache.
    (Logits are not compared with a full-size cache: the cell order alone moves them by up to
    ~1-2 on this model, as llama.cpp documents for swa_full; see docs/benchmarks.md.)"""
    eng = _engine(model_path)
    try:
        first = eng.start(HISTORY + " Question: where is the cup?")
        first.sample(GREEDY)
        first.sample(GREEDY)  # the second token: the SWA checkpoint is taken here
        first.force(" " + THOUGHT)
        prompt = HISTORY + " Question: where is the plate?"
        keep = _shared(eng.tokenize(prompt), eng.llm._input_ids.tolist())
        n_swa = eng.swa_guard.n_swa
        assert first.n_past - keep > 300  # more than the 256 cells past the window
        assert _pos_min(eng) > keep - n_swa  # the live cache lost the window before `keep`
        second = eng.start(prompt)
        assert eng.swa_guard.restored == 1 and eng.swa_guard.refilled == 0
        assert second.stats.reused_tokens == keep
        # the window is cached again (it was ~300 positions short), all of it: the checkpoint
        # holds the cells the cache held when it was taken, from ~770 positions back
        assert _pos_min(eng) <= keep - n_swa
        assert second.sample(GREEDY).id >= 0
    finally:
        eng.close()


def _pos_min(engine: LlamaEngine) -> int:
    return capi.llama_memory_seq_pos_min(capi.llama_get_memory(engine.llm._ctx.ctx), 0)


def _last_logits(engine: LlamaEngine):
    """A copy of the logits of the last decoded position."""
    import numpy as np

    logits = capi.llama_get_logits_ith(engine.llm._ctx.ctx, -1)
    return np.ctypeslib.as_array(logits, (engine.llm.n_vocab(),)).copy()


def _shared(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_rollback_without_checkpoint_prefills_from_the_start(model_path, caplog):
    eng = _engine(model_path)
    try:
        first = eng.start(HISTORY + " Question: where is the cup?")
        first.sample(GREEDY)  # one token only: no checkpoint yet
        first.force(" " + THOUGHT)
        second = eng.start(HISTORY + " Question: where is the plate?")
        assert eng.swa_guard.refilled == 1
        assert second.stats.reused_tokens == 0
        assert "the whole prompt is prefilled again" in caplog.text  # said, not only counted
    finally:
        eng.close()


def test_short_rollbacks_keep_the_live_cache(model_path):
    eng = _engine(model_path)
    try:
        for q in ("Where is the cup?", "Where is the plate?", "Is it red?"):
            s = eng.start(HISTORY + " Question: " + q)
            for _ in range(4):
                s.sample(GREEDY)
        assert eng.swa_guard.restored == 0 and eng.swa_guard.refilled == 0
        assert s.stats.reused_tokens > 0.9 * s.stats.prompt_tokens
    finally:
        eng.close()


def test_the_last_tokenization_is_reused_and_not_shared(model_path):
    eng = _engine(model_path)
    try:
        text = HISTORY + " Question: where is the cup?"
        n = eng.count_tokens(text)
        tokens = eng.tokenize(text)
        assert len(tokens) == n
        tokens.append(-1)  # the caller's list is a copy
        assert eng.tokenize(text) == tokens[:-1]
        assert eng.tokenize(text + "!") != tokens[:-1]
    finally:
        eng.close()


def test_a_stable_prefix_checkpoint_serves_a_prompt_that_departs_far_back(model_path):
    """Per-turn few-shot examples sit between the history and the user's words, so the next
    turn's prompt departs from this one right after the history: further back than the small
    window can roll. The checkpoint taken at the stable prefix (``mark_stable``) serves it; the
    second-token checkpoint alone (at the prompt's end) cannot."""
    examples = " ".join(f"Example {i}: a nod is a happy animation." for i in range(40))
    later = " Then the user asked about the plate."

    def run(mark: bool) -> tuple[int, int, int, int]:
        eng = _engine(model_path)
        try:
            if mark:
                eng.mark_stable(HISTORY)
            first = eng.start(HISTORY + " " + examples + " Question: where is the cup?")
            first.sample(GREEDY)
            first.sample(GREEDY)
            first.force(" " + THOUGHT[:400])
            second = eng.start(HISTORY + later + " Question: is it red?")
            guard = eng.swa_guard
            n_history = len(eng.tokenize(HISTORY))
            return second.stats.reused_tokens, guard.restored, guard.refilled, n_history
        finally:
            eng.close()

    reused, restored, refilled, n_history = run(mark=True)
    assert (restored, refilled) == (1, 0) and n_history - 2 <= reused <= n_history
    reused, restored, refilled, _ = run(mark=False)
    assert refilled == 1 and reused == 0  # everything prefilled again


def test_the_stable_prefix_checkpoint_is_taken_when_the_cache_already_ends_there(model_path):
    """llm_node's order on a silence: the end-of-turn probe prefills the history and the words
    (the cache then ends where the words begin), and the turn puts its few-shot examples in
    before the words: the cache is reused exactly up to the stable prefix. Its checkpoint must
    still be taken there, or the next turn, departing far back, prefills everything again."""
    examples = " ".join(f"Example {i}: a nod is a happy animation." for i in range(40))
    eng = _engine(model_path)
    try:
        probe = eng.start(HISTORY + " Question: where is the cup?")  # the probe's prefill
        eng.mark_stable(HISTORY)
        first = eng.start(HISTORY + " " + examples + " Question: where is the cup?")
        guard, n_history = eng.swa_guard, len(eng.tokenize(HISTORY))
        # reused exactly up to the anchor (where the examples go in), and checkpointed there
        assert n_history - 2 <= first.stats.reused_tokens <= n_history
        assert guard.anchor_pos == first.stats.reused_tokens, guard.held()
        assert probe.stats.prompt_tokens > n_history
        first.sample(GREEDY)
        first.sample(GREEDY)
        first.force(" " + THOUGHT[:400])
        second = eng.start(HISTORY + " Then the user asked about the plate. Question: is it red?")
        assert (guard.restored, guard.refilled) == (1, 0), (guard.restored, guard.refilled)
        assert n_history - 2 <= second.stats.reused_tokens <= n_history
    finally:
        eng.close()


def test_a_sampled_token_is_handed_out_before_its_forward_pass(model_path):
    """The session gives each token out first and runs its forward pass when the next one is
    asked for (or text is forced), so the caller's parser and the TTS get it a decode step
    sooner; the greedy tokens are exactly those of evaluating each token at once."""
    import numpy as np

    eng = _engine(model_path)
    try:
        prompt = "1, 2, 3, 4, 5, 6,"  # (a base model counts on, no end of text)
        n = eng.count_tokens(prompt)
        session = eng.start(prompt)
        first = session.sample(GREEDY)
        assert eng.llm.n_tokens == n and session.n_past == n + 1  # out, not yet evaluated
        ids = [first.id] + [session.sample(GREEDY).id for _ in range(7)]
        assert eng.llm.n_tokens == n + 7 and list(eng.llm.input_ids[n : n + 7]) == ids[:7]
        forced = session.force(" and")
        assert eng.llm.n_tokens == n + 8 + len(forced)  # the pending token went first
        assert list(eng.llm.input_ids[n : n + 8]) == ids
        session.sample(GREEDY)
        session.close()  # the step ends: the last token's pass is skipped, and counted
        assert session.stats.generated == 9 and session.stats.skipped_passes == 1
        assert session.stats.evaluated == 8 and eng.llm.n_tokens == n + 8 + len(forced)

        eng.llm.reset()  # reference: each token evaluated as soon as it is chosen
        eng.llm.eval(eng.tokenize(prompt))
        ref = []
        for _ in range(8):
            ref.append(int(np.argmax(_last_logits(eng))))
            eng.llm.eval([ref[-1]])
        assert ids == ref
    finally:
        eng.close()


EXAMPLES = " ".join(f"Example {i}: a nod is a happy animation." for i in range(40))
# a turn without few-shot exchanges whose prompt still runs far past the history (~400 tokens)
SCENE = " ".join(f"Scene note {i}: the lamp is on and the door is shut." for i in range(35))


def test_a_rollback_the_cache_covers_cuts_the_checkpoint_back_instead_of_dropping_it(model_path):
    """The end-of-turn probe rolls back a word or two, before the held answer's checkpoint; the
    live cache still holds that window, so nothing is restored. The checkpoint is cut back to
    the probe's point (the K/V of a position depends only on the tokens up to it), and serves a
    later rollback there once a long generation has overwritten the window."""
    eng = _engine(model_path)
    try:
        guard = eng.swa_guard
        held = eng.start(HISTORY + " Question: where is the cup?")
        held.sample(GREEDY)
        held.sample(GREEDY)  # the recent checkpoint, at the prompt's end
        taken = guard.held()["recent"][0]
        probe = eng.start(HISTORY + " Question: where is the plate?")
        keep = probe.stats.reused_tokens
        assert 0 < keep < taken and (guard.restored, guard.refilled) == (0, 0)
        assert guard.held()["recent"][0] == keep  # cut back, not dropped
        probe.sample(GREEDY)  # one token: this session takes no checkpoint of its own
        probe.force(" " + THOUGHT)  # overwrites the window before `keep`
        assert _pos_min(eng) > keep - guard.n_swa
        later = eng.start(HISTORY + " Question: where is the bowl?")
        assert (guard.restored, guard.refilled) == (1, 0), (guard.restored, guard.refilled)
        assert later.stats.reused_tokens == keep
        # the whole window before `keep` came back: a copy of the sequence alone (llama.cpp
        # leaves out the cells outside the window of its last position) would lack its oldest
        # `taken - keep` positions, and decoding on would attend to a truncated window
        assert _pos_min(eng) <= keep - guard.n_swa
    finally:
        eng.close()


@pytest.mark.parametrize("speculative", ["none", "ngram"])
def test_a_second_token_checkpoint_leaves_the_stable_prefix_one(model_path, speculative):
    """The held preemptive answer to the first half of a sentence has no few-shot exchange, so
    no anchor: its second-token checkpoint must not replace the anchor checkpoint the
    start-of-speech prefill took. Here its prompt runs ~400 tokens past the history, so its
    own checkpoint no longer holds the window there; the next turn, departing at the history's
    end, is served by the anchor one (with one slot: the whole prompt prefilled again).
    Also through the speculative decoder's prefill and steps (prompt lookup here; DFlash on the
    Jetson goes through the same session code)."""
    eng = _engine(model_path, speculative=speculative)
    try:
        guard, n_history = eng.swa_guard, len(eng.tokenize(HISTORY))
        eng.mark_stable(HISTORY)
        eng.start(HISTORY + " " + EXAMPLES + " Question: where is the cup?")
        anchor = guard.anchor_pos
        assert n_history - 2 <= anchor <= n_history
        held = eng.start(HISTORY + " " + SCENE + " Question: where is the cup?")
        held.step(GREEDY, None, 4)  # (with a drafter: up to 4 tokens per step, drafts checked)
        held.step(GREEDY, None, 4)  # the second step: the recent checkpoint
        recent_pos, recent_min = guard.held()["recent"]
        assert recent_pos > anchor and recent_min > anchor - guard.n_swa  # can't serve it
        held.force(" " + THOUGHT[:400])
        assert guard.anchor_pos == anchor
        restored = guard.restored
        nxt = eng.start(HISTORY + " Then the user asked about the plate. Question: is it red?")
        assert (guard.restored - restored, guard.refilled) == (1, 0), guard.held()
        assert n_history - 2 <= nxt.stats.reused_tokens <= anchor
    finally:
        eng.close()


def test_an_anchor_checkpoint_from_a_cache_that_lost_the_window_keeps_the_older_one(model_path):
    """A cache that holds fewer than n_swa positions before a new stable prefix (the eighth
    round's code left one: 448 of 512) gives a checkpoint that serves no rollback, so the older
    anchor checkpoint stays. The engine's prefills no longer leave such a cache: the state is
    made directly (a rollback on the live cache past its window), to test the safety net."""
    eng = _engine(model_path)
    try:
        guard, llm = eng.swa_guard, eng.llm
        eng.mark_stable(HISTORY)
        first = eng.start(HISTORY + " " + EXAMPLES + " Question: where is the cup?")
        anchor = guard.anchor_pos
        first.sample(GREEDY)
        first.force(" " + THOUGHT)  # the live cache is now far past the examples
        later_anchor = _pos_min(eng) + 100  # inside the examples: the same tokens
        assert anchor < later_anchor < first.stats.prompt_tokens - 10
        llm.n_tokens = later_anchor
        llm.eval([])  # drops the cells from there on
        assert _pos_min(eng) > max(-1, later_anchor - guard.n_swa)  # cells left, too few
        before = guard.held()["anchor"]
        guard.checkpoint(anchor=True)
        assert guard.held()["anchor"] == before and guard.kept_anchor == 1
        assert before[0] == anchor and before[1] <= anchor - guard.n_swa  # it still serves
    finally:
        eng.close()


def test_a_context_of_several_sequences_is_refused_with_the_small_window(model_path):
    """The guard's checkpoints copy and restore the whole sliding-window cache, every sequence
    in it: a context of several (llama-cpp-python's embedding mode) is refused at load, with the
    way out in the message."""
    from bolt_agent.core.llm.types import EngineError

    with pytest.raises(EngineError, match=r"one sequence.*swa_full"):
        _engine(model_path, extra={"embedding": True})
    full = _engine(model_path, swa_full=True, extra={"embedding": True})
    full.close()  # a full-size window needs no guard


def _logits_after_a_restore(model_path, flash_attn: str, cut: int, trimmed: bool = True):
    """Checkpoint at 1,000 tokens, decode 350 more (the live cache loses the window), roll back
    to ``1000 - cut`` (the checkpoint is cut back and restored), decode the cut tokens again:
    the last position's logits."""
    eng = _engine(model_path, flash_attn=flash_attn)
    try:
        llm, guard = eng.llm, eng.swa_guard
        tokens = eng.tokenize(HISTORY + " " + THOUGHT)
        assert len(tokens) > 1350
        llm.eval(tokens[:1000])
        whole = capi.llama_state_seq_get_size_ext(llm._ctx.ctx, ALL_CELLS, SWA_ONLY)
        assert _pos_min(eng) == 1000 - 768  # every cell of the cache holds a position
        guard.checkpoint()
        floor = 1000 - guard.n_swa - CUT_BACK_TOKENS if trimmed else 1000 - 768
        assert guard.held()["recent"] == (1000, floor)
        if trimmed:  # the copy keeps the window and the cut-back margin only: 576 of 768 cells
            assert abs(guard.held_bytes() / whole - 576 / 768) < 0.01
        llm.eval(tokens[1000:1350])
        keep = 1000 - cut
        assert _pos_min(eng) > keep - guard.n_swa  # the live cache lost the window of keep
        assert guard.safe_keep(keep) == keep and guard.restored == 1
        assert _pos_min(eng) == floor and keep - guard.n_swa >= floor
        llm.n_tokens = keep
        llm.eval(tokens[keep:1000])
        return _last_logits(eng), eng.tokenize(HISTORY + " " + THOUGHT)[:1000]
    finally:
        eng.close()


@pytest.mark.parametrize(
    ("cut", "flash_attn"),
    [(10, "off"), (CUT_BACK_TOKENS, "off"), (CUT_BACK_TOKENS, "on")],
    ids=["10-transposed-v", "margin-transposed-v", "margin-v-rows"],
)
def test_a_checkpoint_restored_before_its_end_decodes_as_a_fresh_cache_would(
    model_path, monkeypatch, cut, flash_attn
):
    """A checkpoint taken at 1,000 tokens, cut back by ``cut`` and restored once the live cache
    has lost that window: the cut tokens decoded again give the logits of decoding the 1,000
    tokens into an empty cache (a copy missing the oldest positions of the window would attend
    to fewer keys), and exactly those of a restore of the untrimmed copy. The copy keeps the
    window and ``CUT_BACK_TOKENS`` only, so a cut-back of that many needs its oldest cell. With
    flash attention llama.cpp stores V by rows (the GPU's layout), without it transposed; on
    this CPU flash attention's sums depend on the micro-batches (two fresh decodes of the same
    tokens split differently differ by 0.76), so there only the untrimmed restore is compared."""
    import numpy as np

    from bolt_agent.core.llm.llama import swa_cache

    restored, tokens = _logits_after_a_restore(model_path, flash_attn, cut)
    monkeypatch.setattr(swa_cache, "CUT_BACK_TOKENS", 10**6)  # copies of the whole cache
    whole, _ = _logits_after_a_restore(model_path, flash_attn, cut, trimmed=False)
    assert np.array_equal(restored, whole)
    if flash_attn == "off":
        eng = _engine(model_path)
        try:
            eng.llm.eval(tokens)
            fresh = _last_logits(eng)
        finally:
            eng.close()
        assert int(restored.argmax()) == int(fresh.argmax())
        assert float(np.abs(restored - fresh).max()) < 1e-3


def test_a_rollback_deeper_than_the_cut_back_margin_drops_the_checkpoint(model_path):
    """A checkpoint keeps ``CUT_BACK_TOKENS`` positions before its window and no more, so a
    rollback further back than that cannot be served by it: it is dropped (and counted), and
    the rollback falls to the live cache, here still whole."""
    eng = _engine(model_path)
    try:
        llm, guard = eng.llm, eng.swa_guard
        tokens = eng.tokenize(HISTORY + " " + THOUGHT)
        llm.eval(tokens[:1000])
        guard.checkpoint()
        held = guard.held_bytes()
        assert held > 0
        assert guard.safe_keep(1000 - CUT_BACK_TOKENS) == 1000 - CUT_BACK_TOKENS
        assert guard.held()["recent"][0] == 1000 - CUT_BACK_TOKENS  # cut back, kept
        assert (guard.cut_backs, guard.cut_back_deepest, guard.dropped) == (
            1,
            CUT_BACK_TOKENS,
            0,
        )
        assert guard.safe_keep(1000 - CUT_BACK_TOKENS - 1) == 1000 - CUT_BACK_TOKENS - 1
        assert guard.held()["recent"] == (-1, -1) and guard.dropped == 1
        assert guard.held_bytes() == 0  # its memory went with it
        assert (guard.restored, guard.refilled) == (0, 0)  # the live cache served both
    finally:
        eng.close()

"""The speculative decoding loop shared by every drafter.

One :meth:`SpecSession.step`: take the pending token (the last one emitted, not yet in the target's
KV cache), ask the drafter for up to ``n`` draft tokens, decode ``[pending, d1..dn]`` on the target
in one batch with logits for every row, then walk the rows: sample the target's own token at row
``j`` with the session's sampler (plain chain or grammar), emit it, and go on only while it equals
draft ``j+1``. Every emitted token is exactly the token non-speculative decoding would have sampled
at that point (same logits, same sampler, one sampler call per emitted token, in order), so the
output distribution is the target's, greedy output is identical, and a seeded sampler gives the
same text. Rejected rows are removed from the target's cache (and never reach the drafter's).

A step also ends right after a control token or a token that completes a thinking marker: the
turn runner switches phase (thinking ↔ answer, grammar off/on) between steps, so a phase change
must never fall inside one; budget forcing is exact because the runner passes the room as `limit`.
"""

from __future__ import annotations

import ctypes
import time
from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np
from llama_cpp import llama_cpp as capi

from bolt_agent.core.llm.markers import PHASE_MARKERS
from bolt_agent.core.llm.types import EngineError, SamplingParams, SessionStats, Token

_CONTROL = getattr(capi, "LLAMA_TOKEN_ATTR_CONTROL", 1 << 3)


class Drafter(ABC):
    """Proposes draft tokens; optionally mirrors the target's KV cache (DFlash features)."""

    name: str = "?"
    n_max: int = 0

    def synced(self) -> int:
        """How many leading target positions the drafter's own state matches (a cap on reuse)."""
        return 1 << 30

    def truncate(self, n_keep: int) -> None:  # noqa: B027 (optional hook)
        """The target's cache now holds only its first `n_keep` positions."""

    def on_decoded(self, pos0: int, n_rows: int) -> None:  # noqa: B027 (optional hook)
        """Rows ``0..n_rows-1`` of the target's last decode are committed at ``pos0...``."""

    @abstractmethod
    def propose(self, history: np.ndarray, pending: int, n: int) -> list[int]:
        """Up to `n` tokens to follow ``history + [pending]`` (history: the target's cache)."""

    def memory(self) -> dict[str, int]:
        return {}

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Free native resources (the engine calls this before freeing the target)."""


class SpecSession:
    """The speculative side of one ``LlamaSession`` (same cache, sampler and text decoder)."""

    def __init__(
        self,
        llm,
        drafter: Drafter,
        stats: SessionStats,
        sampler_for: Callable[[SamplingParams, str | None], object],
        text: Callable[[int], str],
    ):
        self._llm = llm
        self._ctx = llm._ctx.ctx
        self._mem = capi.llama_get_memory(self._ctx)
        self._vocab = llm._model.vocab
        self._n_vocab = llm.n_vocab()
        self._drafter = drafter
        self.stats = stats
        self._sampler_for = sampler_for
        self._text = text
        self._pending: int | None = None
        self._saved_last: np.ndarray | None = None
        self._tail = ""  # recent emitted text, to see phase markers split over tokens

    # --- cache ---------------------------------------------------------------------------------
    @property
    def n_past(self) -> int:
        return self._llm.n_tokens + (self._pending is not None)

    def _decode(self, tokens: list[int], logits_all: bool, commit: bool) -> None:
        """``Llama.eval`` with the drafter kept in step after every ``n_batch`` chunk."""
        llm = self._llm
        capi.llama_memory_seq_rm(self._mem, -1, llm.n_tokens, -1)
        for i in range(0, len(tokens), llm.n_batch):
            chunk = tokens[i : i + llm.n_batch]
            n_past = llm.n_tokens
            llm._batch.set_batch(batch=chunk, n_past=n_past, logits_all=logits_all)
            rc = capi.llama_decode(self._ctx, llm._batch.batch)
            if rc != 0:
                raise EngineError(f"llama_decode returned {rc} at position {n_past}")
            llm.input_ids[n_past : n_past + len(chunk)] = chunk
            llm.n_tokens += len(chunk)
            if commit:
                self._drafter.on_decoded(n_past, len(chunk))

    def reusable(self, keep: int) -> int:
        """How many of `keep` cached tokens a prefill can reuse: the drafter's state may lag."""
        return max(0, min(keep, self._drafter.synced()))

    def prefill(self, prompt: list[int], keep: int) -> None:
        """Decode `prompt` reusing `keep` cached tokens (at most ``reusable(keep)``: the caller
        has the sliding-window guard check exactly the count that is reused)."""
        if keep > (held := self.reusable(keep)):
            raise EngineError(f"prefill reusing {keep} tokens; the drafter holds {held}")
        self._drafter.truncate(keep)
        self._llm.n_tokens = keep
        self._decode(prompt[keep:], logits_all=False, commit=True)
        self._pending = None

    def force(self, tokens: list[int]) -> list[int]:
        """Feed `tokens` after the pending one; returns those that fit the context."""
        llm = self._llm
        pending = self._pending
        # an end-of-generation token the caller overrides by forcing text never enters the cache
        ended = pending is not None and capi.llama_vocab_is_eog(self._vocab, pending)
        lead = [] if pending is None or ended else [pending]
        tokens = tokens[: max(0, llm.n_ctx() - llm.n_tokens - len(lead))]
        if tokens:
            self._decode(lead + tokens, logits_all=False, commit=True)
            self._pending = None
            self._tail = ""
        elif ended:
            self._pending = None
        return tokens

    # --- sampling ------------------------------------------------------------------------------
    def _sample(self, sampler, row: int, n_rows: int) -> int:
        """The session sampler's token for logits row `row` of the last decode (-1: last)."""
        raw = getattr(sampler, "sampler", None)  # the plain chain exposes its llama_sampler
        if raw is not None:
            return capi.llama_sampler_sample(raw, self._ctx, row)
        # samplers that read only the last row (grammar): show them row `row` there
        if 0 <= row < n_rows - 1:
            last = capi.llama_get_logits_ith(self._ctx, -1)
            if self._saved_last is None:
                self._saved_last = np.ctypeslib.as_array(last, shape=(self._n_vocab,)).copy()
            src = capi.llama_get_logits_ith(self._ctx, row)
            ctypes.memmove(last, src, self._n_vocab * 4)
        elif self._saved_last is not None:
            last = capi.llama_get_logits_ith(self._ctx, -1)
            ctypes.memmove(last, self._saved_last.ctypes.data, self._n_vocab * 4)
            self._saved_last = None
        return sampler.sample(self._ctx)

    def _emit(self, token: int, out: list[Token]) -> bool:
        """Append `token`; False when the step must end after it (end of generation/control)."""
        if self.stats.first_token_at is None:
            self.stats.first_token_at = time.monotonic()
        if capi.llama_vocab_is_eog(self._vocab, token):
            out.append(Token(id=token, text="", is_eog=True))
            return False
        text = self._text(token)
        out.append(Token(id=token, text=text))
        self.stats.generated += 1
        control = capi.llama_vocab_get_attr(self._vocab, token) & _CONTROL
        return not control and not self._completes_marker(text)

    def _completes_marker(self, text: str) -> bool:
        prev = self._tail
        joined = prev + text
        self._tail = joined[-32:]
        for marker in PHASE_MARKERS:
            if joined.find(marker, max(0, len(prev) - len(marker) + 1)) >= 0:
                return True
        return False

    # --- the step ------------------------------------------------------------------------------
    def step(self, sampling: SamplingParams, grammar: str | None, limit: int) -> list[Token]:
        t0 = time.monotonic()
        try:
            return self._step(self._sampler_for(sampling, grammar), max(1, limit))
        finally:
            self.stats.decode_s += time.monotonic() - t0

    def _step(self, sampler, limit: int) -> list[Token]:
        llm = self._llm
        n_ctx = llm.n_ctx()
        out: list[Token] = []
        if self._pending is None:  # right after prefill or force: the logits are ready
            if llm.n_tokens >= n_ctx:
                return [Token(id=-1, text="", is_eog=True)]
            token = self._sample(sampler, -1, 1)
            self._pending = token
            if not self._emit(token, out) or len(out) >= limit:
                return out
        pending = self._pending
        if capi.llama_vocab_is_eog(self._vocab, pending):  # asked again after the end
            return out or [Token(id=pending, text="", is_eog=True)]
        base = llm.n_tokens
        if base + 1 >= n_ctx:
            return out or [Token(id=-1, text="", is_eog=True)]
        room = min(limit - len(out) - 1, n_ctx - base - 2, llm.n_batch - 1)
        drafts: list[int] = []
        if room > 0 and self._drafter.n_max > 0:
            history = llm.input_ids[:base]
            drafts = [int(t) for t in self._drafter.propose(history, pending, room)][:room]
        rows = [pending, *drafts]
        self._decode(rows, logits_all=True, commit=False)
        accepted = 0
        last_row = 0
        for j in range(len(rows)):
            token = self._sample(sampler, j, len(rows))
            go_on = self._emit(token, out)
            if j < len(drafts) and token == drafts[j]:
                accepted += 1
            else:
                go_on = False
            self._pending, last_row = token, j
            if not go_on:
                break
        self._saved_last = None
        committed = last_row + 1  # rows 0..last_row precede the pending token
        llm.n_tokens = base + committed
        capi.llama_memory_seq_rm(self._mem, -1, llm.n_tokens, -1)
        self._drafter.on_decoded(base, committed)
        if drafts:
            self.stats.drafted += len(drafts)
            self.stats.accepted += accepted
            self.stats.draft_steps += 1
        return out

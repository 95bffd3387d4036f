"""Prefix reuse with a sliding-window KV cache that is not full-size (``swa_full=False``).

llama.cpp then gives the sliding-window (SWA) layers ``n_swa + n_ubatch`` cells (padded to 256)
instead of ``n_ctx``, and overwrites the oldest positions once the conversation is longer. Rolling
the cache back to a shared prefix (a new prompt that diverges from what was just generated) is
only valid when the ``n_swa`` positions before the rollback point are still cached: a generation
that ran further past that point than the cells beyond ``n_swa`` (256 on the bundled model; a
long thought that the next prompt does not repeat) has overwritten them, and decoding on would
silently attend to a truncated window.

``SwaGuard`` does what llama-server does with its context checkpoints: it saves the SWA cells
and restores them when a rollback reaches before the cached window; the prefill then restarts at
the checkpoint. Without a usable checkpoint it asks for a full prefill (correct, slow: ~10 s for
3K tokens on two cores), logs and counts it.

Two checkpoints, because one was not enough (a 9-10 s prefill in 4 of 6 twenty-turn runs):

- the *anchor* one, at the stable prefix a turn marks (``TextEngine.mark_stable``: the history
  before this turn's few-shot exchange, where the next prompts depart). Only another anchor
  checkpoint replaces it, and not one of a cache that has lost that window (it would serve no
  rollback; the engine's own prefills do not leave such a cache, this is a safety net);
- the *recent* one, when a generation asks for its second token (off the time to first token),
  for prompts that carry on after this one's end (a turn without few-shot exchanges).

A held preemptive answer has no few-shot exchange: with one slot, its second-token checkpoint
replaced the anchor one, and the next rollback to the anchor found nothing. A rollback to a point
before a checkpoint *cuts it back* to that point while it still holds the window there (the K/V
of a position depends only on the tokens up to it): dropping it instead lost the anchor
checkpoint to the end-of-turn probe's one-word rollbacks. For that a checkpoint copies every cell
of the SWA cache (``ALL_CELLS``), then leaves out the cells older than its window and
``CUT_BACK_TOKENS`` positions (``kv_state``): the cache keeps up to 256 positions more than a
checkpoint that serves cut-backs of that depth needs (768 cells: 9.0 MB a copy on the bundled
model, 6.8 MB trimmed). A rollback further back drops the checkpoint and frees it.

The copies are taken when the slot is set, not deferred until a decode may take the window:
llama.cpp's cell allocator can purge more positions than a decode adds (a 59-token decode moved
the oldest cached position by 117 in a fuzz of prompts, rollbacks and restores), so no bound
computed before a decode says when the last moment is.
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass

import numpy as np
from llama_cpp import llama_cpp as capi

from bolt_agent.core.llm.llama.kv_state import drop_cells_before

SWA_ONLY = capi.LLAMA_STATE_SEQ_FLAGS_SWA_ONLY
SEQ = 0  # the engine decodes one sequence
#: checkpoints copy the whole SWA cache (it holds the engine's one sequence): llama.cpp's copy of
#: a sequence leaves out the cells outside the window of its last position, so it holds only
#: [pos - n_swa, pos) and a rollback before ``pos`` restored from it would decode on with the
#: oldest positions of its window missing
ALL_CELLS = -1
#: how far before its end a checkpoint can still be cut back (tokens). The cut-backs are the
#: end-of-turn probe's revised words and a resumed sentence's rollback into a held answer's
#: prompt: 26 tokens at most from the copy's end in 20-turn runs (``swa_cut_back_deepest`` on
#: /diagnostics). A deeper rollback drops the checkpoint (the other one, the live cache or a
#: whole-prompt prefill serves it instead); the next turn's return to the stable prefix does,
#: past the held answer's checkpoint, where the anchor one serves it.
CUT_BACK_TOKENS = 64
_BYTES = ctypes.POINTER(ctypes.c_uint8)
log = logging.getLogger(__name__)


@dataclass
class _Checkpoint:
    """The SWA cells of one cache state: positions [pos_min, pos) of the tokens [0, pos)."""

    name: str
    buf: np.ndarray | None = None  # uint8, llama.cpp's state layout (kv_state)
    pos: int = -1  # tokens it holds (-1: none)
    pos_min: int = -1  # its oldest cached position
    taken_at: int = -1  # tokens it held when copied (cut-backs count from there)


class SwaGuard:
    """Rollback safety for one llama context whose SWA cache is not full-size."""

    def __init__(self, llm, n_swa: int) -> None:
        self._llm = llm
        self._ctx = llm._ctx.ctx
        self._mem = capi.llama_get_memory(self._ctx)
        self.n_swa = n_swa
        self._anchor = _Checkpoint("anchor")
        self._recent = _Checkpoint("recent")
        self.restored = 0  # rollbacks served by a checkpoint
        self.refilled = 0  # rollbacks that needed a full prefill
        self.kept_anchor = 0  # anchor checkpoints not taken: the cache had lost that window
        self.cut_backs = 0  # checkpoints cut back to a rollback before their end
        self.cut_back_deepest = 0  # tokens, the deepest of them
        self.dropped = 0  # checkpoints a rollback went too far back into

    @classmethod
    def for_llama(cls, llm, swa_full: bool) -> SwaGuard | None:
        """A guard when the model has sliding-window layers and the cache is not full-size."""
        n_swa = int(capi.llama_model_n_swa(llm._model.model))
        if n_swa <= 0 or swa_full:
            return None
        if (n_seq := capi.llama_n_seq_max(llm._ctx.ctx)) != 1:
            # its copies and restores take the whole SWA cache, every sequence in it
            raise ValueError(
                f"a small sliding-window cache needs a context of one sequence, not {n_seq} "
                "(or swa_full: true)"
            )
        return cls(llm, n_swa)

    @property
    def anchor_pos(self) -> int:
        """Tokens the anchor checkpoint holds (-1: none)."""
        return self._anchor.pos

    def held(self) -> dict[str, tuple[int, int]]:
        """Each checkpoint's (tokens held, oldest cached position); (-1, -1) when none."""
        return {cp.name: (cp.pos, cp.pos_min if cp.pos >= 0 else -1)
                for cp in (self._anchor, self._recent)}  # fmt: skip

    def held_bytes(self) -> int:
        """The memory the checkpoints hold."""
        return sum(cp.buf.size for cp in (self._anchor, self._recent) if cp.buf is not None)

    def _covered(self, pos_min: int, keep: int) -> bool:
        """Whether a cache holding [pos_min, keep) serves the window of position ``keep``.

        (llama.cpp's mask lets the query at ``keep`` see ``keep - n_swa + 1`` on; this asks for
        one position more, as llama-server's ``pos_min_thold`` does.)"""
        return keep == 0 or 0 <= pos_min <= max(0, keep - self.n_swa)

    def _serves(self, cp: _Checkpoint, keep: int) -> int:
        """How many of ``keep`` tokens restoring ``cp`` gives back (0: it cannot serve)."""
        k = min(keep, cp.pos)
        return k if cp.buf is not None and k > 0 and self._covered(cp.pos_min, k) else 0

    def safe_keep(self, keep: int) -> int:
        """How many of ``keep`` cached tokens a prefill may reuse (restores a checkpoint when
        the live cache lost the window; 0 when nothing usable is left). The positions from the
        returned count on are about to be replaced: checkpoints past it are cut back."""
        live = capi.llama_memory_seq_pos_min(self._mem, SEQ)
        if keep > 0 and not self._covered(live, keep):
            keep = self._restore(keep, live)
        for cp in (self._anchor, self._recent):
            if cp.pos > keep:
                if keep > 0 and self._covered(cp.pos_min, keep):
                    self.cut_backs += 1
                    self.cut_back_deepest = max(self.cut_back_deepest, cp.taken_at - keep)
                    cp.pos = keep
                else:  # its memory goes too: it serves nothing until the slot is set again
                    self.dropped += keep > 0  # (0: a new conversation)
                    log.debug(f"{cp.name} checkpoint at {cp.pos} dropped: rollback to {keep}")
                    cp.pos, cp.buf = -1, None
        return keep

    def _restore(self, keep: int, live: int) -> int:
        # the one that gives back the most first; the other if llama.cpp refuses it
        for cp in sorted((self._anchor, self._recent), key=lambda c: -self._serves(c, keep)):
            k = self._serves(cp, keep)
            if k and capi.llama_state_seq_set_data_ext(
                self._ctx, cp.buf.ctypes.data_as(_BYTES), cp.buf.size, ALL_CELLS, SWA_ONLY
            ):
                self.restored += 1
                return k
        self.refilled += 1
        held = ", ".join(f"{name} at {pos} holding from {low}"
                         for name, (pos, low) in self.held().items())  # fmt: skip
        log.warning(
            f"sliding-window cache: no checkpoint for a rollback to {keep} tokens (checkpoints: "
            f"{held}; live cache from {live}, window {self.n_swa}): the whole "
            "prompt is prefilled again"
        )
        return 0

    def checkpoint(self, anchor: bool = False) -> None:
        """Save the SWA cells of the cached positions: into the anchor slot (``anchor``, at a
        turn's stable prefix) or the recent one (the second token of a generation)."""
        n = self._llm.n_tokens
        pos_min = capi.llama_memory_seq_pos_min(self._mem, SEQ)
        cp = self._anchor if anchor else self._recent
        if anchor and not self._covered(pos_min, n):
            # a cache that no longer holds the window before the anchor: a checkpoint of it
            # serves no rollback at all (each needs that window), so the older one stays
            self.kept_anchor += 1
            return
        cp.buf = None  # (its memory goes before the next copy is made)
        size = capi.llama_state_seq_get_size_ext(self._ctx, ALL_CELLS, SWA_ONLY)
        buf = np.empty(size, dtype=np.uint8)  # (not zeroed: the copy writes every byte it uses)
        got = capi.llama_state_seq_get_data_ext(
            self._ctx, buf.ctypes.data_as(_BYTES), size, ALL_CELLS, SWA_ONLY
        )
        cp.buf, cp.pos, cp.pos_min, cp.taken_at = buf[:got], (n if got else -1), pos_min, n
        floor = n - self.n_swa - CUT_BACK_TOKENS
        if got and pos_min < floor and (kept := drop_cells_before(cp.buf, floor)) is not None:
            cp.buf, cp.pos_min = kept

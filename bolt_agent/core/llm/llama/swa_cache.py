"""Prefix reuse with a sliding-window KV cache that is not full-size (``swa_full=False``).

llama.cpp then gives the sliding-window (SWA) layers ``n_swa + n_ubatch`` cells instead of
``n_ctx``, and overwrites the oldest positions once the conversation is longer. Rolling the cache
back to a shared prefix (a new prompt that diverges from what was just generated) is only valid
when the ``n_swa`` positions before the rollback point are still cached: a generation that ran
more than ``n_ubatch`` tokens past that point (a long thought that the next prompt does not
repeat) has overwritten them, and decoding on would silently attend to a truncated window.

``SwaGuard`` does what llama-server does with its context checkpoints: it saves the SWA cells
once per generation (when the second token is requested: off the time to first token) and
restores them when a rollback reaches before the cached window; the prefill then restarts at the
checkpoint. Without a usable checkpoint it asks for a full prefill (correct, slow) and counts it.
"""

from __future__ import annotations

import ctypes
import logging

from llama_cpp import llama_cpp as capi

SWA_ONLY = capi.LLAMA_STATE_SEQ_FLAGS_SWA_ONLY
SEQ = 0  # the engine decodes one sequence
log = logging.getLogger(__name__)


class SwaGuard:
    """Rollback safety for one llama context whose SWA cache is not full-size."""

    def __init__(self, llm, n_swa: int) -> None:
        self._llm = llm
        self._ctx = llm._ctx.ctx
        self._mem = capi.llama_get_memory(self._ctx)
        self.n_swa = n_swa
        self._buf: ctypes.Array | None = None
        self._size = 0
        self.pos = -1  # tokens the checkpoint holds (-1: none)
        self._pos_min = -1  # the checkpoint's oldest cached position
        self._checked_pos_min = -1  # the oldest cached position at the last safe_keep
        self.restored = 0  # rollbacks served by the checkpoint
        self.refilled = 0  # rollbacks that needed a full prefill

    @classmethod
    def for_llama(cls, llm, swa_full: bool) -> SwaGuard | None:
        """A guard when the model has sliding-window layers and the cache is not full-size."""
        n_swa = int(capi.llama_model_n_swa(llm._model.model))
        return cls(llm, n_swa) if n_swa > 0 and not swa_full else None

    def _covered(self, pos_min: int, keep: int) -> bool:
        """Whether a cache holding [pos_min, keep) serves the window of position ``keep``."""
        return keep == 0 or 0 <= pos_min <= max(0, keep - self.n_swa)

    def covers(self, keep: int) -> bool:
        """Whether reusing ``keep`` tokens is valid in the cache ``safe_keep`` last checked."""
        return self._covered(self._checked_pos_min, keep)

    def safe_keep(self, keep: int) -> int:
        """How many of ``keep`` cached tokens a prefill may reuse (restores the checkpoint when
        the live cache lost the window; 0 when nothing usable is left)."""
        self._checked_pos_min = capi.llama_memory_seq_pos_min(self._mem, SEQ)
        if keep > 0 and not self._covered(self._checked_pos_min, keep):
            keep = self._restore(keep)
        if self.pos > keep:  # the positions after `keep` are about to be replaced
            self.pos = -1
        return keep

    def _restore(self, keep: int) -> int:
        k = min(keep, self.pos)
        if self._buf is not None and k > 0 and self._covered(self._pos_min, k):
            ctx, buf, size = self._ctx, self._buf, self._size
            if capi.llama_state_seq_set_data_ext(ctx, buf, size, SEQ, SWA_ONLY):
                self.restored += 1
                self._checked_pos_min = self._pos_min
                return k
        self.refilled += 1
        log.warning(
            f"sliding-window cache: no checkpoint for a rollback to {keep} tokens (checkpoint at "
            f"{self.pos} holding from {self._pos_min}, live cache from {self._checked_pos_min}, "
            f"window {self.n_swa}): the whole prompt is prefilled again"
        )
        return 0

    def checkpoint(self) -> None:
        """Save the SWA cells of the cached positions (replaces the previous checkpoint)."""
        n = self._llm.n_tokens
        size = capi.llama_state_seq_get_size_ext(self._ctx, SEQ, SWA_ONLY)
        if self._buf is None or len(self._buf) < size:
            self._buf = (ctypes.c_uint8 * size)()
        self._size = capi.llama_state_seq_get_data_ext(self._ctx, self._buf, size, SEQ, SWA_ONLY)
        self.pos = n if self._size else -1
        self._pos_min = capi.llama_memory_seq_pos_min(self._mem, SEQ)

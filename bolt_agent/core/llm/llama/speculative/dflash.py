"""DFlash: a small block-diffusion drafter conditioned on the target's hidden features.

What llama.cpp's ``common_speculative_impl_draft_dflash`` does, driven through ctypes (the
``common`` library is not in the wheel):

* the drafter context is created with ``ctx_other`` = the target context (it borrows the target's
  token embeddings and LM head) and non-causal attention;
* the target publishes the input embeddings of the drafter's target layers
  (``llama_set_embeddings_layer_inp``); after every target decode the committed rows are
  concatenated per token and decoded into the drafter as an embedding batch at the same
  positions, which writes the drafter's K/V for them (prefill: after every ``n_batch`` chunk);
* a draft decodes ``[pending, MASK x n_max]`` in one parallel pass, takes the argmax at each MASK
  position, and removes that block from the drafter's cache again.

Every precondition whose violation would make llama.cpp abort is checked first
(``gguf_check.check_pair``); this module is only built for a pair that passed.
"""

from __future__ import annotations

import numpy as np
from llama_cpp import llama_cpp as capi

from bolt_agent.core.llm.llama.speculative import llama_ext
from bolt_agent.core.llm.llama.speculative.decoder import Drafter
from bolt_agent.core.llm.llama.speculative.gguf_check import DrafterError, DrafterInfo, target_info
from bolt_agent.core.llm.llama.speculative.native import (
    Batch,
    drafter_memory,
    greedy,
    load_model,
    meta,
    new_context,
)


class DFlashDrafter(Drafter):
    name = "dflash"

    def __init__(self, llm, info: DrafterInfo, n_max: int, p_min: float, n_gpu_layers: int):
        if not llama_ext.AVAILABLE:
            raise DrafterError(f"libllama lacks DFlash symbols: {', '.join(llama_ext.MISSING)}")
        self._llm = llm
        self._tgt = llm._ctx.ctx
        self.info = info
        self.n_max = max(0, min(n_max, info.block_size - 1))
        self.p_min = p_min
        self._model = None
        self._ctx = None
        self._batches: list[Batch] = []
        try:
            self._model = load_model(info.path, n_gpu_layers)
            loaded = llama_ext.target_layer_ids(self._model)
            if tuple(loaded) != info.target_layers:
                raise DrafterError(f"llama.cpp read target layers {loaded}, file says otherwise")
            self._ctx = new_context(self._model, llm, ctx_other=self._tgt)
        except DrafterError:
            self.close()
            raise
        causal = meta(self._model, "dflash.attention.causal") == "true"
        capi.llama_set_causal_attn(self._ctx, causal)
        self._mem = capi.llama_get_memory(self._ctx)
        self._n_embd = target_info(llm).n_embd
        self._n_vocab = llm.n_vocab()
        self._mask = info.mask_token_id
        for lid in info.target_layers:
            llama_ext.set_embeddings_layer_inp(self._tgt, lid, True)
        self._layers_on = True
        width = len(info.target_layers) * self._n_embd
        self._inject = Batch(llm.n_batch, width)
        self._block = Batch(self.n_max + 1)
        self._batches = [self._inject, self._block]
        self._n = 0  # target positions whose features are in the drafter's cache

    def synced(self) -> int:
        return self._n

    def truncate(self, n_keep: int) -> None:
        if n_keep < self._n:
            capi.llama_memory_seq_rm(self._mem, -1, n_keep, -1)
            self._n = n_keep

    def on_decoded(self, pos0: int, n_rows: int) -> None:
        if n_rows <= 0:
            return
        if pos0 < self._n:
            self.truncate(pos0)
        rows = [
            np.ctypeslib.as_array(
                llama_ext.get_embeddings_layer_inp(self._tgt, lid), shape=(n_rows, self._n_embd)
            )
            for lid in self.info.target_layers
        ]
        self._inject.fill(pos0, n_rows)
        self._inject.set_embd(np.concatenate(rows, axis=1))
        rc = capi.llama_decode(self._ctx, self._inject.batch)
        if rc != 0:
            raise DrafterError(f"DFlash feature injection failed (llama_decode {rc})")
        self._n = pos0 + n_rows

    def propose(self, history: np.ndarray, pending: int, n: int) -> list[int]:
        base = len(history)
        if base != self._n:  # features missing (should not happen): resync from here on
            self.truncate(min(base, self._n))
        size = self.n_max + 1
        tokens = [pending] + [self._mask] * self.n_max
        # every row is an output: the DFlash graph has no output-row selection, llama.cpp would
        # hand back its first rows for any subset (as common/speculative.cpp, all rows)
        self._block.fill(base, size, tokens=tokens, outputs=[True] * size)
        rc = capi.llama_decode(self._ctx, self._block.batch)
        drafts: list[int] = []
        if rc == 0:
            for i in range(1, min(n, self.n_max) + 1):
                token, confident = greedy(self._ctx, i, self._n_vocab, self.p_min)
                if not confident:
                    break
                drafts.append(token)
        capi.llama_memory_seq_rm(self._mem, -1, base, -1)  # drop the noise block
        return drafts

    def memory(self) -> dict[str, int]:
        return drafter_memory(self._model, self._llm.n_ctx())

    def close(self) -> None:
        for b in self._batches:
            b.close()
        self._batches = []
        if getattr(self, "_layers_on", False):
            for lid in self.info.target_layers:
                llama_ext.set_embeddings_layer_inp(self._tgt, lid, False)
            self._layers_on = False
        if self._ctx:
            capi.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            capi.llama_model_free(self._model)
            self._model = None

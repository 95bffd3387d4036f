"""Classic draft-model speculation: a small GGUF with the target's vocabulary, its own context.

Not llama-cpp-python's ``draft_model`` (which forces ``logits_all`` and an n_ctx x n_vocab score
matrix): the draft context keeps only the last row of logits, syncs lazily to the target's
committed tokens (longest common prefix, like the engine's prompt reuse) and drafts greedily.
"""

from __future__ import annotations

import numpy as np
from llama_cpp import llama_cpp as capi

from bolt_agent.core.llm.llama.speculative.decoder import Drafter
from bolt_agent.core.llm.llama.speculative.gguf_check import DrafterError, open_gguf
from bolt_agent.core.llm.llama.speculative.native import (
    Batch,
    drafter_memory,
    greedy,
    load_model,
    new_context,
)

DRAFTER_ONLY_ARCHS = frozenset({"dflash", "eagle3", "gemma4-assistant"})


def check_vocab(draft_model, target_model) -> None:
    """DrafterError unless both models tokenize identically (same size, specials, texts)."""
    dv, tv = capi.llama_model_get_vocab(draft_model), capi.llama_model_get_vocab(target_model)
    nd, nt = capi.llama_vocab_n_tokens(dv), capi.llama_vocab_n_tokens(tv)
    if nd != nt:
        raise DrafterError(f"draft vocabulary ({nd}) != target vocabulary ({nt})")
    if capi.llama_vocab_type(dv) != capi.llama_vocab_type(tv):
        raise DrafterError("draft and target use different tokenizer types")
    for name in ("llama_vocab_bos", "llama_vocab_eos"):
        fn = getattr(capi, name)
        if fn(dv) != fn(tv):
            raise DrafterError(f"draft and target differ in {name.split('_')[-1]} token")
    ids = range(nt) if nt <= 4096 else np.linspace(0, nt - 1, 4096).astype(int)
    for t in ids:
        if capi.llama_vocab_get_text(dv, int(t)) != capi.llama_vocab_get_text(tv, int(t)):
            raise DrafterError(f"draft and target differ at token {int(t)}")


class DraftModelDrafter(Drafter):
    name = "draft_model"

    def __init__(self, llm, path: str, n_max: int, p_min: float, n_gpu_layers: int):
        reader = open_gguf(path)  # missing/truncated/corrupt files: a clear error first
        field = reader.fields.get("general.architecture")
        arch = field.contents() if field is not None else ""
        if arch in DRAFTER_ONLY_ARCHS:  # their graphs assert on the target's tensors
            raise DrafterError(f"{path} is a {arch!r} drafter, not a standalone draft model")
        self._llm = llm
        self.n_max = n_max
        self.p_min = p_min
        self._model = load_model(path, n_gpu_layers)
        self._ctx = None
        self._batch: Batch | None = None
        try:
            if capi.llama_model_is_recurrent(self._model) or capi.llama_model_is_hybrid(
                self._model
            ):
                raise DrafterError("a recurrent/hybrid draft model cannot roll back its cache")
            check_vocab(self._model, llm._model.model)
            self._ctx = new_context(self._model, llm)
        except DrafterError:
            self.close()
            raise
        self._mem = capi.llama_get_memory(self._ctx)
        self._n_vocab = llm.n_vocab()
        self._batch = Batch(llm.n_batch)
        self._tokens: list[int] = []  # tokens in the draft cache, positions 0..

    def _eval(self, tokens: list[int]) -> bool:
        step = self._batch.capacity
        for i in range(0, len(tokens), step):
            chunk = tokens[i : i + step]
            out = [False] * len(chunk)
            out[-1] = True
            self._batch.fill(len(self._tokens), len(chunk), tokens=chunk, outputs=out)
            if capi.llama_decode(self._ctx, self._batch.batch) != 0:
                self._reset()
                return False
            self._tokens.extend(chunk)
        return True

    def _reset(self) -> None:
        capi.llama_memory_seq_rm(self._mem, -1, 0, -1)
        self._tokens = []

    def propose(self, history: np.ndarray, pending: int, n: int) -> list[int]:
        want = [*np.asarray(history).tolist(), int(pending)]
        keep = 0
        for a, b in zip(self._tokens, want):
            if a != b:
                break
            keep += 1
        keep = min(keep, len(want) - 1)  # decode at least one token for fresh logits
        capi.llama_memory_seq_rm(self._mem, -1, keep, -1)
        del self._tokens[keep:]
        if not self._eval(want[keep:]):
            return []
        drafts: list[int] = []
        for i in range(min(n, self.n_max)):
            token, confident = greedy(self._ctx, -1, self._n_vocab, self.p_min)
            if not confident:
                break
            drafts.append(token)
            if i + 1 < min(n, self.n_max) and not self._eval([token]):
                break
        return drafts

    def memory(self) -> dict[str, int]:
        return drafter_memory(self._model, self._llm.n_ctx())

    def close(self) -> None:
        if self._batch is not None:
            self._batch.close()
            self._batch = None
        if self._ctx:
            capi.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            capi.llama_model_free(self._model)
            self._model = None

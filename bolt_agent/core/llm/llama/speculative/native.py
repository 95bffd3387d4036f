"""Small native helpers shared by the drafters: model/context lifetime, batches, greedy picks."""

from __future__ import annotations

import ctypes

import numpy as np
from llama_cpp import llama_cpp as capi

from bolt_agent.core.llm.llama.speculative.gguf_check import DrafterError


def load_model(path: str, n_gpu_layers: int):
    params = capi.llama_model_default_params()
    params.n_gpu_layers = n_gpu_layers
    model = capi.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise DrafterError(f"llama.cpp could not load {path} (see its log)")
    return model


def new_context(model, llm, ctx_other=None):
    """A context like the target's (size, batch, threads, cache types), optionally linked to it.

    Its micro-batch is the whole batch: DFlash's drafter attends without a causal mask, and
    llama.cpp aborts the process when a non-causal decode does not fit one micro-batch (its
    feature injection carries up to ``n_batch`` rows; the target may split them into smaller
    ``n_ubatch`` steps, 64 by default and in the Jetson profile)."""
    src = llm.context_params
    params = capi.llama_context_default_params()
    for name in (
        "n_ctx",
        "n_batch",
        "n_ubatch",
        "n_threads",
        "n_threads_batch",
        "flash_attn_type",
        "type_k",
        "type_v",
        "offload_kqv",
        "swa_full",
    ):
        setattr(params, name, getattr(src, name))
    params.n_ubatch = params.n_batch
    params.n_seq_max = 1
    if ctx_other is not None:
        params.ctx_other = ctx_other
    ctx = capi.llama_init_from_model(model, params)
    if not ctx:
        raise DrafterError("llama.cpp could not create the drafter context (see its log)")
    return ctx


def meta(model, key: str) -> str | None:
    buf = ctypes.create_string_buffer(256)
    n = capi.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    return buf.value.decode() if n >= 0 else None


def kv_cache_bytes(model, n_ctx: int, bytes_per_value: int = 2) -> int:
    """Estimated K+V bytes for `n_ctx` cells (f16 cache, every layer full-length)."""
    n_layer = capi.llama_model_n_layer(model)
    n_head = max(1, capi.llama_model_n_head(model))
    n_head_kv = capi.llama_model_n_head_kv(model)
    arch = meta(model, "general.architecture") or ""
    n_embd = capi.llama_model_n_embd(model)
    k_len = int(meta(model, f"{arch}.attention.key_length") or n_embd // n_head)
    v_len = int(meta(model, f"{arch}.attention.value_length") or k_len)
    return int(n_layer) * int(n_ctx) * int(n_head_kv) * (k_len + v_len) * bytes_per_value


def drafter_memory(model, n_ctx: int) -> dict[str, int]:
    """Bytes of a drafter's weights and (estimated) KV cache, for the memory report."""
    return {
        "drafter_weights_bytes": int(capi.llama_model_size(model)),
        "drafter_kv_bytes": kv_cache_bytes(model, n_ctx),
    }


class Batch:
    """A ``llama_batch`` for one sequence: tokens, or embedding rows of width `n_embd`."""

    def __init__(self, capacity: int, n_embd: int = 0):
        self.capacity = capacity
        self.n_embd = n_embd
        self.batch = capi.llama_batch_init(capacity, n_embd, 1)

    def fill(self, pos0: int, n: int, tokens=None, outputs=None) -> None:
        if n > self.capacity:
            raise ValueError(f"batch of {n} > capacity {self.capacity}")
        b = self.batch
        b.n_tokens = n
        for i in range(n):
            if tokens is not None:
                b.token[i] = tokens[i]
            b.pos[i] = pos0 + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = bool(outputs[i]) if outputs is not None else False

    def set_embd(self, rows: np.ndarray) -> None:
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        ctypes.memmove(self.batch.embd, rows.ctypes.data, rows.nbytes)

    def close(self) -> None:
        if self.batch is not None:
            capi.llama_batch_free(self.batch)
            self.batch = None


def greedy(ctx, row: int, n_vocab: int, p_min: float = 0.0) -> tuple[int, bool]:
    """Argmax of logits row `row`; second value False when its probability is below `p_min`."""
    logits = np.ctypeslib.as_array(capi.llama_get_logits_ith(ctx, row), shape=(n_vocab,))
    best = int(np.argmax(logits))
    if p_min <= 0.0:
        return best, True
    p = 1.0 / float(np.exp(logits - logits[best]).sum())
    return best, p >= p_min

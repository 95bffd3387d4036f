"""A tiny Gemma 4 GGUF with random weights, for memory mechanics that the bundled model lacks.

The bundled Gemma 3 270M has no per-layer embedding (PLE) table, the one tensor llama.cpp can read
lazily (``TENSOR_READ_LAZY``), and its output is tied to the token table, which a CPU decode reads
whole. This file has both tables like Bolt E4B (gemma4 architecture, PLE, untied output as on the
Jetson, where the output copy lives on the GPU), so ``embedding_residency`` can measure what an
mmap'ed table costs after N distinct tokens. Weights are random: it measures memory, not text.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class TinyGemma4:
    n_layer: int = 6  # layer 6 is full attention (pattern period 6), the rest sliding-window
    n_embd: int = 256
    n_head: int = 2
    n_head_kv: int = 1
    head_dim: int = 128
    n_ff: int = 512
    n_embd_per_layer: int = 256  # PLE row: n_layer x 256 f16 = 3 KiB
    n_vocab: int = 8192
    n_swa: int = 64


def write_gemma4(path: str | Path, shape: TinyGemma4 = TinyGemma4()) -> Path:
    """Write the model, fsync it (so that its page cache can be dropped) and return the path."""
    import gguf

    s, path = shape, Path(path)
    w = gguf.GGUFWriter(str(path), "gemma4")
    w.add_block_count(s.n_layer)
    w.add_context_length(4096)
    w.add_embedding_length(s.n_embd)
    w.add_feed_forward_length(s.n_ff)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_uint32("gemma4.attention.key_length_swa", s.head_dim)
    w.add_uint32("gemma4.attention.value_length_swa", s.head_dim)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_sliding_window(s.n_swa)
    w.add_array("gemma4.attention.sliding_window_pattern", [i % 6 != 5 for i in range(s.n_layer)])
    w.add_uint32("gemma4.embedding_length_per_layer_input", s.n_embd_per_layer)
    w.add_rope_freq_base(1e6)
    w.add_float32("gemma4.rope.freq_base_swa", 1e4)
    w.add_tokenizer_model("llama")
    tokens = [b"<unk>", b"<s>", b"</s>"] + [f"<0x{i:02X}>".encode() for i in range(256)]
    tokens += [f"t{i}".encode() for i in range(s.n_vocab - len(tokens))]
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * s.n_vocab)
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (s.n_vocab - 259))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    rng = np.random.default_rng(0)

    def mat(name: str, n_in: int, n_out: int) -> None:
        w.add_tensor(name, (rng.standard_normal((n_out, n_in)) * 0.02).astype(np.float16))

    def ones(name: str, n: int) -> None:
        w.add_tensor(name, np.ones(n, np.float32))

    ple = s.n_embd_per_layer * s.n_layer
    mat("token_embd.weight", s.n_embd, s.n_vocab)
    mat("per_layer_token_embd.weight", ple, s.n_vocab)
    mat("per_layer_model_proj.weight", s.n_embd, ple)
    mat("output.weight", s.n_embd, s.n_vocab)
    ones("per_layer_proj_norm.weight", s.n_embd_per_layer)
    ones("output_norm.weight", s.n_embd)
    ones("rope_freqs.weight", s.head_dim // 2)
    q, kv = s.n_head * s.head_dim, s.n_head_kv * s.head_dim
    for i in range(s.n_layer):
        p = f"blk.{i}."
        for norm in ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm", "post_norm"):
            ones(p + norm + ".weight", s.n_embd)
        ones(p + "attn_q_norm.weight", s.head_dim)
        ones(p + "attn_k_norm.weight", s.head_dim)
        mat(p + "attn_q.weight", s.n_embd, q)
        mat(p + "attn_k.weight", s.n_embd, kv)
        mat(p + "attn_v.weight", s.n_embd, kv)
        mat(p + "attn_output.weight", q, s.n_embd)
        mat(p + "ffn_gate.weight", s.n_embd, s.n_ff)
        mat(p + "ffn_up.weight", s.n_embd, s.n_ff)
        mat(p + "ffn_down.weight", s.n_ff, s.n_embd)
        mat(p + "inp_gate.weight", s.n_embd, s.n_embd_per_layer)
        mat(p + "proj.weight", s.n_embd_per_layer, s.n_embd)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return path

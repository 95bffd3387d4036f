"""Tiny GGUF models written with the ``gguf`` package, for the speculative-decoding tests.

Nothing here is committed as a binary: each test writes its models into ``tmp_path``. The models
are a few hundred KiB: a character-level SentencePiece-style vocabulary (3 specials, 256 byte
tokens, printable ASCII), a llama/qwen3 target and a DFlash drafter of the same width.

Two kinds of weights:
* ``random``: seeded random weights (a target with a non-trivial greedy continuation);
* ``copy`` (target) / ``zero`` (drafter): every layer writes zero into the residual stream, so the
  target's greedy next token is the last token again (tied embeddings: ``argmax E @ e_t = t``) and
  the drafter's greedy draft at every MASK position is the mask token. A prompt ending in the mask
  character makes every draft right; ending in another character makes every draft wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from support.turn_sinks import RecordingSink

SPECIALS = ("<unk>", "<s>", "</s>")
CHARS = [chr(c) for c in range(32, 127)]  # printable ASCII; ' ' is written as '▁'
MASK_CHAR = "x"  # the drafter's mask token is a normal character token (see module docstring)


def vocab() -> tuple[list[str], list[float], list[int]]:
    tokens = list(SPECIALS) + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256  # unknown, control, control, byte
    for ch in CHARS:
        tokens.append("▁" if ch == " " else ch)
        types.append(1)
    scores = [0.0] * 3 + [0.0] * 256 + [-float(i) for i in range(len(CHARS))]
    return tokens, scores, types


N_VOCAB = len(vocab()[0])


def token_id(ch: str) -> int:
    return vocab()[0].index("▁" if ch == " " else ch)


def _tokenizer(w, mask: bool, extra: int = 0) -> None:
    tokens, scores, types = vocab()
    tokens += [f"<extra_{i}>" for i in range(extra)]
    scores += [0.0] * extra
    types += [1] * extra
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)
    if mask:
        w.add_mask_token_id(token_id(MASK_CHAR))


@dataclass(frozen=True)
class TargetSpec:
    arch: str = "llama"  # llama | qwen3 | gemma3
    n_embd: int = 64
    n_layer: int = 3
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    n_ctx: int = 1024
    weights: str = "random"  # random | copy
    seed: int = 0
    scale: float = 4.0  # multiplies the random layer weights (larger: less repetitive output)
    noise: float = 0.0  # relative noise added to the layer weights (a "similar" draft model)
    extra_tokens: int = 0  # a different (larger) vocabulary


def write_target(path: Path, spec: TargetSpec = TargetSpec()) -> Path:
    import gguf

    rng = np.random.default_rng(spec.seed)
    noise_rng = np.random.default_rng(spec.seed + 1000)
    head = spec.n_embd // spec.n_head
    w = gguf.GGUFWriter(str(path), spec.arch)
    w.add_name(f"tiny-{spec.arch}-{spec.weights}")
    w.add_context_length(spec.n_ctx)
    w.add_embedding_length(spec.n_embd)
    w.add_block_count(spec.n_layer)
    w.add_feed_forward_length(spec.n_ff)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv)
    w.add_key_length(head)
    w.add_value_length(head)
    w.add_rope_dimension_count(head)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(0)  # all F32
    if spec.arch == "gemma3":
        w.add_sliding_window(512)
    _tokenizer(w, mask=False, extra=spec.extra_tokens)

    emb = rng.standard_normal((N_VOCAB + spec.extra_tokens, spec.n_embd)).astype(np.float32)
    emb[: len(SPECIALS)] *= 0.05  # keep end-of-generation rare with random weights
    w.add_tensor("token_embd.weight", emb)
    w.add_tensor("output_norm.weight", np.ones(spec.n_embd, np.float32))

    def mat(rows: int, cols: int) -> np.ndarray:
        if spec.weights == "copy":
            return np.zeros((rows, cols), np.float32)
        m = rng.standard_normal((rows, cols))
        if spec.noise:
            m = m + spec.noise * noise_rng.standard_normal((rows, cols))
        return (m * spec.scale / np.sqrt(cols)).astype(np.float32)

    kv = spec.n_head_kv * head
    for i in range(spec.n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(spec.n_embd, np.float32))
        w.add_tensor(p + "attn_q.weight", mat(spec.n_head * head, spec.n_embd))
        w.add_tensor(p + "attn_k.weight", mat(kv, spec.n_embd))
        w.add_tensor(p + "attn_v.weight", mat(kv, spec.n_embd))
        w.add_tensor(p + "attn_output.weight", mat(spec.n_embd, spec.n_head * head))
        w.add_tensor(p + "ffn_norm.weight", np.ones(spec.n_embd, np.float32))
        w.add_tensor(p + "ffn_gate.weight", mat(spec.n_ff, spec.n_embd))
        w.add_tensor(p + "ffn_up.weight", mat(spec.n_ff, spec.n_embd))
        w.add_tensor(p + "ffn_down.weight", mat(spec.n_embd, spec.n_ff))
        if spec.arch in ("qwen3", "gemma3"):
            w.add_tensor(p + "attn_q_norm.weight", np.ones(head, np.float32))
            w.add_tensor(p + "attn_k_norm.weight", np.ones(head, np.float32))
        if spec.arch == "gemma3":
            w.add_tensor(p + "post_attention_norm.weight", np.ones(spec.n_embd, np.float32))
            w.add_tensor(p + "post_ffw_norm.weight", np.ones(spec.n_embd, np.float32))
    _finish(w)
    return path


@dataclass(frozen=True)
class DrafterSpec:
    n_embd: int = 64
    n_layer: int = 1
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    n_ctx: int = 1024
    target_layers: tuple[int, ...] = (0, 1, 2)
    block_size: int | None = 8
    weights: str = "random"  # random | zero
    seed: int = 1
    mask: bool = True  # write tokenizer.ggml.mask_token_id
    arch: str = "dflash"


def write_drafter(path: Path, spec: DrafterSpec = DrafterSpec()) -> Path:
    import gguf

    rng = np.random.default_rng(spec.seed)
    head = spec.n_embd // spec.n_head
    w = gguf.GGUFWriter(str(path), spec.arch)
    w.add_name("tiny-dflash")
    w.add_context_length(spec.n_ctx)
    w.add_embedding_length(spec.n_embd)
    w.add_block_count(spec.n_layer)
    w.add_feed_forward_length(spec.n_ff)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv)
    w.add_key_length(head)
    w.add_value_length(head)
    w.add_rope_dimension_count(head)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(0)
    if spec.target_layers:
        w.add_array(f"{spec.arch}.target_layers", [int(x) for x in spec.target_layers])
    if spec.block_size is not None:
        w.add_uint32(f"{spec.arch}.block_size", spec.block_size)
    _tokenizer(w, mask=spec.mask)

    def mat(rows: int, cols: int) -> np.ndarray:
        if spec.weights == "zero":
            return np.zeros((rows, cols), np.float32)
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    n_inp = max(len(spec.target_layers), 1) * spec.n_embd
    w.add_tensor("fc.weight", mat(spec.n_embd, n_inp))
    w.add_tensor("enc.output_norm.weight", np.ones(spec.n_embd, np.float32))
    w.add_tensor("output_norm.weight", np.ones(spec.n_embd, np.float32))
    kv = spec.n_head_kv * head
    for i in range(spec.n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(spec.n_embd, np.float32))
        w.add_tensor(p + "attn_q.weight", mat(spec.n_head * head, spec.n_embd))
        w.add_tensor(p + "attn_k.weight", mat(kv, spec.n_embd))
        w.add_tensor(p + "attn_v.weight", mat(kv, spec.n_embd))
        w.add_tensor(p + "attn_output.weight", mat(spec.n_embd, spec.n_head * head))
        w.add_tensor(p + "attn_q_norm.weight", np.ones(head, np.float32))
        w.add_tensor(p + "attn_k_norm.weight", np.ones(head, np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(spec.n_embd, np.float32))
        w.add_tensor(p + "ffn_gate.weight", mat(spec.n_ff, spec.n_embd))
        w.add_tensor(p + "ffn_up.weight", mat(spec.n_ff, spec.n_embd))
        w.add_tensor(p + "ffn_down.weight", mat(spec.n_embd, spec.n_ff))
    _finish(w)
    return path


def _finish(w) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def generate(engine, prompt: str, n: int, sampling, grammar=None, force_at=None, force="ab"):
    """Token ids of up to `n` steps' worth of output ('F' marks a forced text at `force_at`)."""
    session = engine.start(prompt)
    out: list = []
    while len(out) < n:
        limit = n - len(out)
        if force_at is not None and "F" not in out:
            limit = min(limit, force_at - len(out))
        got = session.step(sampling, grammar, limit)
        assert 1 <= len(got) <= limit
        out += [t.id for t in got]
        if got[-1].is_eog:
            break
        if force_at is not None and "F" not in out and len(out) >= force_at:
            out += ["F"] + [t.id for t in session.force(force)]
    return out, session.stats


def truncate(src: Path, dst: Path, keep: float = 0.6) -> Path:
    data = src.read_bytes()
    dst.write_bytes(data[: int(len(data) * keep)])
    return dst


# --- turn helpers (the speculative turn tests) ---------------------------------------------
Sink = RecordingSink  # the turn tests' recording sink


def runner_for(engine, max_steps: int, max_new_tokens: int):
    from bolt_agent.core.llm.dialogue import Dialogue
    from bolt_agent.core.llm.profile import load_profile
    from bolt_agent.core.llm.turn_runner import RunnerConfig, TurnRunner
    from bolt_agent.core.llm.types import SamplingParams

    profile = load_profile("reachy_mini")
    config = RunnerConfig(
        sampling=SamplingParams(seed=7),  # temperature 1.0: seeded sampling, not greedy
        constrained=True,
        max_speech_chars=60,
        max_steps=max_steps,
        max_new_tokens=max_new_tokens,
    )
    return TurnRunner(engine, Dialogue(profile.persona), profile.registry, config)

"""Validation of a drafter GGUF against its target, before llama.cpp ever sees the pair.

llama.cpp aborts the process (GGML_ASSERT / GGML_ABORT) instead of returning an error when a DFlash
drafter meets a target whose model code does not publish its layer inputs (gemma3 among them), or
when a target layer id is out of range. Every such condition is checked here, from metadata only:
the drafter file with the ``gguf`` reader (which also catches truncated and corrupt files), the
target from the loaded model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class DrafterError(ValueError):
    """The drafter file is missing, corrupt, or does not fit the target (the message says why)."""


# Architectures whose llama.cpp graph publishes per-layer inputs (``res->t_layer_inp[il]``), i.e.
# that can feed a DFlash drafter (vendored llama.cpp of llama-cpp-python 0.3.36, src/models/*.cpp).
# Recurrent/hybrid ones are listed by llama.cpp too, but are refused at run time (no partial KV
# removal). Everything else (gemma3, gemma3n, phi3, ...) aborts on the first decode.
DFLASH_TARGET_ARCHS = frozenset(
    {
        "llama",
        "qwen3",
        "qwen3moe",
        "qwen3next",
        "qwen35",
        "qwen35moe",
        "qwen4exp",
        "gemma4",
        "gpt-oss",
        "minimax-m2",
        "minimax-01",
        "muse-glimmer",
        "deepseek4",
        "nemotron_h",
        "bailingmoe3",
        "hunyuan_vl",
        "lfm2",
        "mimo2",
        "nanbeige",
    }
)
DEFAULT_BLOCK_SIZE = 16  # llama.cpp's default when dflash.block_size is absent


@dataclass(frozen=True)
class DrafterInfo:
    path: str
    arch: str
    n_embd: int
    n_layer: int
    n_vocab: int
    target_layers: tuple[int, ...]
    mask_token_id: int
    block_size: int
    file_bytes: int


@dataclass(frozen=True)
class TargetInfo:
    arch: str
    n_layer: int
    n_embd: int
    n_vocab: int


def open_gguf(path: str | Path):
    """A ``gguf.GGUFReader`` for `path`; DrafterError for a missing, truncated or corrupt file."""
    import gguf

    p = Path(path)
    if not p.is_file():
        raise DrafterError(f"drafter file not found: {p}")
    size = p.stat().st_size
    try:
        reader = gguf.GGUFReader(str(p))
    except Exception as exc:  # the reader raises IndexError/ValueError/... on bad bytes
        raise DrafterError(
            f"{p}: not a readable GGUF file (truncated or corrupt; {size} bytes): "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    for t in reader.tensors:
        end = int(t.data_offset) + int(t.n_bytes)
        if end > size:
            raise DrafterError(
                f"{p}: truncated GGUF file: tensor {t.name!r} ends at byte {end}, "
                f"the file has {size} bytes"
            )
    return reader


def _field(reader, key: str):
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def read_drafter(path: str | Path) -> DrafterInfo:
    """Parse and check a DFlash drafter file (DrafterError with the reason if unusable)."""
    reader = open_gguf(path)
    arch = _field(reader, "general.architecture")
    if arch != "dflash":
        raise DrafterError(f"{path}: architecture is {arch!r}, a DFlash drafter has 'dflash'")
    layers = _field(reader, "dflash.target_layers")
    if not layers:
        raise DrafterError(f"{path}: 'dflash.target_layers' is missing (required by llama.cpp)")
    n_embd = _field(reader, "dflash.embedding_length")
    n_layer = _field(reader, "dflash.block_count")
    if not n_embd or not n_layer:
        raise DrafterError(f"{path}: 'dflash.embedding_length'/'dflash.block_count' missing")
    mask = _field(reader, "tokenizer.ggml.mask_token_id")
    if mask is None:
        raise DrafterError(f"{path}: no mask token ('tokenizer.ggml.mask_token_id')")
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    n_vocab = len(tokens.data) if tokens is not None else 0
    if n_vocab == 0:
        raise DrafterError(f"{path}: no tokenizer vocabulary ('tokenizer.ggml.tokens')")
    if not 0 <= int(mask) < n_vocab:
        raise DrafterError(f"{path}: mask token id {mask} outside the vocabulary ({n_vocab})")
    block = _field(reader, "dflash.block_size")
    block = int(block) if block is not None else DEFAULT_BLOCK_SIZE
    if block < 2:
        raise DrafterError(f"{path}: dflash.block_size={block}, need at least 2")
    names = {t.name for t in reader.tensors}
    for required in ("fc.weight", "output_norm.weight", "enc.output_norm.weight"):
        if required not in names:
            raise DrafterError(f"{path}: tensor {required!r} missing")
    return DrafterInfo(
        path=str(path),
        arch=arch,
        n_embd=int(n_embd),
        n_layer=int(n_layer),
        n_vocab=n_vocab,
        target_layers=tuple(int(x) for x in layers),
        mask_token_id=int(mask),
        block_size=block,
        file_bytes=Path(path).stat().st_size,
    )


def target_info(llm) -> TargetInfo:
    """Architecture and shape of a loaded ``llama_cpp.Llama``."""
    from llama_cpp import llama_cpp as capi

    model = llm._model.model
    return TargetInfo(
        arch=str(llm.metadata.get("general.architecture", "")),
        n_layer=int(capi.llama_model_n_layer(model)),
        n_embd=int(capi.llama_model_n_embd(model)),
        n_vocab=int(llm.n_vocab()),
    )


def check_pair(drafter: DrafterInfo, target: TargetInfo) -> None:
    """Everything that would make llama.cpp abort or draft garbage, as a DrafterError."""
    if target.arch not in DFLASH_TARGET_ARCHS:
        raise DrafterError(
            f"target architecture {target.arch!r} does not publish layer inputs to a DFlash "
            f"drafter in this llama.cpp (supported: {', '.join(sorted(DFLASH_TARGET_ARCHS))})"
        )
    bad = [i for i in drafter.target_layers if not 0 <= i < target.n_layer]
    if bad:
        raise DrafterError(
            f"drafter target layer ids {bad} out of range for a {target.n_layer}-layer target "
            f"(ids {list(drafter.target_layers)})"
        )
    if drafter.n_embd != target.n_embd:
        raise DrafterError(
            f"drafter hidden size {drafter.n_embd} != target hidden size {target.n_embd}"
        )
    if drafter.n_vocab != target.n_vocab:
        raise DrafterError(
            f"drafter vocabulary ({drafter.n_vocab}) != target vocabulary ({target.n_vocab})"
        )

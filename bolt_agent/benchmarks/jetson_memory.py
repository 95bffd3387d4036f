"""Memory of a llama.cpp model from GGUF metadata: weights, KV cache, compute buffer.

Pure calculator (no llama.cpp, no ROS). It reads either a real GGUF (``gguf.GGUFReader``) or a
metadata description in the same keys (``config/jetson_profile.yaml``), and follows llama.cpp's
cache layout: f16 K and V per layer that owns a cache; sliding-window (SWA) layers hold
``n_swa + n_ubatch`` cells (``n_ctx`` with ``swa_full``), full-attention layers ``n_ctx`` cells;
layers that share another layer's K/V (Gemma 3n/4 ``shared_kv_layers``) hold none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

MIB = 1024**2
GB = 1e9

#: llama.cpp hard-codes the SWA period of some architectures (every Nth layer is full attention)
SWA_PERIOD = {"gemma2": 2, "gemma3": 6, "gemma3n": 5, "gemma4": 6, "cohere2": 4}


def quant_bytes(type_name: str, n_elements: int) -> int:
    """Bytes of ``n_elements`` stored as ggml type ``type_name`` (Q4_K, Q6_K, F16, …)."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[type_name.upper()]]
    return -(-n_elements // block) * size


@dataclass
class ModelShape:
    arch: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: list[int]  # per layer
    k_len: list[int]  # per layer (SWA layers may differ from full ones)
    v_len: list[int]
    swa: list[bool]  # per layer: sliding-window attention
    n_swa: int
    n_kv_owner: int  # layers that own a K/V cache (the rest share)
    n_vocab: int
    weight_bytes: int = 0
    notes: list[str] = field(default_factory=list)

    @classmethod
    def from_metadata(cls, meta: dict[str, Any], weight_bytes: int = 0) -> ModelShape:
        arch = str(meta["general.architecture"])

        def get(key: str, default: Any = None) -> Any:
            return meta.get(f"{arch}.{key}", default)

        n_layer = int(get("block_count"))
        notes = []

        def per_layer(value: Any) -> list[int]:
            if isinstance(value, list | tuple):
                return [int(v) for v in value]
            return [int(value)] * n_layer

        n_swa = int(get("attention.sliding_window", 0) or 0)
        pattern = get("attention.sliding_window_pattern")
        if isinstance(pattern, list | tuple):
            swa = [bool(x) for x in pattern]
        else:
            period = int(get("attention.sliding_window_period", 0) or SWA_PERIOD.get(arch, 0))
            if n_swa and period:
                swa = [(i + 1) % period != 0 for i in range(n_layer)]
                notes.append(f"SWA period {period} (every {period}th layer full attention)")
            else:
                swa = [bool(n_swa)] * n_layer
        k_full, v_full = get("attention.key_length"), get("attention.value_length")
        head_dim = int(get("embedding_length")) // int(get("attention.head_count"))
        k_full, v_full = int(k_full or head_dim), int(v_full or k_full or head_dim)
        k_swa = int(get("attention.key_length_swa", k_full))
        v_swa = int(get("attention.value_length_swa", v_full))
        shared = int(get("attention.shared_kv_layers", 0) or 0)
        vocab = meta.get("tokenizer.ggml.vocab_size") or meta.get("tokenizer.ggml.tokens_count")
        return cls(
            arch=arch,
            n_layer=n_layer,
            n_embd=int(get("embedding_length")),
            n_head=int(get("attention.head_count")),
            n_head_kv=per_layer(get("attention.head_count_kv", get("attention.head_count"))),
            k_len=[k_swa if s else k_full for s in swa],
            v_len=[v_swa if s else v_full for s in swa],
            swa=swa,
            n_swa=n_swa,
            n_kv_owner=n_layer - shared,
            n_vocab=int(vocab or 0),
            weight_bytes=weight_bytes,
            notes=notes,
        )

    # --- KV cache ---------------------------------------------------------------------------------
    def kv_bytes_per_token(self, swa: bool, type_name: str = "F16") -> int:
        elems = sum(
            self.n_head_kv[i] * (self.k_len[i] + self.v_len[i])
            for i in range(self.n_kv_owner)
            if self.swa[i] == swa
        )
        return quant_bytes(type_name, elems)

    def kv_cells(self, n_ctx: int, n_ubatch: int, swa_full: bool) -> tuple[int, int]:
        """(cells of a full-attention layer, cells of a SWA layer), as llama.cpp allocates."""
        swa_cells = n_ctx if swa_full else min(n_ctx, _pad(self.n_swa + n_ubatch, 256))
        return n_ctx, swa_cells

    def kv_bytes(
        self, n_ctx: int, n_ubatch: int = 512, swa_full: bool = False, type_name: str = "F16"
    ) -> dict[str, int]:
        full_cells, swa_cells = self.kv_cells(n_ctx, n_ubatch, swa_full)
        full = self.kv_bytes_per_token(False, type_name) * full_cells
        swa = self.kv_bytes_per_token(True, type_name) * swa_cells
        return {"full": full, "swa": swa, "total": full + swa}

    def state_bytes(self, n_tokens: int, type_name: str = "F16") -> int:
        """K/V bytes of ``n_tokens`` cached tokens (what ``llama_state_get_size`` serialises,
        before logits/embeddings): every cache-owning layer stores each token once it is in its
        window (SWA layers keep at most n_swa tokens when the cache is not full-size)."""
        per_tok = self.kv_bytes_per_token(False, type_name) + self.kv_bytes_per_token(
            True, type_name
        )
        return per_tok * n_tokens

    def compute_bytes(self, n_ubatch: int) -> int:
        """Compute buffer as llama.cpp reserves it (S5 in config/jetson_profile.yaml): f32 logits
        for a whole ubatch (dominant with a 262k vocabulary) plus two f32 activation rows."""
        return 4 * n_ubatch * (self.n_vocab + 2 * self.n_embd)


def _pad(n: int, to: int) -> int:
    return -(-n // to) * to


def read_gguf(path: str | Path) -> tuple[dict[str, Any], int]:
    """(scalar/array metadata, total tensor bytes) of a GGUF file."""
    from gguf import GGUFReader
    from gguf.constants import GGUFValueType

    reader = GGUFReader(str(path))
    meta: dict[str, Any] = {}
    for name, f in reader.fields.items():
        if name.startswith("tokenizer.ggml.") and f.types and f.types[0] == GGUFValueType.ARRAY:
            if name == "tokenizer.ggml.tokens":
                meta["tokenizer.ggml.tokens_count"] = len(f.data)
            continue
        try:
            meta[name] = f.contents()
        except Exception:  # unusual field types: not needed here
            continue
    return meta, sum(int(t.n_bytes) for t in reader.tensors)


def shape_from_gguf(path: str | Path) -> ModelShape:
    meta, nbytes = read_gguf(path)
    return ModelShape.from_metadata(meta, nbytes)


def load_profile(path: str | Path | None = None) -> dict[str, Any]:
    if path is None:
        from bolt_agent.core.paths import config_dir

        path = config_dir() / "jetson_profile.yaml"
    profile = yaml.safe_load(Path(path).read_text())
    if "llm_node" in profile:  # one source: the runtime is what the engine passes llama.cpp
        kw = engine_settings(profile)
        profile["runtime"].update(
            n_ubatch=min(kw["n_batch"], kw["n_ubatch"]),
            cache_type=profile["llm_node"]["cache_type_k"].upper(),
            swa_full=kw["swa_full"],
            flash_attn=kw["flash_attn"],
        )
    return profile


def engine_settings(profile: dict[str, Any]) -> dict[str, Any]:
    """What ``LlamaEngine`` passes llama.cpp for the profile's ``llm_node`` parameters."""
    from bolt_agent.core.llm.llama.engine import LlamaConfig, LlamaEngine

    p = profile["llm_node"]
    keys = ("n_ctx", "n_gpu_layers", "n_batch", "n_ubatch", "swa_full", "flash_attn")
    keys += ("cache_type_k", "cache_type_v", "use_mmap", "embeddings")
    engine = LlamaEngine(LlamaConfig("bolt.gguf", **{k: p[k] for k in keys if k in p}))
    return {**engine.llama_kwargs(), "model_params": engine.model_params(), "config": p}


def tensor_bytes(groups: list[dict[str, Any]]) -> dict[str, int]:
    out = {}
    for g in groups:
        n = 1
        for d in g["shape"]:
            n *= int(d)
        out[g["name"]] = quant_bytes(g["type"], n) * int(g.get("count", 1))
    return out


def predict(profile: dict[str, Any]) -> dict[str, Any]:
    """Predicted memory (bytes and GB) of each context profile of a Jetson description."""
    groups = tensor_bytes(profile["tensors"])
    weights = sum(groups.values())
    shape = ModelShape.from_metadata(profile["metadata"], weights)
    rt, dr = profile["runtime"], profile["drafter"]
    drafter = quant_bytes(dr["type"], int(dr["params"]))
    drafter_kv = quant_bytes(
        rt.get("cache_type", "F16"),
        int(dr["layers"])
        * int(dr["head_count_kv"])
        * 2
        * int(dr["head_dim"])
        * int(dr["kv_window"]),
    )
    overhead = int(float(rt.get("cuda_overhead_mb", 0)) * MIB)
    out: dict[str, Any] = {
        "weights_bytes": weights,
        "weights_by_group": groups,
        "drafter_bytes": drafter,
        "drafter_kv_bytes": drafter_kv,
        "drafter_upper_bound_bytes": int(float(dr.get("upper_bound_gb", 0)) * GB),
        "kv_owner_layers": shape.n_kv_owner,
        "swa_layers": sum(shape.swa[: shape.n_kv_owner]),
        "notes": shape.notes,
        "profiles": {},
    }
    for name, p in profile["profiles"].items():
        n_ctx = int(p["n_ctx"])
        kv = shape.kv_bytes(n_ctx, int(rt["n_ubatch"]), bool(rt["swa_full"]), rt["cache_type"])
        compute = shape.compute_bytes(int(rt["n_ubatch"]))
        target = weights + kv["total"] + compute
        total = target + drafter + drafter_kv + overhead
        out["profiles"][name] = {
            "n_ctx": n_ctx,
            "kv_bytes": kv,
            "compute_bytes": compute,
            "target_bytes": target,
            "total_bytes": total,
            "total_gb": total / GB,
            "target_gb": target / GB,
            "total_with_drafter_upper_gb": (total - drafter + out["drafter_upper_bound_bytes"])
            / GB,
        }
    return out

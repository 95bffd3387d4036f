"""The robot's resident-memory plan on the Jetson Orin Nano 8 GB (``bolt-agent jetson-plan``).

On unified memory every CUDA allocation, pinned host buffer and resident page counts against the
same 8 GB. Each term below is derived from GGUF metadata (``config/jetson_profile.yaml``, the same
keys a real GGUF has; ``jetson_memory``) or measured on this machine, and says which. The choices it
assumes are the ``llm_node`` parameters in the profile, which the node honours (``LlamaConfig``):

- all layers on the GPU; the tied output matrix is a GPU copy of ``token_embd``;
- ``embeddings: mmap``: the host copies of ``token_embd`` and ``per_layer_token_embd`` stay in the
  file mapping (``no_host``, lazy per-layer table), so only pages of rows of tokens seen become
  resident; bounded by ``distinct tokens x pages per row x 64 KiB`` (each fault maps at most its
  fault-around window; ``embedding_residency`` measures both sides of that bound here);
- ``cache_type_k/v: q8_0``: 34 bytes per 32 K/V values instead of 64;
- ``n_ubatch``: the compute buffer holds f32 logits for a micro-batch (4 x n_vocab x n_ubatch);
- the DFlash drafter (quantised file named by ``draft_model``) with a SWA cache of
  ``pad(kv_window + n_ubatch, 256)`` cells in the target's cache type.
"""

from __future__ import annotations

from typing import Any

from bolt_agent.benchmarks import jetson_memory as jm
from bolt_agent.benchmarks.embedding_residency import expected_pages_per_row
from bolt_agent.benchmarks.jetson_memory import engine_settings

GB, MIB = 1e9, 2**20


def table_resident(table_bytes: int, row_bytes: int, distinct: int, plan: dict) -> dict[str, Any]:
    page, window = int(plan["page_bytes"]), int(plan["fault_around_bytes"])
    ppr = expected_pages_per_row(row_bytes) if page == 4096 else row_bytes / page + 1
    bound = min(table_bytes, int(distinct * ppr * window))
    return {
        "bytes": bound,
        "table_bytes": table_bytes,
        "derivation": f"min(table {table_bytes / MIB:.0f} MiB, {distinct} tokens x "
        f"{ppr:.2f} pages/row ({row_bytes} B rows) x {window // 1024} KiB fault-around)",
    }


def build_plan(profile: dict[str, Any] | None = None, distinct: int | None = None) -> dict:
    """Per-component bytes (with their derivation or measurement) and the four totals."""
    profile = profile or jm.load_profile()
    plan_cfg, robot = profile["plan"], profile["robot"]
    distinct = int(distinct or plan_cfg["distinct_tokens"])
    settings = engine_settings(profile)
    llm = settings["config"]
    groups = jm.tensor_bytes(profile["tensors"])
    shape = jm.ModelShape.from_metadata(profile["metadata"], sum(groups.values()))
    ple = groups["per_layer_token_embd"]
    tok = groups["token_embd (tied output)"]
    n_ubatch = min(int(settings["n_batch"]), int(settings["n_ubatch"]))
    cache = llm["cache_type_k"].upper()
    if llm["cache_type_v"].upper() != cache:
        raise ValueError("the plan models one cache type for K and V")
    meta = profile["metadata"]
    n_ple = int(meta["gemma4.embedding_length_per_layer_input"]) * shape.n_layer
    c: dict[str, dict[str, Any]] = {}
    c["llm_gpu_weights"] = {
        "bytes": shape.weight_bytes - ple,
        "derivation": "all tensor groups of the profile except per_layer_token_embd (host); "
        "token_embd counted once, as the GPU output copy",
    }
    if settings["model_params"].get("no_host"):
        c["embeddings_token_host"] = table_resident(tok, tok // shape.n_vocab, distinct, plan_cfg)
        c["embeddings_per_layer_host"] = table_resident(
            ple, ple // shape.n_vocab, distinct, plan_cfg
        )
    else:  # llama.cpp's default: pinned host copies, read in whole
        c["embeddings_token_host"] = {"bytes": tok, "derivation": "pinned host copy (whole)"}
        c["embeddings_per_layer_host"] = {"bytes": ple, "derivation": "pinned host copy (whole)"}
    for name, ctx in (("4k", 4096), ("36k", 36864)):
        kv = shape.kv_bytes(ctx, n_ubatch, bool(settings["swa_full"]), cache)
        c[f"kv_{name}"] = {
            "bytes": kv["total"],
            "derivation": f"{shape.n_kv_owner} cache layers ({sum(shape.swa[: shape.n_kv_owner])}"
            f" SWA x pad(n_swa {shape.n_swa} + n_ubatch {n_ubatch}, 256) cells, the rest x "
            f"{ctx}) x heads_kv x (k+v) in {cache}",
        }
    if not settings["swa_full"]:  # SwaGuard's two host copies of the SWA cells (anchor, recent)
        _, swa_cells = shape.kv_cells(4096, n_ubatch, False)  # (the same at any n_ctx above)
        swa = shape.kv_bytes(4096, n_ubatch, False, cache)["swa"]
        c["swa_checkpoints"] = {
            "bytes": 2 * swa,
            "derivation": f"2 x the SWA layers' {swa_cells} cells (the anchor and the recent "
            "checkpoint), host copies; a bound: only occupied cells are saved",
        }
    c["compute_logits"] = {
        "bytes": shape.compute_bytes(n_ubatch),
        "derivation": f"4 B x n_ubatch {n_ubatch} x (n_vocab {shape.n_vocab} + 2 x n_embd)",
    }
    c["compute_host_inputs"] = {
        "bytes": 4 * n_ubatch * (shape.n_embd + n_ple) + 4 * shape.n_vocab,
        "derivation": "f32 rows gathered on the host for one micro-batch (token + per-layer "
        "embeddings) + one output row of logits",
    }
    dr = profile["drafter"]
    c["drafter_weights"] = {
        "bytes": jm.quant_bytes(dr["type"], int(dr["params"])),
        "derivation": f"{int(dr['params']) / 1e6:.0f}M params in {dr['type']} (embeddings and LM "
        "head shared with the target)",
    }
    cells = -(-(int(dr["kv_window"]) + n_ubatch) // 256) * 256
    elems = int(dr["layers"]) * int(dr["head_count_kv"]) * 2 * int(dr["head_dim"]) * cells
    c["drafter_kv"] = {
        "bytes": jm.quant_bytes(cache, elems),
        "derivation": f"{dr['layers']} layers x {cells} SWA cells x heads_kv x 2 x head_dim "
        f"in {cache}",
    }
    c["cuda_context"] = {
        "bytes": int(float(profile["runtime"]["cuda_overhead_mb"]) * MIB),
        "derivation": "ASSUMPTION (bench/gpu_check.sh measures it)",
    }
    llm_common = sum(v["bytes"] for k, v in c.items() if not k.startswith("kv_"))
    for k, v in robot.items():
        count = int(v.get("count", 1))
        c[k] = {"bytes": int(float(v["mb"]) * MIB * count), "derivation": v["source"]}
        if "settings" in v:
            c[k]["settings"] = v["settings"]
    robot_common = sum(int(float(v["mb"]) * MIB * int(v.get("count", 1))) for v in robot.values())
    out: dict[str, Any] = {"distinct_tokens": distinct, "llm_node": llm, "components": c}
    for name in ("4k", "36k"):
        llm_side = llm_common + c[f"kv_{name}"]["bytes"]
        out[f"llm_side_gb_{name}"] = round(llm_side / GB, 3)
        out[f"robot_total_gb_{name}"] = round((llm_side + robot_common) / GB, 3)
    for k, v in c.items():
        out[f"{k}_gb"] = round(v["bytes"] / GB, 4)
    return out

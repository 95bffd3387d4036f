"""GPU memory of a model under the Jetson profile's settings, next to the plan's formulas.

    python -m bolt_agent.benchmarks.gpu_memory_check [--model M.gguf] --out gpu_memory.json

Loads the model (default: a generated tiny Gemma 4 with a per-layer table, ``synthetic_gguf``)
with the profile's ``llm_node`` settings (all layers offloaded, q8_0 cache, the micro-batch,
``embeddings: mmap``), prefills and decodes, then records llama.cpp's own buffer report per
device, ``nvidia-smi``'s used memory before / after, decode speed, and the same terms from the
plan's formulas applied to the model's GGUF metadata. ``bench/gpu_check.sh`` runs it on a GPU; on
a CPU build every buffer is on the host (what the tests here run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MIB = 2**20


@contextlib.contextmanager
def stderr_to(path: Path) -> Iterator[None]:
    """Send llama.cpp's log to ``path`` for the block: fd 2 (ggml) and ``sys.stderr`` (where
    llama-cpp-python's log callback prints; a test runner replaces it)."""
    sys.stderr.flush()
    saved_fd, saved_py = os.dup(2), sys.stderr
    with open(path, "ab") as f:
        os.dup2(f.fileno(), 2)
    sys.stderr = open(path, "a", buffering=1)  # noqa: SIM115 - closed below
    try:
        yield
    finally:
        sys.stderr.close()
        sys.stderr = saved_py
        os.dup2(saved_fd, 2)
        os.close(saved_fd)


def buffers(log: str) -> dict[str, float]:
    """MiB per '<device> <kind>' buffer from llama.cpp's log (model, KV, compute, output)."""
    out: dict[str, float] = {}
    for dev, kind, mib in re.findall(
        r"(\S+)\s+(model|KV|compute|output) buffer size =\s+([\d.]+) MiB", log
    ):
        key = f"{dev} {kind}"
        out[key] = out.get(key, 0.0) + float(mib)
    return out


def gpu_used_mib() -> float | None:
    try:
        q = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"]
        return float(
            subprocess.run(q, capture_output=True, text=True, timeout=20).stdout.split()[0]
        )
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def plan_terms(model: str, settings: dict[str, Any]) -> dict[str, float]:
    """The plan's formulas on this model's GGUF metadata (MiB)."""
    from bolt_agent.benchmarks import jetson_memory as jm
    from bolt_agent.benchmarks.embedding_residency import tensor_range

    shape = jm.shape_from_gguf(model)
    try:
        ple = tensor_range(model, "per_layer_token_embd.weight")[1]
    except KeyError:
        ple = 0
    n_ubatch = min(settings["n_batch"], settings["n_ubatch"])
    cache = settings["cache_type_k"].upper()
    kv = shape.kv_bytes(settings["n_ctx"], n_ubatch, settings["swa_full"], cache)
    return {
        "weights_on_device_mib": (shape.weight_bytes - ple) / MIB,
        "kv_mib": kv["total"] / MIB,
        "compute_logits_mib": shape.compute_bytes(n_ubatch) / MIB,
    }


def run(model: str, settings: dict[str, Any], n_prompt: int, n_decode: int) -> dict[str, Any]:
    import numpy as np
    from llama_cpp import llama_cpp as capi

    from bolt_agent.core.llm.llama.engine import LlamaConfig, LlamaEngine

    used0 = gpu_used_mib()
    log_path = Path(tempfile.mkstemp(suffix=".log")[1])
    keys = ("n_ctx", "n_gpu_layers", "n_batch", "n_ubatch", "swa_full", "flash_attn")
    keys += ("cache_type_k", "cache_type_v", "use_mmap", "embeddings")
    config = LlamaConfig(model, extra={"verbose": True}, **{k: settings[k] for k in keys})
    with stderr_to(log_path):
        engine = LlamaEngine(config).load()
        llm = engine.llm
        n_vocab = llm.n_vocab()
        prompt = [300 + (i * 7919) % (n_vocab - 300) for i in range(n_prompt)]
        t0 = time.monotonic()
        llm.eval(prompt)
        t1 = time.monotonic()
        for _ in range(n_decode):  # greedy on the last logits row
            row = capi.llama_get_logits_ith(llm._ctx.ctx, -1)
            llm.eval([int(np.ctypeslib.as_array(row, shape=(n_vocab,)).argmax())])
        t2 = time.monotonic()
        used1 = gpu_used_mib()
        engine.close()
    log = log_path.read_text(errors="replace")
    log_path.unlink()
    return {
        "model": model,
        "settings": settings,
        "llama_cpp_buffers_mib": buffers(log),
        "plan_mib": plan_terms(model, settings),
        "nvidia_smi_used_mib": {"before": used0, "loaded": used1},
        "prefill_tok_s": n_prompt / max(t1 - t0, 1e-9),
        "decode_tok_s": n_decode / max(t2 - t1, 1e-9),
        "gpu_offload": "CUDA" in log,
    }


def main(argv: list[str] | None = None) -> int:
    from bolt_agent.benchmarks import jetson_memory as jm

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="", help="GGUF ('' = generate the tiny Gemma 4)")
    ap.add_argument("--n-ctx", type=int, default=0, help="0 = the profile's")
    ap.add_argument("--prompt", type=int, default=200)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    settings = dict(jm.load_profile()["llm_node"])
    if args.n_ctx:
        settings["n_ctx"] = args.n_ctx
    model = args.model
    if not model:
        from bolt_agent.benchmarks.synthetic_gguf import write_gemma4

        model = str(write_gemma4(Path(tempfile.mkdtemp()) / "tiny-gemma4.gguf"))
    result = run(model, settings, args.prompt, args.decode)
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

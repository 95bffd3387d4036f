"""The plan's modelled terms against real llama.cpp on this CPU: q8_0 KV bytes, the compute
buffer against the micro-batch, and the resident bytes of mmap'ed embedding tables."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from bolt_agent.benchmarks import jetson_memory as jm
from bolt_agent.benchmarks.embedding_residency import PAGE, expected_pages_per_row
from bolt_agent.benchmarks.synthetic_gguf import write_gemma4
from bolt_agent.core.llm.llama.engine import LlamaConfig, LlamaEngine
from bolt_agent.core.models import resolve_model


@pytest.fixture(scope="module")
def jetson_like_log(tmp_path_factory) -> tuple[str, jm.ModelShape]:
    """llama.cpp's log of the bundled model loaded with the Jetson profile's cache type and
    micro-batch (q8_0 K/V, flash attention, n_ubatch 64): it reports its buffers at load."""
    from bolt_agent.benchmarks.gpu_memory_check import stderr_to

    log = tmp_path_factory.mktemp("log") / "llama.log"
    config = LlamaConfig(
        str(resolve_model("", kind="llm")),
        n_ctx=4096,
        n_batch=64,
        n_ubatch=64,
        flash_attn="on",
        cache_type_k="q8_0",
        cache_type_v="q8_0",
        extra={"verbose": True},
    )
    with stderr_to(log):
        engine = LlamaEngine(config).load()
        meta = {**engine.metadata, "tokenizer.ggml.vocab_size": engine.llm.n_vocab()}
        engine.close()
    return log.read_text(errors="replace"), jm.ModelShape.from_metadata(meta)


def test_q8_0_kv_cache_bytes_match_llama_cpp(jetson_like_log):
    """The shape comes from the GGUF metadata as llama.cpp read it (the calculator's input)."""
    log, shape = jetson_like_log
    kv = [float(m) for m in re.findall(r"llama_kv_cache: size =\s+([\d.]+) MiB", log)]
    assert re.search(r"K \(q8_0\)", log) and re.search(r"V \(q8_0\)", log)
    predicted = shape.kv_bytes(4096, n_ubatch=64, type_name="Q8_0")
    assert predicted["full"] / 2**20 == pytest.approx(kv[0], abs=0.01)
    assert predicted["swa"] / 2**20 == pytest.approx(kv[1], abs=0.01)
    assert predicted["total"] < 0.54 * shape.kv_bytes(4096, n_ubatch=64)["total"]


def test_compute_buffer_follows_the_micro_batch(jetson_like_log):
    """4 B x n_vocab x n_ubatch of logits (+ two activation rows): at 64 a quarter of the 256 that
    test_bench_jetson_memory checks."""
    log, shape = jetson_like_log
    got = re.search(r"CPU compute buffer size =\s+([\d.]+) MiB", log).group(1)
    assert shape.compute_bytes(64) / 2**20 == pytest.approx(float(got), rel=0.02)


def test_quantised_v_cache_without_flash_attention_is_refused():
    engine = LlamaEngine(LlamaConfig("x.gguf", cache_type_v="q8_0", flash_attn="off"))
    with pytest.raises(ValueError, match="flash_attn"):
        engine.llama_kwargs()


@pytest.fixture(scope="module")
def tiny_gemma4(tmp_path_factory):
    return write_gemma4(tmp_path_factory.mktemp("g4") / "tiny-gemma4.gguf")


def _residency(model, tokens: int, embeddings: str = "mmap", n_ubatch: int = 64) -> dict:
    """In a fresh process: the mapping as the load left it, nothing else touched it."""
    cmd = [sys.executable, "-m", "bolt_agent.benchmarks.embedding_residency", "--model", str(model)]
    cmd += ["--tokens", str(tokens), "--embeddings", embeddings, "--n-ubatch", str(n_ubatch)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_lazy_per_layer_table_holds_only_the_pages_of_seen_rows(tiny_gemma4):
    t = _residency(tiny_gemma4, 48)["tables"]["per_layer_token_embd.weight"]
    assert t["resident_before"] == 0  # nothing of the table is resident after the load
    # one micro-batch: the pages the 48 rows span (+ edge pages), within two pages
    assert abs(t["resident_after"] - t["model"]) <= 2 * PAGE
    assert t["resident_after"] < t["bytes"] / 20


def test_resident_tables_stay_under_the_plans_bound(tiny_gemma4):
    n = 160  # three micro-batches: more than the row pages (fault-around), under the bound
    tables = _residency(tiny_gemma4, n)["tables"]
    for name, t in tables.items():
        bound = min(t["bytes"], n * expected_pages_per_row(t["row_bytes"]) * 64 * 1024)
        assert t["resident_after"] <= bound, name
    ple = tables["per_layer_token_embd.weight"]
    assert ple["model"] - 2 * PAGE <= ple["resident_after"] < ple["bytes"] / 2


def test_without_mmap_embeddings_the_whole_file_is_resident(tiny_gemma4):
    """llama.cpp's default (embeddings: auto): the file is mapped MAP_POPULATE, so on this CPU
    the per-layer table is resident in whole before any token (on a GPU: a pinned copy)."""
    auto = _residency(tiny_gemma4, 48, embeddings="auto")
    lazy = _residency(tiny_gemma4, 48, embeddings="mmap")
    ple = lazy["tables"]["per_layer_token_embd.weight"]["bytes"]
    assert auto["file_resident"] >= 0.99 * auto["file_bytes"]  # all but the unmapped header
    assert lazy["file_resident"] <= lazy["file_bytes"] - ple + 0.05 * ple

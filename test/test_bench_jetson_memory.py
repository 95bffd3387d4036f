"""The Jetson memory calculator against the bundled gemma-3-270m GGUF and llama.cpp's own report."""

from __future__ import annotations

import re

import pytest

from bolt_agent.benchmarks import jetson_memory as jm
from bolt_agent.core.models import resolve_model


@pytest.fixture(scope="module")
def gemma_path():
    return resolve_model("", kind="llm")


def _llama_report(path, capfd, swa_full: bool) -> tuple[dict[str, float], int, int]:
    """KV MiB per cache kind and compute MiB from llama.cpp's log, and the state size."""
    import llama_cpp
    from llama_cpp import Llama

    llm = Llama(
        model_path=str(path), n_ctx=4096, n_batch=256, n_threads=2, verbose=True, swa_full=swa_full
    )
    tokens = llm.tokenize(b"hello world " * 100)
    llm.eval(tokens)
    state = llama_cpp.llama_state_get_size(llm._ctx.ctx)
    llm.close()
    log = capfd.readouterr().err
    kv = [float(m) for m in re.findall(r"llama_kv_cache: size =\s+([\d.]+) MiB", log)]
    compute = float(re.search(r"CPU compute buffer size =\s+([\d.]+) MiB", log).group(1))
    return {"full": kv[0], "swa": kv[1], "compute": compute}, state, len(tokens)


@pytest.mark.parametrize("swa_full", [True, False])
def test_kv_cache_matches_llama_cpp(gemma_path, capfd, swa_full):
    shape = jm.shape_from_gguf(gemma_path)
    assert (shape.arch, shape.n_layer, shape.n_swa, shape.n_vocab) == ("gemma3", 18, 512, 262144)
    assert sum(not s for s in shape.swa) == 3  # every 6th layer is full attention
    reported, state, n_tokens = _llama_report(gemma_path, capfd, swa_full)
    predicted = shape.kv_bytes(4096, n_ubatch=256, swa_full=swa_full)
    assert predicted["full"] / 2**20 == pytest.approx(reported["full"], abs=0.01)
    assert predicted["swa"] / 2**20 == pytest.approx(reported["swa"], abs=0.01)
    assert shape.compute_bytes(256) / 2**20 == pytest.approx(reported["compute"], rel=0.01)
    # the serialised state: K/V of every cached token (+ a few KB of logits/header)
    assert 0 <= state - shape.state_bytes(n_tokens) < 64 * 1024


def test_weights_are_the_tensor_bytes(gemma_path):
    shape = jm.shape_from_gguf(gemma_path)
    assert shape.weight_bytes == pytest.approx(235.16 * 2**20, rel=0.001)  # llama.cpp's figure
    assert shape.weight_bytes < gemma_path.stat().st_size


def test_jetson_profile_prediction():
    pred = jm.predict(jm.load_profile())
    assert pred["kv_owner_layers"] == 24 and pred["swa_layers"] == 20
    small, large = pred["profiles"]["4k"], pred["profiles"]["36k"]
    # only the 4 full-attention cache layers grow with the context: 4 x 2 x 1024 values per
    # token, in the profile's q8_0 cache (34 B per 32 values)
    growth = large["kv_bytes"]["total"] - small["kv_bytes"]["total"]
    assert growth == 4 * 2 * 1024 * (36864 - 4096) * 34 // 32
    assert 3.5 < pred["weights_bytes"] / 1e9 < 5.5
    assert small["total_gb"] < large["total_gb"] < 8.0


def test_jetson_profile_runs_what_the_engine_passes_llama_cpp():
    """The prediction assumes the engine's own settings for the profile's llm_node parameters
    (all layers on the GPU): the physical batch llama.cpp gets, the cache type, the SWA cache size
    and flash attention."""
    from bolt_agent.core.llm.llama.engine import LlamaConfig, LlamaEngine

    profile = jm.load_profile()
    runtime, params = profile["runtime"], profile["llm_node"]
    keys = ("n_gpu_layers", "n_batch", "n_ubatch", "swa_full", "flash_attn", "cache_type_k")
    kwargs = LlamaEngine(LlamaConfig("bolt.gguf", **{k: params[k] for k in keys})).llama_kwargs()
    assert runtime["n_ubatch"] == min(kwargs["n_batch"], kwargs["n_ubatch"])
    assert runtime["swa_full"] == kwargs["swa_full"]
    assert runtime["flash_attn"] == kwargs["flash_attn"] is True
    assert runtime["cache_type"] == "Q8_0" and kwargs["type_k"] == 8  # GGML_TYPE_Q8_0

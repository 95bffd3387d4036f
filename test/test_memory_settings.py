"""Process memory settings: glibc arenas (bolt_agent/__init__), heap trimming, Piper's arena."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from bolt_agent.core.memory import release_free_memory

ARENAS = r"""
import ctypes, re, tempfile, threading
import bolt_agent  # noqa: F401 - sets the malloc options
import numpy as np
barrier = threading.Barrier(8)
def work():
    barrier.wait()
    for _ in range(50):
        np.ones(64 * 1024)  # 512 KiB: malloc'd while the other threads malloc too
threads = [threading.Thread(target=work) for _ in range(8)]
[t.start() for t in threads]
[t.join() for t in threads]
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
with tempfile.NamedTemporaryFile(suffix=".xml") as f:
    fp = libc.fopen(f.name.encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(fp))
    libc.fclose(ctypes.c_void_p(fp))
    print(len(re.findall(r"<heap nr=", open(f.name).read())))
"""


def _arenas(**env: str) -> int:
    clean = {k: v for k, v in os.environ.items() if "MALLOC" not in k}
    out = subprocess.run(
        [sys.executable, "-c", ARENAS], env={**clean, **env}, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_every_process_caps_the_malloc_arenas():
    assert _arenas() <= 2
    assert _arenas(BOLT_MALLOC_ARENA_MAX="0") > 2  # glibc's default: an arena per busy thread


def test_release_free_memory_returns_a_bool():
    assert release_free_memory() in (True, False)


def test_piper_gives_the_arena_back_only_after_long_sentences():
    from bolt_agent.core.models import resolve_model
    from bolt_agent.core.tts.tts_engine import PiperEngine

    tts = PiperEngine(resolve_model("", kind="tts"), shrink_above_chars=30)
    tts.load()
    session = tts._voice.session
    assert len(tts.synthesize_sentence("Hello there.")) > 0
    assert session.shrink is False
    long = "The little robot rolled across the kitchen floor, humming a tune."
    assert len(tts.synthesize_sentence(long)) > 0
    assert session.shrink is True
    assert re.match(r"\w+", session.get_inputs()[0].name)  # the wrapper passes attributes on
    tts.close()


RELEASE = r"""
import json
from bolt_agent.benchmarks.stack_host import rss_mb
from bolt_agent.core.memory import release_free_memory
from bolt_agent.core.models import resolve_model
from bolt_agent.core.tts.tts_engine import PiperEngine

tts = PiperEngine(resolve_model("", kind="tts"), cpu_threads=1)  # shrink above 60 characters
tts.load()
for text in ("Yes,", "I can see a bright and cosy room.", "I want a long sword and a shield."):
    tts.synthesize_sentence(text)  # each under 60 characters: the arena keeps its peak
release_free_memory()
kept = rss_mb()["RssAnon"]
tts.release_memory()
release_free_memory()
released = rss_mb()["RssAnon"]
tts.release_memory()
again = rss_mb()["RssAnon"]
samples = len(tts.synthesize_sentence("Still speaking."))
print(json.dumps({"kept": kept, "released": released, "again": again, "samples": samples}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc RSS")
def test_piper_release_memory_gives_the_kept_arena_back():
    """tts_node calls release_memory once a turn is spoken: the arena's peak of the turn's
    short sentences (kept for speed while speaking) goes back between turns."""
    out = subprocess.run([sys.executable, "-c", RELEASE], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    mib = json.loads(out.stdout.strip().splitlines()[-1])
    assert mib["kept"] - mib["released"] >= 30, mib  # measured ≈ 80 MiB
    assert abs(mib["again"] - mib["released"]) < 10, mib  # nothing more to give: no growth
    assert mib["samples"] > 0  # the voice still speaks after its arena shrank


def test_piper_release_memory_after_close_does_nothing_and_synthesis_says_why():
    """tts_node's tracking thread may release memory while the node is cleaned up."""
    from bolt_agent.core.models import resolve_model
    from bolt_agent.core.tts.tts_engine import PiperEngine

    tts = PiperEngine(resolve_model("", kind="tts"))
    tts.load()
    tts.release_memory()  # one word's synthesis on a fresh arena
    tts.close()
    tts.release_memory()  # the voice is gone: nothing to do, no error
    with pytest.raises(RuntimeError, match="closed"):
        tts.synthesize_sentence("Hello.")


NODE_HEAP = r"""
import ctypes, json
import rclpy
from rclpy.context import Context
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.parameter import Parameter
from bolt_agent.benchmarks.stack_host import rss_mb
from bolt_agent.nodes.tts_node import TtsNode
def trimmable():  # MiB that a malloc_trim would give back now
    before = rss_mb()["RssAnon"]
    ctypes.CDLL(None).malloc_trim(0)
    return before - rss_mb()["RssAnon"]
context = Context()
rclpy.init(context=context)
node = TtsNode(context=context, parameter_overrides=[
    Parameter("autostart", value=False), Parameter("audio_sink", value="topic")])
held = {}
assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
held["configured"] = trimmable()
assert node.trigger_cleanup() == TransitionCallbackReturn.SUCCESS
held["cleaned_up"] = trimmable()
node.destroy_node()
rclpy.shutdown(context=context)
print(json.dumps(held))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_a_lifecycle_node_gives_its_load_temporaries_back():
    """A node in a process of its own (ros2 launch) keeps no model-loading garbage: after
    configure (Piper's graph: ~28 MiB of free heap that a trim returns, without the node's own
    trim) and after cleanup (the voice dropped), almost nothing is left to give back."""
    out = subprocess.run([sys.executable, "-c", NODE_HEAP], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    held = json.loads(out.stdout.strip().splitlines()[-1])
    assert held["configured"] < 4, held
    assert held["cleaned_up"] < 4, held


def test_llm_weights_stay_file_backed_without_cpu_repack(tmp_path):
    """``cpu_repack`` off (the default): llama.cpp keeps no anonymous repacked copy of the CPU
    weights (12.7 MiB for the bundled model). Measured by ``benchmarks.node_memory`` in a
    process of its own, as a user runs it (in the test process, the heap earlier tests left
    changes what a load adds)."""
    from bolt_agent.core.llm.llama.engine import LlamaConfig

    out = tmp_path / "repack.json"
    cmd = [sys.executable, "-m", "bolt_agent.benchmarks.node_memory", "--skip-nodes"]
    run = subprocess.run(
        [*cmd, "--rounds", "1", "--out", str(out)], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stdout + run.stderr
    repack = json.loads(out.read_text())["repack"]
    assert repack["use_extra_bufts"] == {"off": False, "on": True}, repack
    assert repack["repacked_copy_mib"] >= 10, repack
    assert LlamaConfig("model.gguf").cpu_repack is False


def test_the_k_cache_is_q8_0_on_the_cpu_and_matches_v_with_flash_attention():
    """``cache_type_k: auto``: q8_0 without flash attention, V's type with it (llama.cpp's GPU
    flash-attention kernels want one type for K and V). On the bundled model the SWA cells a
    checkpoint saves shrink to (272 + 512) / 1024 of f16's: K rows of 256 values, q8_0 34 B per
    32, V f16."""
    from llama_cpp import llama_cpp as capi

    from bolt_agent.core.llm.llama.engine import LlamaConfig, LlamaEngine
    from bolt_agent.core.llm.llama.swa_cache import ALL_CELLS
    from bolt_agent.core.models import resolve_model

    def kinds(**kw) -> tuple[int, int]:
        args = LlamaEngine(LlamaConfig("model.gguf", **kw)).llama_kwargs()
        return args["type_k"], args["type_v"]

    q8, f16 = capi.GGML_TYPE_Q8_0, capi.GGML_TYPE_F16
    assert kinds() == (q8, f16)  # no GPU layers: flash attention off
    assert kinds(n_gpu_layers=-1) == (f16, f16)  # flash_attn auto: on with GPU layers
    assert kinds(flash_attn="on", cache_type_v="q8_0") == (q8, q8)
    assert kinds(cache_type_k="f16") == (f16, f16)

    model = str(resolve_model("", kind="llm"))
    sizes = {}
    for kind in ("f16", "auto"):
        engine = LlamaEngine(LlamaConfig(model, cache_type_k=kind)).load()
        try:
            engine.llm.eval(engine.llm.tokenize(b"The robot looks around the room. " * 40))
            ctx = engine.llm._ctx.ctx
            sizes[kind] = capi.llama_state_seq_get_size_ext(
                ctx, ALL_CELLS, capi.LLAMA_STATE_SEQ_FLAGS_SWA_ONLY
            )
        finally:
            engine.close()
    assert abs(sizes["auto"] / sizes["f16"] - (272 + 512) / 1024) < 0.01, sizes

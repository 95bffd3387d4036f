"""Process memory settings: glibc arenas (bolt_agent/__init__), heap trimming, Piper's arena."""

from __future__ import annotations

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
    from bolt_agent.core.speech.tts_engine import PiperEngine

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

"""Process memory: glibc malloc settings at start-up, and freed heap given back between turns.

glibc keeps the pages of freed blocks in the middle of its heaps (it only shrinks a heap from the
top): after a turn, the peaks of whisper, the grammar passes over the 262k-token vocabulary and
Piper stay resident (≈ 150 MB after 10 turns in ``benchmarks/memory_probe``). ``malloc_trim(0)``
returns every free page; call it when a turn is over (9-20 ms on this CPU, off the critical path;
the next turn faults back in what it needs). Everything here does nothing outside glibc.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

_libc: Any = None  # None: not looked up yet; False: not glibc


def _glibc() -> Any:
    global _libc
    if _libc is None:
        try:
            libc = ctypes.CDLL(None)
            libc.gnu_get_libc_version  # noqa: B018 - glibc only
            _libc = libc
        except (OSError, AttributeError):
            _libc = False
    return _libc


def tune_malloc() -> None:
    """glibc malloc settings for one process running several models' threads (before any thread).

    - ``M_ARENA_MAX`` (``BOLT_MALLOC_ARENA_MAX``, default 2): glibc gives threads arenas of their
      own (up to 8 per core), and memory freed in one is reused by that arena only; with rclpy's
      executor threads, node workers, ggml, CTranslate2 and onnxruntime in one process each
      arena kept its own peak.
    - ``M_MMAP_THRESHOLD`` (``BOLT_MALLOC_MMAP_THRESHOLD`` bytes, default 4 MiB): glibc raises the
      threshold up to 32 MiB as big blocks are freed, after which multi-MiB temporaries (grammar
      passes over the 262k vocabulary, whisper features) stay in the heap once freed; a fixed
      threshold maps them and returns them on free (1 MiB slowed whisper by a third; 4 MiB did
      not). Numbers: ``python -m bolt_agent.benchmarks.memory_probe``, docs/benchmarks.md.

    ``0`` keeps glibc's default; glibc's own ``MALLOC_ARENA_MAX`` / ``MALLOC_MMAP_THRESHOLD_``
    win when set. Called once by ``bolt_agent/__init__`` in every process of the project.
    """
    libc = _glibc()
    if not libc:
        return
    for ours, glibc, param, default in (
        ("BOLT_MALLOC_ARENA_MAX", "MALLOC_ARENA_MAX", -8, "2"),
        ("BOLT_MALLOC_MMAP_THRESHOLD", "MALLOC_MMAP_THRESHOLD_", -3, str(4 << 20)),
    ):
        value = os.environ.get(ours, default)
        if glibc not in os.environ and value.isdigit() and int(value) > 0:
            libc.mallopt(param, int(value))


def release_free_memory() -> bool:
    """``malloc_trim(0)`` on glibc (True if memory was returned); False elsewhere."""
    libc = _glibc()
    return bool(libc and libc.malloc_trim(0))

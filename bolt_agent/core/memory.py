"""Giving freed heap memory back to the OS between turns.

glibc keeps the pages of freed blocks in the middle of its heaps (it only shrinks a heap from the
top): after a turn, the peaks of whisper, the grammar passes over the 262k-token vocabulary and
Piper stay resident (≈ 150 MB after 10 turns in ``benchmarks/memory_probe``). ``malloc_trim(0)``
returns every free page; call it when a turn is over (9-20 ms on this CPU, off the critical path;
the next turn faults back in what it needs).
"""

from __future__ import annotations

import ctypes

_libc = None


def release_free_memory() -> bool:
    """``malloc_trim(0)`` on glibc (True if memory was returned); False elsewhere."""
    global _libc
    if _libc is None:
        try:
            libc = ctypes.CDLL(None)
            libc.malloc_trim  # noqa: B018 - glibc only
            _libc = libc
        except (OSError, AttributeError):
            _libc = False
    return bool(_libc and _libc.malloc_trim(0))

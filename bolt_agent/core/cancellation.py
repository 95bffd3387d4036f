"""Cancellation by generation: every job is stamped with the generation current when it was made.

A cancel bumps the counter, so every job stamped before it is stale wherever it is (a queue, a
worker, the middle of a decode loop) without anyone having to find and stop it. The lock makes
the read-compare explicit instead of leaning on the GIL.
"""

from __future__ import annotations

import threading


class CancelToken:
    """Generation-id cancellation: ``cancel()`` invalidates every turn started before it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation = 0

    def current(self) -> int:
        with self._lock:
            return self._generation

    def cancel(self) -> None:
        with self._lock:
            self._generation += 1

    def is_stale(self, generation: int) -> bool:
        with self._lock:
            return generation != self._generation

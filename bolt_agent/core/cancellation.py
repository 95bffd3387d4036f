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
        self._lock = threading.RLock()  # (re-entered: ``begin`` calls ``current`` under it)
        self._generation = 0
        self._finished = -1  # the generation whose job ended (``finish``) before any cancel

    def current(self) -> int:
        with self._lock:
            return self._generation

    def cancel(self) -> bool:
        """Invalidate every job stamped so far; whether the current generation's job had not
        yet ``finish``-ed (a cancel that came after the end stopped nothing)."""
        with self._lock:
            stopped = self._finished != self._generation
            self._generation += 1
            return stopped

    def begin(self) -> int:
        """The generation a job starts under (``current()``); clears the previous job's end, as
        jobs made between two cancels share a generation."""
        with self._lock:  # one step: a cancel between the read and the clear would be lost
            generation = self.current()  # (through current(): a subclass pins what it is)
            self._finished = -1
        return generation

    def finish(self, generation: int) -> bool:
        """Mark the job of ``generation`` as ended, unless a cancel came first (False). One
        step with ``cancel``, so a turn either ends (its end marker goes out) or is cancelled
        (no marker, the canceller is told so), never both."""
        with self._lock:
            if generation != self._generation:
                return False
            self._finished = generation
            return True

    def is_stale(self, generation: int) -> bool:
        with self._lock:
            return generation != self._generation

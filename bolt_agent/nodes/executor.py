"""A multi-threaded executor that hands each ready callback to its threads once.

rclpy's ``MultiThreadedExecutor`` (Humble to Kilted) submits a callback to its thread pool and
goes back to waiting for work; but a callback that is queued in the pool and not yet started
counts as ready work, so the wait returns at once and the same callback is submitted again, and
again. The spin thread then loops without ever blocking, holding the GIL, and the pool's
threads, which need the GIL to start anything, barely run (rclpy#1452, fixed upstream by
rclpy#1547 after the distros' releases used here).

Seen in asr_node (test_echo_dds, 2 cores): py-spy showed the spin thread busy in
``_spin_once_impl`` for 23 s while the VAD thread waited for audio. audio/input's reader queue
(200 blocks, 6.4 s) overflowed, and 12-14 s of microphone audio were lost, with the user's
words in them, in 3 of 8 runs.

Here a callback already queued is not queued again: the spin thread waits, without the GIL,
until a pool thread has taken it (or 50 ms, then looks for other work).

It also survives an entity destroyed while the spin thread builds its wait set (rclpy#1385,
open): a lifecycle ``cleanup``, run on a pool thread, destroys the node's action server, and
the spin thread, between listing the node's waitables and adding them, raised "action server
pointer is invalid". That ended the executor and the node (test_lifecycle_gate, 1 run in
about 10). The wait is simply built again without it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import rclpy.logging
from rclpy.executors import (
    ConditionReachedException,
    ExternalShutdownException,
    MultiThreadedExecutor,
    ShutdownException,
    TimeoutException,
)
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

QUEUED_WAIT_S = 0.05  # how long the spin thread waits for a queued callback to start
#: waits in a row that may fail on a destroyed entity before the error is taken as real
MAX_DESTROYED_IN_A_ROW = 100


def _destroyed_entity(exc: Exception) -> bool:
    """A wait-set error from an entity destroyed meanwhile (not a broken context or wait set)."""
    return isinstance(exc, _rclpy.InvalidHandle) or "is invalid" in str(exc)


class SubmitOnceExecutor(MultiThreadedExecutor):
    """``MultiThreadedExecutor`` without the re-submission of queued callbacks (module doc)."""

    def __init__(self, num_threads: int | None = None, *, context: Any = None) -> None:
        super().__init__(num_threads=num_threads, context=context)
        self._queued: set[Any] = set()  # submitted to the pool, not started
        self._started = threading.Condition()
        self.destroyed_while_waiting = 0  # waits built again for an entity destroyed meanwhile
        self._destroyed_in_a_row = 0

    def _spin_once_impl(
        self,
        timeout_sec: Any = None,
        wait_condition: Callable[[], bool] = lambda: False,
    ) -> None:
        try:
            handler, _entity, _node = self.wait_for_ready_callbacks(
                timeout_sec, None, wait_condition
            )
        except (
            ExternalShutdownException,
            ShutdownException,
            TimeoutException,
            ConditionReachedException,
        ):
            return
        except (_rclpy.RCLError, _rclpy.InvalidHandle) as exc:
            self._destroyed_in_a_row += 1
            if not _destroyed_entity(exc) or self._destroyed_in_a_row > MAX_DESTROYED_IN_A_ROW:
                raise
            self.destroyed_while_waiting += 1
            self._cb_iter = None  # (rclpy's generator of ready work ended with the error)
            rclpy.logging.get_logger("bolt_agent.executor").info(
                f"an entity was destroyed while the executor waited ({exc}): waiting again"
            )
            return  # (the next spin builds a new wait set, without the destroyed entity)
        self._destroyed_in_a_row = 0
        with self._started:
            if handler in self._queued:  # waiting for a thread already: let one take it
                self._started.wait_for(lambda: handler not in self._queued, QUEUED_WAIT_S)
                return
            self._queued.add(handler)
        self._executor.submit(self._run, handler)
        self._futures.append(handler)
        for future in self._futures[:]:
            if future.done():
                self._futures.remove(future)
                future.result()  # a callback's exception ends the spin, as rclpy's does

    def _run(self, handler: Any) -> None:
        with self._started:
            self._queued.discard(handler)
            self._started.notify_all()
        handler()

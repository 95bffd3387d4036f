"""The nodes' executor hands each ready callback to its threads once (nodes/executor.py).

rclpy's MultiThreadedExecutor submits a callback that waits in its pool for a thread again and
again, spinning with the GIL held: in asr_node that starved the audio callbacks for seconds."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import rclpy
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.context import Context
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.waitable import NumberOfEntities, Waitable

from bolt_agent.nodes.executor import SubmitOnceExecutor


def _submissions_while_busy(executor_class) -> tuple[int, int]:
    """A 10 ms timer whose callback takes 50 ms, on one pool thread, for 0.5 s: the timer's
    next call waits in the pool behind the running one. (submissions, calls): rclpy's
    executor makes 21 submissions of 10 calls here."""
    context = Context()
    rclpy.init(context=context)
    node = rclpy.create_node("busy", context=context)
    calls = []
    node.create_timer(
        0.01, lambda: (calls.append(1), time.sleep(0.05)), callback_group=ReentrantCallbackGroup()
    )
    executor = executor_class(num_threads=1, context=context)
    executor.add_node(node)
    submitted = []
    submit = executor._executor.submit
    executor._executor.submit = lambda *a, **k: (submitted.append(1), submit(*a, **k))[1]
    _spin_half_a_second(executor, executor.spin, node, context)
    return len(submitted), len(calls)


def _spin_half_a_second(executor, spin, node, context) -> None:
    """Run ``spin`` on a thread for 0.5 s, then shut the executor, node and context down."""
    spinning = threading.Thread(target=spin, daemon=True)
    spinning.start()
    time.sleep(0.5)  # (the executor's own threads do the work: nothing to wait on here)
    executor.shutdown()
    spinning.join(5)
    node.destroy_node()
    rclpy.shutdown(context=context)


@pytest.mark.filterwarnings("ignore:MultiThreadedExecutor is used with a single thread")
def test_a_callback_waiting_for_a_thread_is_submitted_once():
    submitted, calls = _submissions_while_busy(SubmitOnceExecutor)
    assert calls >= 5, calls  # the timer ran, one call at a time
    # each call once, plus at most the one waiting when the spin ended
    assert submitted <= calls + 2, (submitted, calls)


class _DestroyedOnce(Waitable):
    """A waitable whose handle is gone the first time the executor adds it, as an action
    server destroyed by a lifecycle cleanup on a pool thread is (rclpy#1385)."""

    def __init__(self, error: str) -> None:
        super().__init__(ReentrantCallbackGroup())
        self.error, self.raised = error, 0

    def __enter__(self) -> None:  # (nothing native to hold)
        return None

    def __exit__(self, *exc) -> None:
        return None

    def add_to_wait_set(self, wait_set) -> None:
        if not self.raised:
            self.raised += 1
            raise _rclpy.RCLError(self.error)

    def is_ready(self, wait_set) -> bool:
        return False

    def take_data(self):
        return None

    async def execute(self, taken_data) -> None:
        return None

    def get_num_entities(self):
        return NumberOfEntities()


def _spin_with(executor_class, waitable: Waitable) -> tuple[int, list[str], Any]:
    """Spin a node holding ``waitable`` and a 10 ms timer for 0.5 s: (timer calls, the spin's
    error, the executor)."""
    context = Context()
    rclpy.init(context=context)
    node = rclpy.create_node("churn", context=context)
    node.add_waitable(waitable)
    calls: list[int] = []
    node.create_timer(0.01, lambda: calls.append(1))
    executor = executor_class(num_threads=2, context=context)
    executor.add_node(node)
    errors: list[str] = []

    def spin() -> None:
        try:
            executor.spin()
        except Exception as exc:  # what ends the node's process in runtime.py
            errors.append(repr(exc))

    _spin_half_a_second(executor, spin, node, context)
    return len(calls), errors, executor


INVALID = "Failed to add 'rcl_action_server_t' to wait set: action server pointer is invalid"


def test_an_entity_destroyed_while_the_executor_waits_does_not_end_it():
    from rclpy.executors import MultiThreadedExecutor

    calls, errors, executor = _spin_with(SubmitOnceExecutor, _DestroyedOnce(INVALID))
    assert errors == [] and executor.destroyed_while_waiting == 1
    assert calls >= 20, calls  # it went on serving the node
    # rclpy's own executor ends there: the node's process died of it (test_lifecycle_gate)
    calls, errors, _ = _spin_with(MultiThreadedExecutor, _DestroyedOnce(INVALID))
    assert errors and "pointer is invalid" in errors[0]


def test_any_other_wait_set_error_still_ends_the_spin():
    _, errors, executor = _spin_with(SubmitOnceExecutor, _DestroyedOnce("wait set is full"))
    assert errors and "wait set is full" in errors[0]
    assert executor.destroyed_while_waiting == 0

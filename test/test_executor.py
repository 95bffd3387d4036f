"""The nodes' executor hands each ready callback to its threads once (nodes/executor.py).

rclpy's MultiThreadedExecutor submits a callback that waits in its pool for a thread again and
again, spinning with the GIL held: in asr_node that starved the audio callbacks for seconds."""

from __future__ import annotations

import threading
import time

import pytest
import rclpy
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.context import Context

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
    spinning = threading.Thread(target=executor.spin, daemon=True)
    spinning.start()
    time.sleep(0.5)  # (the executor's own threads do the work: nothing to wait on here)
    executor.shutdown()
    spinning.join(5)
    node.destroy_node()
    rclpy.shutdown(context=context)
    return len(submitted), len(calls)


@pytest.mark.filterwarnings("ignore:MultiThreadedExecutor is used with a single thread")
def test_a_callback_waiting_for_a_thread_is_submitted_once():
    submitted, calls = _submissions_while_busy(SubmitOnceExecutor)
    assert calls >= 5, calls  # the timer ran, one call at a time
    # each call once, plus at most the one waiting when the spin ended
    assert submitted <= calls + 2, (submitted, calls)

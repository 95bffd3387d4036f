"""Helpers for tests that talk real DDS: private contexts, spin-until, node processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import rclpy
from rclpy.context import Context
from rclpy.executors import Executor, SingleThreadedExecutor
from rclpy.node import Node


def spin_until(
    executor: Executor, predicate: Callable[[], bool], timeout: float = 10.0, what: str = ""
) -> None:
    """Spin `executor` until `predicate()` is true; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.1f}s waiting for {what or predicate}")
        executor.spin_once(timeout_sec=0.02)


@contextmanager
def ros_node(name: str, namespace: str = "") -> Iterator[tuple[Node, SingleThreadedExecutor]]:
    """A node in a private context with its own executor, torn down on exit."""
    context = Context()
    rclpy.init(context=context)
    node = rclpy.create_node(name, namespace=namespace, context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    try:
        yield node, executor
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown(context=context)


class NodeProcess:
    """A bolt_agent node (or any module) in a separate process; logs go to a file."""

    def __init__(self, args: list[str], log_path: Path, env: dict[str, str] | None = None):
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, *args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> int:
        """SIGINT (clean ROS shutdown), then SIGKILL if it does not exit in time."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


def wait_for_subscriber(executor: Executor, publisher, timeout: float = 10.0) -> None:
    spin_until(executor, lambda: publisher.get_subscription_count() > 0, timeout, "a subscriber")


def wait_for_publisher(executor: Executor, subscription, timeout: float = 10.0) -> None:
    spin_until(executor, lambda: subscription.get_publisher_count() > 0, timeout, "a publisher")

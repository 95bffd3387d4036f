"""Running nodes: one per process (console scripts) or several in one executor (embedded runner).

Lifecycle nodes declare an ``autostart`` parameter (default true): when set, the runner drives
configure → activate itself, so ``ros2 run bolt_agent llm_node`` works without a lifecycle
manager, while a launch file may set it false and drive the transitions.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Sequence

import rclpy
from rclpy.executors import Executor, ExternalShutdownException, MultiThreadedExecutor
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from rclpy.node import Node


def bring_up(node: Node) -> bool:
    """configure + activate a lifecycle node whose ``autostart`` is true; False on failure."""
    if not isinstance(node, LifecycleNode):
        return True
    if not node.has_parameter("autostart") or not node.get_parameter("autostart").value:
        return True
    if node.trigger_configure() != TransitionCallbackReturn.SUCCESS:
        node.get_logger().error("configure failed; node stays unconfigured")
        return False
    if node.trigger_activate() != TransitionCallbackReturn.SUCCESS:
        node.get_logger().error("activate failed")
        return False
    return True


def executor_threads(n_nodes: int) -> int:
    """The one thread-count rule for every executor we make (console scripts, embedded stack).

    Two per node, at least 4: a node may hold a thread in a callback that blocks (an action
    execute callback waiting on its goal, a service call waiting on a future) while its other
    callbacks (timers, subscriptions, the result that unblocks it) must still run. The executor's
    ThreadPoolExecutor starts a thread only when work arrives and none is idle, so a high cap
    costs nothing while the nodes are quiet.
    """
    return max(4, 2 * n_nodes)


def make_executor(nodes: Sequence[Node], num_threads: int | None = None) -> MultiThreadedExecutor:
    """A multi-threaded executor (``executor_threads`` unless told), with ``nodes`` added."""
    executor = MultiThreadedExecutor(num_threads=num_threads or executor_threads(len(nodes)))
    for node in nodes:
        executor.add_node(node)
    return executor


def spin_until_shutdown(executor: Executor) -> None:
    """Spin until Ctrl-C, rclpy shutdown or ``executor.shutdown()``; those end it quietly."""
    with contextlib.suppress(KeyboardInterrupt, ExternalShutdownException):
        executor.spin()


def spin_nodes(nodes: Sequence[Node], num_threads: int | None = None) -> None:
    """Spin nodes on one multi-threaded executor until Ctrl-C / shutdown; always clean up."""
    executor = make_executor(nodes, num_threads)
    try:
        spin_until_shutdown(executor)
    finally:
        executor.shutdown()
        for node in nodes:
            node.destroy_node()
        rclpy.try_shutdown()


def main_for(factory: Callable[[], Node], args: list[str] | None = None) -> int:
    """Console-script body: init, build the node, bring it up, spin, shut down cleanly."""
    rclpy.init(args=sys.argv if args is None else args)
    try:
        node = factory()
    except Exception as exc:  # a constructor error is a start-up error: say it, exit non-zero
        print(f"error: {exc}", file=sys.stderr)
        rclpy.try_shutdown()
        return 1
    bring_up(node)
    spin_nodes([node])
    return 0

"""Running nodes: one per process (console scripts) or several in one executor (embedded runner).

Lifecycle nodes declare an ``autostart`` parameter (default true): when set, the runner drives
configure → activate itself, so ``ros2 run bolt_agent llm_node`` works without a lifecycle
manager, while a launch file may set it false and drive the transitions.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import rclpy
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from rclpy.node import Node


def declare_autostart(node: LifecycleNode) -> None:
    node.declare_parameter("autostart", True)


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


def spin_nodes(nodes: Sequence[Node], num_threads: int | None = None) -> None:
    """Spin nodes on one multi-threaded executor until Ctrl-C / shutdown; always clean up."""
    executor = MultiThreadedExecutor(num_threads=num_threads or max(4, 2 * len(nodes)))
    for node in nodes:
        executor.add_node(node)
    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
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

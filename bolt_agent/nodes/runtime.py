"""Running nodes: one per process (console scripts) or several in one executor (embedded runner).

Lifecycle nodes declare an ``autostart`` parameter (default true): when set, the runner drives
configure → activate itself, so ``ros2 run bolt_agent llm_node`` works without a lifecycle
manager, while a launch file may set it false and drive the transitions.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Sequence

import rclpy
from rclpy.executors import Executor, ExternalShutdownException, MultiThreadedExecutor
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from rclpy.node import Node
from rclpy.utilities import remove_ros_args


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


def _ignore_further_interrupts() -> None:
    """Shutting down: a second SIGINT (a terminal's Ctrl-C reaches the process group and
    `ros2 launch` forwards one more) must not kill the clean-up half-way."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def spin_nodes(nodes: Sequence[Node], num_threads: int | None = None) -> None:
    """Spin nodes on one multi-threaded executor until Ctrl-C / shutdown; always clean up."""
    executor = make_executor(nodes, num_threads)
    try:
        spin_until_shutdown(executor)
    finally:
        _ignore_further_interrupts()
        executor.shutdown()
        for node in nodes:
            node.destroy_node()
        rclpy.try_shutdown()


#: console-script flag (before ``--ros-args``; `ros2 launch` passes it unless
#: ``exit_on_failure:=false``): a failed autostart exits with status 1 instead of staying up
EXIT_ON_FAILURE = "--exit-on-failure"


def main_for(factory: Callable[[], Node], args: list[str] | None = None) -> int:
    """Console-script body: init, build the node, bring it up, spin, shut down cleanly.

    A lifecycle node whose autostart configure/activate fails stays up, unconfigured (a
    lifecycle manager or ``ros2 lifecycle`` may retry), or with ``--exit-on-failure`` exits
    with status 1, so that a launch system sees it die (and ``respawn`` restarts it).
    """
    argv = sys.argv if args is None else args
    rclpy.init(args=argv)
    exit_on_failure = EXIT_ON_FAILURE in remove_ros_args(argv)[1:]
    try:
        node = factory()
    except Exception as exc:  # a constructor error is a start-up error: say it, exit non-zero
        print(f"error: {exc}", file=sys.stderr)
        rclpy.try_shutdown()
        return 1
    if not bring_up(node) and exit_on_failure:
        node.get_logger().fatal(f"start-up failed: exiting with status 1 ({EXIT_ON_FAILURE})")
        with contextlib.suppress(Exception):  # stops what configure may have started
            node.trigger_shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
        return 1
    spin_nodes([node])
    return 0

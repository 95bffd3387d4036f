"""Running nodes: one per process (console scripts) or several in one executor (embedded runner).

Lifecycle nodes declare an ``autostart`` parameter (default true): when set, the runner drives
configure → activate itself, so ``ros2 run bolt_agent llm_node`` works without a lifecycle
manager, while a launch file may set it false and drive the transitions.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import rclpy
from rclpy.executors import Executor, ExternalShutdownException, MultiThreadedExecutor
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from rclpy.logging import get_logger
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions
from rclpy.utilities import remove_ros_args

from bolt_agent.nodes.executor import SubmitOnceExecutor


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
    """A multi-threaded executor (``executor_threads`` unless told), with ``nodes`` added: rclpy's,
    less its re-submission of queued callbacks (``nodes/executor.py``)."""
    executor = SubmitOnceExecutor(num_threads=num_threads or executor_threads(len(nodes)))
    for node in nodes:
        executor.add_node(node)
    return executor


def spin_until_shutdown(executor: Executor) -> None:
    """Spin until Ctrl-C, rclpy shutdown or ``executor.shutdown()``; those end it quietly."""
    with contextlib.suppress(KeyboardInterrupt, ExternalShutdownException):
        executor.spin()


# --- signals ------------------------------------------------------------------------------------
# rclpy's own SIGINT/SIGTERM handlers shut the context down inside the signal: from then on a node
# can neither publish its last state nor stop its threads in order, and a Piper or llama.cpp
# thread still computing when the interpreter exits aborts the process ("terminate called without
# an active exception", seen on `ros2 launch` Ctrl-C). So rclpy runs without them and the caller
# shuts down in order while the context is valid: lifecycle shutdown (threads joined, devices
# closed), executor, nodes, rclpy. Set explicitly, SIGINT also works in a process started with it
# ignored (Python then leaves it ignored), which made `ros2 launch` children deaf to Ctrl-C.
#
# A console script's handler only sets a flag that its waits read: a KeyboardInterrupt raised
# wherever the main thread happens to be can land in code that swallows it (seen: a node that
# stayed up after a SIGINT during its start-up). The embedded runner's CLI raises
# KeyboardInterrupt (``interrupt=True``), as a Python program does on Ctrl-C.
_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_saved_handlers: dict[int, Any] = {}
_stop_requested = threading.Event()  # set by a handler; read with is_set() only (no lock taken)


def _interrupt(signum: int, _frame: Any) -> None:
    _stop_requested.set()
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _request_stop(signum: int, _frame: Any) -> None:
    _stop_requested.set()


def _already_stopping(signum: int, _frame: Any) -> None:
    """A second signal while shutting down (a terminal's Ctrl-C reaches the process group and
    `ros2 launch` forwards one more) must not kill the clean-up half-way."""


def _set_handlers(handler: Any) -> None:
    if threading.current_thread() is threading.main_thread():
        for sig in _SIGNALS:
            previous = signal.signal(sig, handler)
            _saved_handlers.setdefault(sig, previous)


class _RosLogHandler(logging.Handler):
    """The core's Python log records (``bolt_agent.*``, INFO and up) on the ROS logger of the
    same name: the core never imports rclpy, and its reasons (a verdict, a dropped job) belong
    in the node's log, `/rosout` and `ros2 launch`'s output, not only in stderr's last resort."""

    _LEVELS = ((logging.ERROR, "error"), (logging.WARNING, "warning"), (logging.INFO, "info"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            method = next((m for level, m in self._LEVELS if record.levelno >= level), "debug")
            getattr(get_logger(record.name), method)(self.format(record))
        except Exception:
            self.handleError(record)


def bridge_python_logging() -> None:
    """Send ``bolt_agent.*`` Python log records to ROS logging (once per process)."""
    root = logging.getLogger("bolt_agent")
    if not any(isinstance(h, _RosLogHandler) for h in root.handlers):
        root.addHandler(_RosLogHandler())
        root.setLevel(logging.INFO)


def init(args: Sequence[str] | None = None, interrupt: bool = True) -> None:
    """``rclpy.init`` without rclpy's signal handlers; SIGINT/SIGTERM (main thread) request a
    stop (``stop_requested()``) and, with ``interrupt``, raise KeyboardInterrupt. ``shutdown()``
    undoes it. The core's Python logging goes to ROS logging from here on."""
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    bridge_python_logging()
    _stop_requested.clear()
    _set_handlers(_interrupt if interrupt else _request_stop)


def stop_requested() -> bool:
    return _stop_requested.is_set()


def stopping() -> None:
    """From now on SIGINT/SIGTERM are ignored: the process is already shutting down."""
    _set_handlers(_already_stopping)


def shutdown() -> None:
    """rclpy down; the signal handlers that were there before ``init`` are back."""
    rclpy.try_shutdown()
    if threading.current_thread() is threading.main_thread():
        while _saved_handlers:
            sig, handler = _saved_handlers.popitem()
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def shut_down_lifecycle(nodes: Sequence[Node]) -> None:
    """Lifecycle shutdown (stops worker threads, closes devices) in reverse order; a failure is
    logged by its node and does not stop the others."""
    for node in reversed(nodes):
        if node.has_parameter("autostart") and hasattr(node, "trigger_shutdown"):
            try:
                node.trigger_shutdown()
            except Exception as exc:
                node.get_logger().error(f"shutdown failed: {exc!r}")


def wait_for_interrupt(done: threading.Event) -> None:
    """Block the main thread until SIGINT/SIGTERM or until ``done`` is set (waits of 0.1 s: the
    signal handler runs between them). Not ``Thread.join``: a KeyboardInterrupt inside it marks
    a thread that still runs as stopped (Python 3.11's ``_wait_for_tstate_lock``), so a later
    join returned at once and the process exited under a spinning executor (abort)."""
    with contextlib.suppress(KeyboardInterrupt):
        while not done.wait(0.1) and not stop_requested():
            pass


class SpinThread(threading.Thread):
    """The executor spinning in a background thread; ``done`` is set when it returns, ``error``
    holds what ended it abnormally (logged with its traceback)."""

    def __init__(self, executor: Executor) -> None:
        super().__init__(name="executor", daemon=True)
        self.executor = executor
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            spin_until_shutdown(self.executor)
        except Exception as exc:
            self.error = exc
            get_logger("runtime").error(f"the executor stopped:\n{traceback.format_exc()}")
        finally:
            self.done.set()


def spin_nodes(nodes: Sequence[Node], num_threads: int | None = None) -> bool:
    """Spin nodes on one multi-threaded executor (a background thread) until Ctrl-C/SIGTERM or
    shutdown, then shut down in order: lifecycle shutdown while the executor still spins (its
    callbacks may be needed), executor, nodes, rclpy. False when the executor failed."""
    executor = make_executor(nodes, num_threads)
    spinner = SpinThread(executor)
    spinner.start()
    try:
        wait_for_interrupt(spinner.done)
    finally:
        stopping()
        shut_down_lifecycle(nodes)
        executor.shutdown()
        if not spinner.done.wait(10.0):
            get_logger("runtime").error("the executor did not stop within 10 s")
        for node in nodes:
            node.destroy_node()
        shutdown()
    return spinner.error is None


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
    init(argv, interrupt=False)
    exit_on_failure = EXIT_ON_FAILURE in remove_ros_args(argv)[1:]
    node: Node | None = None
    up: bool | None
    try:
        node = factory()
        up = bring_up(node)
    except Exception as exc:  # a constructor error is a start-up error: say it, exit non-zero
        print(f"error: {exc}", file=sys.stderr)
        up = False
    if stop_requested():  # stopped while loading: shut down what was built, cleanly
        up = None
    if node is not None and (up or (up is False and not exit_on_failure)):
        return 0 if spin_nodes([node]) else 1  # (a failed bring-up stays up, unconfigured)
    stopping()
    if node is not None:
        if up is False:
            node.get_logger().fatal(f"start-up failed: exiting with status 1 ({EXIT_ON_FAILURE})")
        with contextlib.suppress(Exception):  # stops what configure may have started
            node.trigger_shutdown()
        node.destroy_node()
    shutdown()
    return 0 if up is None else 1

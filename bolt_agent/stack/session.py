"""``StackSession``: the embedded stack's lifetime in one place (the runner, the simulator, the
benchmark's stack host).

    with StackSession(StackSpec(profile="reachy_mini", sim=True)) as session:
        nodes = session.build()               # the spec's nodes (autostart off: we drive them)
        session.add(monitor, user)            # extra nodes: owned, torn down with the stack
        failed = session.bring_up(progress=print)   # configure + activate, in order
        session.start()                       # executor spinning in a background thread
        late = session.wait_ready()           # start-up work after activation (LLM prefill)
        ...
    # exit: lifecycle shutdown (reverse order), executor shut down, nodes destroyed, rclpy down

``spin()`` instead of ``start()`` also waits in the calling thread until Ctrl-C / SIGTERM /
shutdown. The executor comes from ``nodes.runtime`` (the console scripts use the same helper).
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable

import rclpy
from rclpy.executors import MultiThreadedExecutor
from rclpy.logging import get_logger
from rclpy.node import Node

from bolt_agent.nodes import runtime
from bolt_agent.stack.spec import StackSpec, bring_up_all, build_stack

#: the longest wait for the nodes' start-up work after activation (llm_node's prefill of the
#: system prompt: 3-4 s on 2 cores)
READY_TIMEOUT_S = 120.0
#: how long the exit waits for the background spin thread to return after the executor's shutdown
_JOIN_TIMEOUT_S = 10.0


class StackSession:
    """rclpy + the spec's nodes + extra nodes on one multi-threaded executor; all torn down on
    exit, every teardown failure logged (none swallowed, none stopping the rest)."""

    def __init__(self, spec: StackSpec, **node_kwargs):
        self.spec = spec
        self.node_kwargs = node_kwargs  # passed to every stack node's constructor
        self.stack_nodes: list[Node] = []  # built from the spec, in bring-up order
        self.nodes: list[Node] = []  # every node owned: stack nodes and extras, in added order
        self.executor: MultiThreadedExecutor | None = None
        self._thread: runtime.SpinThread | None = None
        self._owns_rclpy = False
        self.log = get_logger("stack_session")

    # -- lifetime -------------------------------------------------------------------------------
    def __enter__(self) -> StackSession:
        if not rclpy.ok():  # Ctrl-C/SIGTERM: KeyboardInterrupt in the main thread (runtime.init)
            runtime.init()
            self._owns_rclpy = True
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Lifecycle shutdown of the stack nodes in reverse order (while the executor still
        spins: shutdown callbacks may need it), then stop the executor and its thread, then
        destroy every node, then rclpy. Safe to call twice."""
        if self._owns_rclpy:
            runtime.stopping()  # a second Ctrl-C must not cut the clean-up short
        self._step("lifecycle shutdown", runtime.shut_down_lifecycle, self.stack_nodes)
        if self.executor is not None:
            self._step("executor shutdown", self.executor.shutdown)
            self.executor = None
        if self._thread is not None:
            if not self._thread.done.wait(_JOIN_TIMEOUT_S):  # (not join: wait_for_interrupt)
                self.log.error(f"the executor thread did not stop within {_JOIN_TIMEOUT_S} s")
            self._thread = None
        for node in reversed(self.nodes):
            self._step(f"destroying {_name(node)}", node.destroy_node)
        self.nodes, self.stack_nodes = [], []
        if self._owns_rclpy:
            self._step("rclpy shutdown", runtime.shutdown)
            self._owns_rclpy = False

    def _step(self, what: str, fn: Callable, *args) -> None:
        try:
            fn(*args)
        except Exception:
            self.log.error(f"{what} failed:\n{traceback.format_exc()}")

    # -- nodes ----------------------------------------------------------------------------------
    def build(self) -> list[Node]:
        """Construct the spec's nodes (``spec.build_stack``) and add them; returns them."""
        nodes = build_stack(self.spec, **self.node_kwargs)
        self.stack_nodes.extend(nodes)
        self.add(*nodes)
        return nodes

    def add(self, *nodes: Node) -> None:
        """Own extra nodes (console monitor, scripted user, bag player…): spun and destroyed with
        the stack; added to the executor at once when it already runs."""
        for node in nodes:
            self.nodes.append(node)
            if self.executor is not None:
                self.executor.add_node(node)

    def node(self, name: str) -> Node | None:
        return next((n for n in self.nodes if n.get_name() == name), None)

    # -- spinning -------------------------------------------------------------------------------
    def _ensure_executor(self) -> MultiThreadedExecutor:
        if self.executor is None:
            # sized once, for the nodes owned now (runtime.executor_threads says why)
            self.executor = runtime.make_executor(self.nodes)
        return self.executor

    def start(self) -> None:
        """Spin the executor in a background (daemon) thread."""
        if self._thread is not None:
            return
        self._thread = runtime.SpinThread(self._ensure_executor())
        self._thread.start()

    def spin(self) -> None:
        """Spin (in the background) until Ctrl-C / SIGTERM / rclpy shutdown / ``close()``."""
        self.start()
        runtime.wait_for_interrupt(self._thread.done)

    # -- lifecycle ------------------------------------------------------------------------------
    def bring_up(
        self,
        progress: Callable[[str], None] | None = None,
        after_each: Callable[[Node], None] | None = None,
    ) -> list[str]:
        """configure + activate the stack's lifecycle nodes in order; the names that failed.

        Call it before ``start()``: rclpy's ActionClient joins its node's waitables before it is
        fully built, and an executor iterating them at that moment dies (AttributeError
        ``_lock``; seen once with llm_node's tool clients), so nothing may spin the nodes while
        configure creates them. ``progress("starting <name>")`` before each one;
        ``after_each(node)`` after every node.
        """
        return bring_up_all(self.stack_nodes, progress=progress, after_each=after_each)

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> list[str]:
        """Wait (up to ``timeout`` s in all) for every stack node's start-up work after
        activation (``wait_ready``: llm_node's prefill of the system prompt); the names of the
        nodes still not ready. Call it after ``start()`` and before the first user turn."""
        deadline = time.monotonic() + timeout
        late = []
        for node in self.stack_nodes:
            wait = getattr(node, "wait_ready", None)
            if wait is not None and not wait(max(0.0, deadline - time.monotonic())):
                late.append(_name(node))
        return late


def _name(node: Node) -> str:
    try:
        return node.get_name()
    except Exception:
        return repr(node)

"""Tool calls → ROS 2 action goals (PlayAnimation / ExecuteTool), as concurrent futures.

Every failure becomes a ``ToolResult`` with an error the model can read: a dead or absent action
server, a rejected goal, a timeout (the goal is cancelled), or an aborted goal. Goals of a turn are
remembered so a barge-in can cancel them. Nothing here raises into a caller or the executor: an
error in a response callback settles the tool's future with that error (the turn goes on), and
a failing request in the drain is logged and the rest still run.

Goal, result and cancel requests are sent from a guard-condition callback in the action clients'
own mutually exclusive callback group, never from the caller's thread: rclpy's ActionClient
registers a request only after sending it, so a response handled concurrently by another
executor thread would be dropped ("Ignoring unexpected goal response") and its future never done.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
from concurrent.futures import Future, InvalidStateError
from typing import Any

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node

from bolt_agent.core.llm.turn_runner import ToolResult
from bolt_agent.core.tools.registry import Tool, ToolRegistry
from bolt_agent.nodes.action_client import ActionClient
from bolt_agent_interfaces.action import ExecuteTool, PlayAnimation

_ACTION_TYPES = {"play_animation": PlayAnimation, "execute_tool": ExecuteTool}
log = logging.getLogger(__name__)


class ToolDispatcher:
    def __init__(self, node: Node, registry: ToolRegistry, server_wait_s: float = 2.0):
        self._node = node
        self._registry = registry
        self._server_wait_s = server_wait_s
        self._group = MutuallyExclusiveCallbackGroup()
        self._clients: dict[tuple[str, str], ActionClient] = {}
        for tool in registry:
            key = (tool.binding.type, tool.binding.action)
            if key not in self._clients:
                self._clients[key] = ActionClient(
                    node,
                    _ACTION_TYPES[tool.binding.type],
                    tool.binding.action,
                    callback_group=self._group,
                )
        self._lock = threading.Lock()
        self._goals: dict[str, list[Any]] = {}  # turn id → goal handles in flight
        self._requests: queue.SimpleQueue = queue.SimpleQueue()  # callables run in the group
        self._guard = node.create_guard_condition(self._drain, callback_group=self._group)
        self.motion_held = False  # teleop override: motion tools refused

    def destroy(self) -> None:
        self._node.destroy_guard_condition(self._guard)
        for client in self._clients.values():
            client.destroy()
        self._clients.clear()

    def dispatch(self, turn_id: str, name: str, arguments: dict[str, Any]) -> Future[ToolResult]:
        """Send the goal; never raises. Call from a non-executor thread (it may wait briefly)."""
        try:
            return self._dispatch(turn_id, name, arguments)
        except Exception as exc:  # a bad goal field, a destroyed client: the model reads it
            future: Future[ToolResult] = Future()
            future.set_result(ToolResult(ok=False, error=f"{name}: not dispatched: {exc!r}"))
            return future

    def _dispatch(self, turn_id: str, name: str, arguments: dict[str, Any]) -> Future[ToolResult]:
        future: Future[ToolResult] = Future()
        tool = self._registry.get(name)
        if tool.binding.motion and self.motion_held:
            future.set_result(ToolResult(ok=False, error="held: the operator has taken over"))
            return future
        client = self._clients[(tool.binding.type, tool.binding.action)]
        if not client.wait_for_server(timeout_sec=self._server_wait_s):
            future.set_result(
                ToolResult(
                    ok=False, error=f"action server {tool.binding.action!r} is not available"
                )
            )
            return future
        goal = self._goal(tool, turn_id, arguments)
        sent: dict[str, Any] = {}
        timer = threading.Timer(tool.timeout_s, self._on_timeout, (future, sent, tool))
        timer.daemon = True

        def send() -> None:
            sent["future"] = client.send_goal_async(goal)
            sent["future"].add_done_callback(
                lambda f: self._on_goal_response(f, future, turn_id, tool, timer)
            )

        timer.start()
        self._submit(send)
        return future

    def cancel_turn(self, turn_id: str) -> int:
        """Cancel every goal of the turn that is still running; returns how many."""
        with self._lock:
            handles = self._goals.pop(turn_id, [])
        for handle in handles:
            self._submit(handle.cancel_goal_async)
        return len(handles)

    def _submit(self, request) -> None:
        self._requests.put(request)
        self._guard.trigger()

    def _drain(self) -> None:
        while True:
            try:
                request = self._requests.get_nowait()
            except queue.Empty:
                return
            try:
                request()
            except Exception as exc:  # one failed request must not end the executor
                self._node.get_logger().error(f"tool request failed: {exc!r}")

    # --- internals ---------------------------------------------------------------------------
    @staticmethod
    def _goal(tool: Tool, turn_id: str, arguments: dict[str, Any]):
        if tool.binding.type == "play_animation":
            fields = tool.binding.goal_fields(arguments)
            return PlayAnimation.Goal(
                name=str(fields.get("name", "")),
                speed=float(fields.get("speed", 1.0)),
                source="llm",
                turn_id=turn_id,
            )
        return ExecuteTool.Goal(tool_name=tool.name, arguments_json=json.dumps(arguments))

    def _on_goal_response(self, send_future, future, turn_id, tool, timer) -> None:
        try:
            handle = send_future.result()
        except Exception as exc:  # transport error
            timer.cancel()
            _settle(future, ToolResult(ok=False, error=f"goal not sent: {exc}"))
            return
        if not handle.accepted:
            timer.cancel()
            _settle(future, ToolResult(ok=False, error=f"{tool.name}: goal rejected by the server"))
            return
        with self._lock:
            self._goals.setdefault(turn_id, []).append(handle)
        future.goal_handle = handle  # type: ignore[attr-defined]
        handle.get_result_async().add_done_callback(
            lambda f: self._on_result(f, future, turn_id, handle, tool, timer)
        )

    def _on_result(self, result_future, future, turn_id, handle, tool, timer) -> None:
        try:
            self._take_result(result_future, future, turn_id, handle, tool, timer)
        except Exception as exc:  # a dead server's broken result: the turn still gets one
            _settle(future, ToolResult(ok=False, error=f"{tool.name}: no result: {exc!r}"))

    def _take_result(self, result_future, future, turn_id, handle, tool, timer) -> None:
        timer.cancel()
        with self._lock:
            handles = self._goals.get(turn_id)
            if handles is not None and handle in handles:
                handles.remove(handle)
                if not handles:  # the turn's last goal: no empty list left per turn (the soak)
                    del self._goals[turn_id]
        response = result_future.result()
        result = response.result
        if tool.binding.type == "play_animation":
            outcome = ToolResult(
                ok=bool(result.success),
                result={"played": result.success, "message": result.message},
                error="" if result.success else result.message or "animation failed",
            )
        else:
            try:
                payload = json.loads(result.result_json) if result.result_json else {}
            except json.JSONDecodeError:
                payload = {"raw": result.result_json}
            outcome = ToolResult(ok=bool(result.success), result=payload, error=result.error)
        _settle(future, outcome)

    def _on_timeout(self, future, sent, tool) -> None:
        _settle(  # first: the turn must get its result whatever the cancel below does
            future, ToolResult(ok=False, error=f"{tool.name}: timed out after {tool.timeout_s}s")
        )
        send_future = sent.get("future")
        try:
            if send_future is not None and send_future.done():
                handle = send_future.result()
                if handle is not None and handle.accepted:
                    self._submit(handle.cancel_goal_async)
        except Exception as exc:  # the goal was never sent: nothing to cancel
            log.info(f"{tool.name}: no goal to cancel after the timeout ({exc!r})")


def _settle(future: Future, result: ToolResult) -> None:
    if not future.done():
        with contextlib.suppress(InvalidStateError):  # settled concurrently (timeout vs result)
            future.set_result(result)

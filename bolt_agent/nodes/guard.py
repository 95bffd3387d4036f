"""The callback guard every bolt_agent node has: nothing raised in a callback ends the node.

rclpy's executor re-raises what a callback raises, which ends the process; one malformed message
must not. Every subscription, timer, service and action-server callback made through
``create_subscription``, ``create_timer``, ``create_service`` and ``create_action_server`` is
guarded: an exception is logged with its traceback once per (callback, exception type), counted
(``failures.callback``) and swallowed; a service answers an empty response, an action goal is
aborted with an empty result. A mixin (``CallbackGuardMixin``) so the node base stays about
parameters and health; it needs the base's ``record_failure`` and ``_health_lock``.

The same wrappers are the lifecycle gate: while ``_accepts_input()`` is false (a lifecycle node
that is not active) a subscription's message is ignored, a service answers ``success=false``
with the reason and an action goal is rejected, each counted per input (``ignored_inactive``
in ``/diagnostics``) and logged at most every few seconds. Inputs that carry state rather than
requests (the operator's mute and override switches) pass ``while_inactive=True``: a mute sent
while the node was inactive must hold when it activates.
"""

from __future__ import annotations

import functools
import inspect
import traceback
from collections.abc import Callable
from typing import Any

from rclpy.action import ActionServer
from rclpy.qos import QoSProfile, ReliabilityPolicy

#: action services keep this many requests: rclpy's default (10) silently drops the rest of a
#: burst (measured: 24 of 100 goals sent at once were answered), leaving clients waiting forever
ACTION_SERVICE_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)


class CallbackGuardMixin:
    """Guarded ``create_*`` overrides; put before ``Node`` in the bases (``super()`` is Node's).

    Failures go to ``record_failure("callback", ...)``, which the composing class provides."""

    def guarded(self: Any, callback: Callable[..., Any], what: str, fallback: Any = None) -> Any:
        """``callback`` that never raises: an exception is logged with its traceback the first
        time this (callback, exception type) pair fails, counted as ``callback`` failure every
        time, and ``fallback(*args)`` (or None) is returned instead. Coroutines stay coroutines
        (an async action execute callback)."""

        def failed(exc: BaseException, args: tuple) -> Any:
            self._callback_failed(what, exc)
            return fallback(*args) if fallback is not None else None

        if inspect.iscoroutinefunction(callback):

            @functools.wraps(callback)
            async def guarded_async(*args: Any) -> Any:
                try:
                    return await callback(*args)
                except Exception as exc:
                    return failed(exc, args)

            return guarded_async

        @functools.wraps(callback)
        def guarded_sync(*args: Any) -> Any:
            try:
                return callback(*args)
            except Exception as exc:
                return failed(exc, args)

        return guarded_sync

    def _accepts_input(self) -> bool:
        """Whether inputs are acted on now: always for a plain node; a lifecycle node says
        whether it is active."""
        return True

    def gated(self: Any, callback: Callable[..., Any], what: str, refused: Any = None) -> Any:
        """``callback`` run only while ``_accepts_input()``; otherwise the input is counted and
        ``refused(*args)`` (or None) is returned. Entities rclpy makes while building the node
        (the parameter services) are never gated: ``_gate_inputs`` is set after that."""
        if not self.__dict__.get("_gate_inputs"):
            return callback

        @functools.wraps(callback)
        def gate(*args: Any) -> Any:
            if self._accepts_input():
                return callback(*args)
            self._ignored_inactive(what)
            return refused(*args) if refused is not None else None

        return gate

    def _ignored_inactive(self: Any, what: str) -> None:
        with self._health_lock:
            self._inactive_inputs[what] = self._inactive_inputs.get(what, 0) + 1
        self.get_logger().warning(
            f"{what}: ignored, the node is not active", throttle_duration_sec=5.0
        )

    def ignored_inactive(self: Any) -> int:
        """Inputs ignored so far because the node was not active."""
        with self._health_lock:
            return sum(self._inactive_inputs.values())

    def _callback_failed(self: Any, what: str, exc: BaseException) -> None:
        key = (what, type(exc).__name__)
        message = f"{what} raised {exc!r} (dropped; the node goes on)"
        with self._health_lock:
            seen = getattr(self, "_callback_errors_seen", None)
            if seen is None:
                seen = self._callback_errors_seen = set()
            first = key not in seen
            seen.add(key)
        if first:
            trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            self.get_logger().error(f"{message}\n{trace}")
        self.record_failure("callback", message, log=False)

    def create_subscription(
        self: Any,
        msg_type: Any,
        topic: str,
        callback: Callable[..., Any],
        *args: Any,
        while_inactive: bool = False,
        **kw: Any,
    ) -> Any:
        """``Node.create_subscription`` with a guarded callback, ignored while the node is not
        active unless ``while_inactive`` (see the module docstring)."""
        what = f"subscription {topic}"
        if not while_inactive:
            callback = self.gated(callback, what)
        return super().create_subscription(
            msg_type, topic, self.guarded(callback, what), *args, **kw
        )

    def create_timer(self: Any, period: float, callback: Callable[..., Any], *a: Any, **kw: Any):
        """``Node.create_timer`` with a guarded callback."""
        name = getattr(callback, "__name__", "callback")
        return super().create_timer(period, self.guarded(callback, f"timer {name}"), *a, **kw)

    def create_service(
        self: Any, srv_type: Any, name: str, callback: Callable[..., Any], **kw: Any
    ) -> Any:
        """``Node.create_service`` with a guarded callback: a failure answers an empty
        response."""

        def fallback(request: Any, response: Any) -> Any:  # the untouched, empty response
            return response

        def inactive(request: Any, response: Any) -> Any:
            if hasattr(response, "success") and hasattr(response, "message"):
                response.success, response.message = False, "the node is not active"
            return response

        what = f"service {name}"
        callback = self.gated(callback, what, inactive)
        return super().create_service(srv_type, name, self.guarded(callback, what, fallback), **kw)

    def create_action_server(
        self: Any,
        action_type: Any,
        name: str,
        execute_callback: Callable[..., Any],
        **kw: Any,
    ) -> ActionServer:
        """An ``ActionServer`` whose callbacks are guarded: a failing execute aborts the goal
        with an empty result, a failing goal callback rejects the goal, a failing cancel
        callback refuses the cancel, a failing accepted callback aborts the goal. Its services
        queue ``ACTION_SERVICE_QOS.depth`` requests."""
        from rclpy.action import CancelResponse, GoalResponse

        def abort(goal_handle: Any) -> Any:
            try:
                if goal_handle.is_active:
                    goal_handle.abort()
            except Exception:  # already finished: nothing left to abort
                pass
            return action_type.Result()

        wrapped = {"execute_callback": self.guarded(execute_callback, f"action {name}", abort)}
        accept = kw.get("goal_callback") or (lambda *_: GoalResponse.ACCEPT)
        kw["goal_callback"] = self.gated(accept, f"action {name}", lambda *_: GoalResponse.REJECT)
        fallbacks = {
            "goal_callback": lambda *_: GoalResponse.REJECT,
            "cancel_callback": lambda *_: CancelResponse.REJECT,
            "handle_accepted_callback": abort,
        }
        for key, fallback in fallbacks.items():
            if kw.get(key) is not None:
                wrapped[key] = self.guarded(kw.pop(key), f"action {name} {key}", fallback)
        for key in ("goal", "result", "cancel"):  # a burst of goals is queued, not dropped
            kw.setdefault(f"{key}_service_qos_profile", ACTION_SERVICE_QOS)
        return ActionServer(self, action_type, name, **wrapped, **kw)

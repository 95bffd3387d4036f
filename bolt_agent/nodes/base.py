"""What every bolt_agent node shares: parameters declared once, status, device retry, shutdown.

Parameters are the fields of one frozen dataclass per node (``param(default, description,
...)`` from ``bolt_agent/nodes/params.py``): the node declares each with a
``ParameterDescriptor`` (description, range, allowed values, and whether it applies only at
configure), validates them at configure time (YAML and launch
overrides never pass through the set-parameters callback) and on every ``ros2 param set``, and
exposes them as ``self.params``, replaced as a whole when a runtime parameter changes. A
load-time parameter (a model path, a thread count) is refused while the node is configured, with
the reason, instead of being accepted and silently ignored.

Health: every node publishes one ``diagnostic_msgs/DiagnosticStatus`` (name = its fully qualified
name) in a ``DiagnosticArray`` on ``/diagnostics`` every ``diagnostics_period_s`` and at once when
its ``status()`` changes. The level comes from the lifecycle state (not active: WARN; configure
failed: ERROR), else from the last ``status()``, raised to WARN for a background failure in the
last ``RECENT_FAILURE_S``; the values are the node's ``diagnostic_values()`` (model, device, queue
depth) plus ``last_error`` and the failure counters kept by ``record_failure``.

Callbacks: every subscription, timer, service and action-server callback made through the base
is guarded (``bolt_agent/nodes/guard.py``, ``CallbackGuardMixin``): what it raises is logged,
counted (``failures.callback``) and swallowed instead of ending the process.

Lifecycle nodes: ``bolt_agent/nodes/lifecycle.py`` (``BoltLifecycleNode``).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import FloatingPointRange, ParameterDescriptor, SetParametersResult
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.parameter import Parameter

from bolt_agent.nodes import qos
from bolt_agent.nodes.guard import CallbackGuardMixin
from bolt_agent.nodes.params import (
    build_params,
    check_value,
    descriptor,
    normalized,
    parameter_fields,
)

#: a background failure this recent turns an OK node's diagnostics WARN
RECENT_FAILURE_S = 30.0
_LEVELS = {
    "OK": DiagnosticStatus.OK,
    "WARN": DiagnosticStatus.WARN,
    "WARNING": DiagnosticStatus.WARN,
    "ERROR": DiagnosticStatus.ERROR,
    "STALE": DiagnosticStatus.STALE,
}


class _BoltNodeMixin(CallbackGuardMixin):
    """Parameter declaration/validation, ``status()`` and ``/diagnostics`` shared by
    all nodes."""

    Params: ClassVar[type]
    params: Any
    #: a node that loads at construction cannot apply a load-time change: ROS refuses it
    _load_time_read_only: ClassVar[bool] = False

    def _init_bolt(self: Any) -> None:
        self._widen_integer_overrides()
        for f in parameter_fields(self.Params):
            # a word list is a tuple in the frozen parameters, a string array (a list) in ROS
            default = list(f.default) if isinstance(f.default, tuple) else f.default
            self.declare_parameter(f.name, default, descriptor(f, self._load_time_read_only))
        self.params = build_params(self.Params, self._raw_params())
        self._status_level, self._status_message = "", ""
        self._status_extra: dict[str, str] = {}
        self._health_lock = threading.Lock()
        self._failures: dict[str, int] = {}
        self._inactive_inputs: dict[str, int] = {}  # input → times ignored while inactive
        self._errors = 0  # errors recorded so far (status ERROR or record_failure)
        self._last_error, self._last_failure_t = "", -math.inf
        period = self.declare_parameter(
            "diagnostics_period_s",
            1.0,
            ParameterDescriptor(
                description="period in s of this node's DiagnosticArray on /diagnostics (also "
                "published at once when its status changes); read at start",
                read_only=True,
                floating_point_range=[
                    FloatingPointRange(from_value=0.01, to_value=3600.0, step=0.0)
                ],
            ),
        ).value
        # health is reported in every lifecycle state: a plain publisher, never gated
        self._diag_pub = Node.create_publisher(
            self, DiagnosticArray, "/diagnostics", qos.DIAGNOSTICS
        )
        self._diag_timer = self.create_timer(
            period, self.publish_diagnostics, callback_group=MutuallyExclusiveCallbackGroup()
        )
        self.add_on_set_parameters_callback(self._on_set_parameters)

    def _widen_integer_overrides(self: Any) -> None:
        """A whole number given for a double parameter (``-p threshold:=0``, ``threshold: 0`` in
        a YAML file, ``--set node.threshold=0``) becomes that double. rclpy would refuse the
        integer at declaration and end the node over a missing ``.0``; the start-up overrides
        are rclpy's own table (``Node._parameter_overrides``, Humble to Kilted), read before
        any parameter is declared. Later ``set_parameters`` calls keep ROS's strict typing."""
        overrides = getattr(self, "_parameter_overrides", None)
        if not isinstance(overrides, dict):
            return
        for f in parameter_fields(self.Params):
            given = overrides.get(f.name)
            if (
                isinstance(f.default, float)
                and isinstance(given, Parameter)
                and given.type_ == Parameter.Type.INTEGER
            ):
                overrides[f.name] = Parameter(f.name, Parameter.Type.DOUBLE, float(given.value))

    def _raw_params(self: Any) -> dict[str, Any]:
        return {
            f.name: normalized(f, self.get_parameter(f.name).value)
            for f in parameter_fields(self.Params)
        }

    def _configured(self) -> bool:
        return False  # plain nodes load at construction: every parameter is a runtime one

    def _on_set_parameters(self: Any, changes: list[Parameter]) -> SetParametersResult:
        fields = {f.name: f for f in parameter_fields(self.Params)}
        values = self._raw_params()
        for change in changes:
            f = fields.get(change.name)
            if f is None:
                continue
            if f.metadata["load_time"] and self._configured():
                why = (
                    f"{change.name} is a load-time parameter: it applies at configure; "
                    "deactivate and clean up the node, set it, then configure again"
                )
                return SetParametersResult(successful=False, reason=why)
            value = normalized(f, change.value)
            why = check_value(f, value)
            if why is not None:
                return SetParametersResult(successful=False, reason=why)
            values[change.name] = value
        self.params = self.Params(**values)
        return SetParametersResult(successful=True)

    # --- status ------------------------------------------------------------------------------
    def status(self: Any, level: str, message: str, **extra: Any) -> None:
        """Set the node's state, reported on ``/diagnostics`` (at once when the level or message
        changed). ``level``: OK, WARN or ERROR (an ERROR's message becomes the ``last_error``).
        ``extra`` (a dict value is flattened, ``stop={"reason": …}`` → ``stop.reason``) joins
        the report's values until a later status reports the same key."""
        flat: dict[str, str] = {}
        for key, value in extra.items():
            items = value.items() if isinstance(value, dict) else [("", value)]
            for sub, v in items:
                flat[f"{key}.{sub}" if sub else key] = _text(v)
        with self._health_lock:
            for key in extra:  # a new report of ``key`` replaces all of the old one
                for old in [k for k in self._status_extra if k == key or k.startswith(key + ".")]:
                    del self._status_extra[old]
            self._status_extra.update(flat)
            changed = (level, message) != (self._status_level, self._status_message)
            self._status_level, self._status_message = level, message
            if level == "ERROR":
                self._last_error = message
                self._errors += 1
        if changed:
            self.publish_diagnostics()

    def record_failure(self: Any, kind: str, message: str, log: bool = True) -> None:
        """Count a failure of ``kind`` (a background job that failed, data that was dropped) and
        keep ``message`` as the last error; logged as an error unless ``log`` is False (the
        caller logged it, e.g. throttled). Any thread."""
        if log:
            self.get_logger().error(message)
        with self._health_lock:
            self._failures[kind] = self._failures.get(kind, 0) + 1
            self._last_error, self._last_failure_t = message, time.monotonic()
            self._errors += 1

    def failures(self: Any, kind: str) -> int:
        with self._health_lock:
            return self._failures.get(kind, 0)

    # --- diagnostics -------------------------------------------------------------------------
    def diagnostic_values(self) -> dict[str, Any]:
        """What matters about this node, for ``/diagnostics`` (e.g. ``model``, ``device``,
        ``queue_depth``); values are sent as text. Runs on the diagnostics timer or the thread
        that called ``status()``: read state only, never block."""
        return {}

    def _diagnostic_level(self: Any) -> tuple[str, str]:
        """(level, message) from the last status() and recent failures."""
        with self._health_lock:
            level = self._status_level or "OK"
            message = self._status_message or "running"
            recent = time.monotonic() - self._last_failure_t < RECENT_FAILURE_S
            last_error = self._last_error
        if level == "OK" and recent:
            return "WARN", f"{message}; recent failure: {last_error}"
        return level, message

    def diagnostic_status(self: Any) -> DiagnosticStatus:
        """This node's DiagnosticStatus now."""
        try:
            values = {str(k): _text(v) for k, v in self.diagnostic_values().items()}
        except Exception as exc:  # a broken hook must not hide the rest of the report
            values = {"diagnostic_values_error": repr(exc)}
        level, message = self._diagnostic_level()
        with self._health_lock:
            values.update(self._status_extra)
            values["last_error"] = self._last_error
            values["failures"] = str(sum(self._failures.values()))
            for kind, n in sorted(self._failures.items()):
                values[f"failures.{kind}"] = str(n)
        return DiagnosticStatus(
            level=_LEVELS.get(level.upper(), DiagnosticStatus.ERROR),
            name=self.get_fully_qualified_name(),
            message=message,
            hardware_id=values.get("device", ""),
            values=[KeyValue(key=k, value=v) for k, v in values.items()],
        )

    def publish_diagnostics(self: Any) -> None:
        """Publish the DiagnosticArray now (the timer's callback; status() calls it too)."""
        msg = DiagnosticArray(status=[self.diagnostic_status()])
        msg.header.stamp = self.get_clock().now().to_msg()
        try:
            self._diag_pub.publish(msg)
        except Exception:  # the context is going down (Ctrl-C): nothing left to report to
            if self.context.ok():
                raise

    def wait_ready(self, timeout: float) -> bool:
        """Block up to ``timeout`` s until the node's start-up work that runs after activation
        is done (llm_node's prefill of the system prompt); True when it is. A node without such
        work is ready once active."""
        return True

    def retry_until(self: Any, attempt: Callable[[], bool], period_s: float) -> None:
        """Call ``attempt`` now and then every ``period_s`` until it returns True (a device that
        is missing or busy at start-up); ``cancel_retry`` stops it."""
        self.cancel_retry()
        if attempt():
            return

        def again() -> None:
            if attempt():
                self.cancel_retry()

        self._retry_timer = self.create_timer(period_s, again)

    def cancel_retry(self: Any) -> None:
        timer = getattr(self, "_retry_timer", None)
        if timer is not None:
            self.destroy_timer(timer)
            self._retry_timer = None


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


class BoltNode(_BoltNodeMixin, Node):
    """A plain node that loads at construction (animation, game state): its load-time
    parameters are read-only."""

    _load_time_read_only = True

    def __init__(self, node_name: str, **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self._init_bolt()

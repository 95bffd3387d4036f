"""What every bolt_agent node shares: parameters declared once, status, device retry, shutdown.

Parameters are the fields of one frozen dataclass per node (``param(default, description, ...)``):
the node declares each with a ``ParameterDescriptor`` (description, range, allowed values, and
whether it applies only at configure), validates them at configure time (YAML and launch
overrides never pass through the set-parameters callback) and on every ``ros2 param set``, and
exposes them as ``self.params``, replaced as a whole when a runtime parameter changes. A
load-time parameter (a model path, a thread count) is refused while the node is configured, with
the reason, instead of being accepted and silently ignored.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, TypeVar

from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    SetParametersResult,
)
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.node import Node
from rclpy.parameter import Parameter
from std_msgs.msg import String

from bolt_agent.nodes import qos

P = TypeVar("P")

_LOAD_TIME = "[load-time: applied at configure] "
_INT64 = 2**63 - 1


def param(
    default: Any,
    description: str,
    *,
    load_time: bool = False,
    choices: Iterable[str] | None = None,
    low: float | None = None,
    high: float | None = None,
    dynamic_typing: bool = False,
    normalize: Callable[[Any], Any] | None = None,
) -> Any:
    """A parameter field: its default, what it means, and what values it accepts.

    ``normalize`` maps a raw value before validation (e.g. YAML's bare ``off`` read as false)."""
    meta = {
        "description": description,
        "load_time": load_time,
        "choices": tuple(choices) if choices is not None else None,
        "range": (low, high) if low is not None or high is not None else None,
        "dynamic_typing": dynamic_typing,
        "normalize": normalize,
    }
    return dataclasses.field(default=default, metadata=meta)


class ParamError(ValueError):
    """A parameter value the node cannot run with."""


def parameter_fields(params_cls: type) -> tuple[dataclasses.Field, ...]:
    return dataclasses.fields(params_cls)


def descriptor(f: dataclasses.Field) -> ParameterDescriptor:
    meta = f.metadata
    text = (_LOAD_TIME if meta["load_time"] else "") + meta["description"]
    d = ParameterDescriptor(description=text, dynamic_typing=meta["dynamic_typing"])
    if meta["choices"]:
        d.additional_constraints = "one of: " + ", ".join(meta["choices"])
    if meta["range"] is not None:
        low, high = meta["range"]
        if isinstance(f.default, bool):
            pass
        elif isinstance(f.default, int):
            lo, hi = -_INT64 if low is None else int(low), _INT64 if high is None else int(high)
            d.integer_range = [IntegerRange(from_value=lo, to_value=hi, step=0)]
        elif isinstance(f.default, float):
            lo = -math.inf if low is None else float(low)
            hi = math.inf if high is None else float(high)
            d.floating_point_range = [FloatingPointRange(from_value=lo, to_value=hi, step=0.0)]
    return d


def normalized(f: dataclasses.Field, value: Any) -> Any:
    fn = f.metadata["normalize"]
    return fn(value) if fn is not None else value


def check_value(f: dataclasses.Field, value: Any) -> str | None:
    """Why ``value`` is not acceptable for parameter ``f``, or None."""
    meta = f.metadata
    if meta["choices"] and value not in meta["choices"]:
        return f"{f.name} must be one of {list(meta['choices'])}, not {value!r}"
    if meta["range"] is not None and isinstance(value, (int, float)):
        low, high = meta["range"]
        if (low is not None and value < low) or (high is not None and value > high):
            return f"{f.name} must be within [{low}, {high}], not {value!r}"
    return None


def build_params(params_cls: type[P], values: dict[str, Any]) -> P:
    """The frozen parameter object from raw values; ParamError names every bad one."""
    errors = [
        why
        for f in parameter_fields(params_cls)
        if f.name in values and (why := check_value(f, values[f.name])) is not None
    ]
    if errors:
        raise ParamError("; ".join(errors))
    return params_cls(**{f.name: values[f.name] for f in parameter_fields(params_cls)})


class _BoltNodeMixin:
    """Parameter declaration/validation and the latched ``~/status`` shared by all nodes."""

    Params: ClassVar[type]
    params: Any

    def _init_bolt(self: Any) -> None:
        for f in parameter_fields(self.Params):
            self.declare_parameter(f.name, f.default, descriptor(f))
        self.params = build_params(self.Params, self._raw_params())
        self._status_pub = None
        self.add_on_set_parameters_callback(self._on_set_parameters)

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
        """Publish the node's state (JSON on latched ``~/status``) and log errors."""
        if self._status_pub is None:
            self._status_pub = self.create_publisher(String, "~/status", qos.LATCHED)
        data = {"node": self.get_name(), "level": level, "message": message, **extra}
        self._status_pub.publish(String(data=json.dumps(data, default=str)))

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


class BoltNode(_BoltNodeMixin, Node):
    """A plain node that loads at construction (animation, game state)."""

    def __init__(self, node_name: str, **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self._init_bolt()


class BoltLifecycleNode(_BoltNodeMixin, LifecycleNode):
    """A lifecycle node: ``autostart`` (configure + activate when run alone), parameters
    re-read and validated at configure, shutdown deactivates an active node first."""

    def __init__(self, node_name: str, **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self.declare_parameter(
            "autostart",
            True,
            ParameterDescriptor(description="configure and activate on start (no manager)"),
        )
        self._init_bolt()
        self._active = False
        self._is_configured = False

    def _configured(self) -> bool:
        return self._is_configured

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            self.params = build_params(self.Params, self._raw_params())
        except ParamError as exc:
            self.get_logger().error(f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        result = self.configure()
        self._is_configured = result == TransitionCallbackReturn.SUCCESS
        return result

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._active = True  # before the node's threads start: they run while it is set
        result = self.activate()
        if result != TransitionCallbackReturn.SUCCESS:
            self._active = False
            return result
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._active = False
        self.cancel_retry()
        self.deactivate()
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.cleanup()
        self._is_configured = False
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        if self._active:
            self.on_deactivate(state)
        return TransitionCallbackReturn.SUCCESS

    # --- what a node implements --------------------------------------------------------------
    def configure(self) -> TransitionCallbackReturn:
        """Load models, create publishers/subscriptions (``self.params`` is fresh)."""
        return TransitionCallbackReturn.SUCCESS

    def activate(self) -> TransitionCallbackReturn:
        """Start threads and devices."""
        return TransitionCallbackReturn.SUCCESS

    def deactivate(self) -> None:
        """Stop threads and devices (``self._active`` is already False)."""

    def cleanup(self) -> None:
        """Destroy what configure created, free models."""

"""Parameters declared once: ``param`` makes a dataclass field that carries its description
and the values it accepts; ``descriptor`` turns it into the ROS ``ParameterDescriptor`` the node
declares, and ``build_params`` validates raw values into the frozen parameter object. The node
base (``nodes/base.py``) applies them at configure and on every ``ros2 param set``."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor

P = TypeVar("P")

_LOAD_TIME = "[load-time: applied at configure] "
_AT_START = "[read at start: read-only] "
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


def descriptor(f: dataclasses.Field, read_only: bool = False) -> ParameterDescriptor:
    """The ROS descriptor of parameter ``f``; ``read_only`` for a load-time parameter of a node
    that loads at construction (no configure to apply a change at)."""
    meta = f.metadata
    if read_only and meta["load_time"]:
        text = _AT_START + meta["description"]
    else:
        text = (_LOAD_TIME if meta["load_time"] else "") + meta["description"]
    d = ParameterDescriptor(
        description=text,
        dynamic_typing=meta["dynamic_typing"],
        read_only=read_only and meta["load_time"],
    )
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
    """``value`` as the field holds it: through its ``normalize``, and an array (rclpy gives
    a list) as a tuple where the default is one, so the frozen parameters stay hashable."""
    fn = f.metadata["normalize"]
    if fn is not None:
        value = fn(value)
    if isinstance(f.default, tuple) and isinstance(value, list):
        return tuple(value)
    return value


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

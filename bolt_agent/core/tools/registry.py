"""Tools the LLM may call: loaded from a profile's YAML, validated with jsonschema.

A tool has a name, a description, JSON-schema parameters, a binding (which action carries it out,
and how arguments map onto the goal), a timeout and a rate limit. The registry is the allowlist:
the output parser asks it to validate every call before anything is dispatched.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from bolt_agent.core.paths import config_dir

BINDING_TYPES = ("play_animation", "execute_tool")


class ToolConfigError(ValueError):
    """A tool definition in the YAML is invalid."""


@dataclass(frozen=True)
class Binding:
    """How a call becomes an action goal.

    ``play_animation``: PlayAnimation on ``action``; ``goal`` maps goal fields to argument names
    (``{name: animation_name, speed: speed}``); ``value_maps`` turn argument values into goal
    values (``{speed: {slow: 0.5, normal: 1.0, fast: 1.6}}``); ``defaults`` fill missing fields.
    ``execute_tool``: ExecuteTool on ``action`` with the tool name and the arguments as JSON.
    """

    type: str
    action: str
    goal: dict[str, str] = field(default_factory=dict)
    value_maps: dict[str, dict[str, Any]] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    motion: bool = False  # held while teleop override is on

    def goal_fields(self, arguments: dict[str, Any]) -> dict[str, Any]:
        out = dict(self.defaults)
        for goal_field, arg_name in self.goal.items():
            if arg_name in arguments:
                value = arguments[arg_name]
                out[goal_field] = self.value_maps.get(goal_field, {}).get(value, value)
        return out


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    binding: Binding
    timeout_s: float = 10.0
    rate_limit_per_min: int = 0  # 0: unlimited
    #: after a successful call: speak (the model says something about the result) | end (the
    #: turn ends: an animation's result has nothing to tell, and a line made up after it was
    #: the same every time)
    after_result: str = "speak"
    #: arguments copied from the request when it names exactly one admissible value (a catalog
    #: item by its words, an integer in digits or words) instead of decoded: ``request_values``
    from_request: tuple[str, ...] = ()

    def as_openai(self) -> dict[str, Any]:
        """The ``{"type": "function", "function": {...}}`` form chat templates expect."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


class ToolRegistry:
    """The allowlist of callable tools with argument validation and rate limiting."""

    def __init__(self, tools: Iterable[Tool] = ()):
        self._tools: dict[str, Tool] = {}
        self._validators: dict[str, jsonschema.protocols.Validator] = {}
        self._calls: dict[str, deque[float]] = {}
        self._lock = threading.Lock()
        for tool in tools:
            self.add(tool)

    @classmethod
    def from_config(cls, entries: list[dict[str, Any]] | None) -> ToolRegistry:
        return cls(tool_from_config(e) for e in entries or [])

    def add(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ToolConfigError(f"duplicate tool {tool.name!r}")
        validator_cls = jsonschema.validators.validator_for(tool.parameters)
        try:
            validator_cls.check_schema(tool.parameters)
        except jsonschema.SchemaError as exc:
            raise ToolConfigError(
                f"tool {tool.name!r}: invalid parameters schema: {exc.message}"
            ) from exc
        self._tools[tool.name] = tool
        self._validators[tool.name] = validator_cls(tool.parameters)
        self._calls[tool.name] = deque()

    def __contains__(self, name: str) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self):
        return iter(self._tools.values())

    def get(self, name: str) -> Tool:
        return self._tools[name]

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def validate(self, name: str, arguments: dict[str, Any]) -> str | None:
        """None when the call is allowed, else a message the model can read as the tool result."""
        if name not in self._tools:
            allowed = ", ".join(self._tools) or "none"
            return f"unknown tool {name!r} (available: {allowed})"
        errors = sorted(self._validators[name].iter_errors(arguments), key=lambda e: list(e.path))
        if errors:
            where = "/".join(str(p) for p in errors[0].path) or "arguments"
            return f"invalid arguments for {name!r}: {where}: {errors[0].message}"
        return None

    def admit(self, name: str, now: float | None = None) -> str | None:
        """Rate limit: record a call and return None, or return why it is refused."""
        tool = self._tools[name]
        if tool.rate_limit_per_min <= 0:
            return None
        now = time.monotonic() if now is None else now
        with self._lock:
            calls = self._calls[name]
            while calls and now - calls[0] > 60.0:
                calls.popleft()
            if len(calls) >= tool.rate_limit_per_min:
                return f"rate limit: {name!r} allows {tool.rate_limit_per_min} calls per minute"
            calls.append(now)
        return None

    def as_openai(self) -> list[dict[str, Any]]:
        return [t.as_openai() for t in self._tools.values()]


AFTER_RESULT = ("speak", "end")


def string_enum(schema: dict[str, Any]) -> list[str] | None:
    """The values of an argument that is a string enum (a catalog, an animation), else None."""
    enum = schema.get("enum")
    return enum if enum and all(isinstance(v, str) for v in enum) else None


def tool_from_config(entry: dict[str, Any]) -> Tool:
    try:
        name = entry["name"]
        binding_cfg = dict(entry["binding"])
    except (KeyError, TypeError) as exc:
        raise ToolConfigError(f"tool entry needs 'name' and 'binding': {entry!r}") from exc
    btype = binding_cfg.pop("type", None)
    if btype not in BINDING_TYPES:
        raise ToolConfigError(f"tool {name!r}: binding type must be one of {BINDING_TYPES}")
    if "action" not in binding_cfg:
        raise ToolConfigError(f"tool {name!r}: binding needs an 'action' name")
    try:
        binding = Binding(type=btype, **binding_cfg)
    except TypeError as exc:
        raise ToolConfigError(f"tool {name!r}: {exc}") from exc
    params = entry.get("parameters") or {"type": "object", "properties": {}}
    try:
        params = resolve_enum_from(params)
    except (OSError, KeyError, TypeError, ValueError, yaml.YAMLError) as exc:
        raise ToolConfigError(f"tool {name!r}: enum_from: {exc}") from exc
    params.setdefault("additionalProperties", False)
    after_result = str(entry.get("after_result", "speak"))
    if after_result not in AFTER_RESULT:
        raise ToolConfigError(f"tool {name!r}: after_result must be one of {AFTER_RESULT}")
    from_request = tuple(str(a) for a in entry.get("from_request") or [])
    props = params.get("properties") or {}
    for arg in from_request:
        prop = props.get(arg)
        if not isinstance(prop, dict):
            raise ToolConfigError(
                f"tool {name!r}: from_request names {arg!r}, not an argument with a schema"
            )
        if string_enum(prop) is None and prop.get("type") != "integer":
            raise ToolConfigError(
                f"tool {name!r}: from_request argument {arg!r} must be a string enum or an integer"
            )
    return Tool(
        name=name,
        description=str(entry.get("description", "")).strip(),
        parameters=params,
        binding=binding,
        timeout_s=float(entry.get("timeout_s", 10.0)),
        rate_limit_per_min=int(entry.get("rate_limit_per_min", 0)),
        after_result=after_result,
        from_request=from_request,
    )


def resolve_enum_from(schema: Any, base: Path | None = None) -> Any:
    """Replace ``enum_from: {file, items, key}`` with ``enum``: the values of ``key`` in the list
    at dotted path ``items`` of a YAML file (relative to ``config/``). One source of truth: the
    shop's catalog stays in game_state.yaml and the grammar admits only its full item names, so
    a small model cannot shorten "war hammer" to "war"."""
    if isinstance(schema, list):
        return [resolve_enum_from(s, base) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: resolve_enum_from(v, base) for k, v in schema.items() if k != "enum_from"}
    source = schema.get("enum_from")
    if source is not None:
        path = Path(source["file"])
        path = path if path.is_absolute() else (base or config_dir()) / path
        node: Any = yaml.safe_load(path.read_text())
        for part in str(source["items"]).split("."):
            node = node[part]
        values = [item[source["key"]] if "key" in source else item for item in node]
        if not values:
            raise ValueError(f"{path.name}:{source['items']} is empty")
        out["enum"] = list(dict.fromkeys(values))
    return out

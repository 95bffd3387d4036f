"""Gemma 4's tool-call value syntax, both ways.

Calls look like ``call:NAME{key:value,...}``; strings are wrapped in the ``<|"|>`` token, keys are
bare, numbers/``true``/``false``/``null`` bare, arrays ``[...]`` and objects ``{k:v}`` nested.
The bundled template formats with these functions and the output parser reads with them, so the
two cannot drift apart.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

QUOTE = '<|"|>'
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_\-.]*")


class Gemma4SyntaxError(ValueError):
    """Text that is not a well-formed Gemma 4 call or value."""


def format_value(value: Any, quote_keys: bool = False) -> str:
    """Render a JSON-like value in Gemma 4 syntax."""
    if isinstance(value, str):
        return QUOTE + value + QUOTE
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise Gemma4SyntaxError(f"non-finite number {value!r}")
        return json.dumps(value)
    if isinstance(value, dict):
        items = sorted(value.items())
        keys = [QUOTE + k + QUOTE if quote_keys else k for k, _ in items]
        return (
            "{"
            + ",".join(f"{k}:{format_value(v, quote_keys)}" for k, (_, v) in zip(keys, items))
            + "}"
        )
    if isinstance(value, list | tuple):
        return "[" + ",".join(format_value(v, quote_keys) for v in value) + "]"
    raise Gemma4SyntaxError(f"cannot format {type(value).__name__}")


def format_call(name: str, arguments: dict[str, Any]) -> str:
    """``call:NAME{...}`` (without the surrounding ``<|tool_call>`` tokens)."""
    return "call:" + name + format_value(dict(arguments))


def format_response(name: str, response: Any) -> str:
    """``response:NAME{...}`` (without the surrounding ``<|tool_response>`` tokens)."""
    if not isinstance(response, dict):
        response = {"value": response}
    return "response:" + name + format_value(response)


def format_declaration(tool: dict[str, Any]) -> str:
    """``declaration:NAME{description:...,parameters:{...}}`` for an OpenAI-style tool dict."""
    fn = tool.get("function", tool)
    body: dict[str, Any] = {"description": fn.get("description", "")}
    params = fn.get("parameters")
    if params:
        body["parameters"] = _upper_types(params)
    return "declaration:" + fn["name"] + format_value(body)


def _upper_types(schema: Any) -> Any:
    """Gemma 4 declarations spell JSON-schema types in upper case (STRING, OBJECT, ...)."""
    if isinstance(schema, dict):
        return {
            k: (v.upper() if k == "type" and isinstance(v, str) else _upper_types(v))
            for k, v in schema.items()
        }
    if isinstance(schema, list):
        return [_upper_types(v) for v in schema]
    return schema


def parse_call(text: str) -> tuple[str, dict[str, Any]]:
    """Parse ``call:NAME{...}`` into (name, arguments)."""
    text = text.strip()
    if not text.startswith("call:"):
        raise Gemma4SyntaxError("expected 'call:'")
    brace = text.find("{")
    if brace < 0:
        raise Gemma4SyntaxError("missing '{' after the function name")
    name = text[5:brace].strip()
    if not _KEY.fullmatch(name):
        raise Gemma4SyntaxError(f"invalid function name {name!r}")
    value, end = _Reader(text).value_at(brace)
    if text[end:].strip():
        raise Gemma4SyntaxError(f"trailing text {text[end:][:20]!r}")
    assert isinstance(value, dict)
    return name, value


def parse_value(text: str) -> Any:
    value, end = _Reader(text).value_at(0)
    if text[end:].strip():
        raise Gemma4SyntaxError(f"trailing text {text[end:][:20]!r}")
    return value


class _Reader:
    def __init__(self, text: str):
        self.text = text

    def _skip(self, i: int) -> int:
        while i < len(self.text) and self.text[i] in " \t\r\n":
            i += 1
        return i

    def value_at(self, i: int, depth: int = 0) -> tuple[Any, int]:
        if depth > 32:
            raise Gemma4SyntaxError("nesting too deep")
        t = self.text
        i = self._skip(i)
        if i >= len(t):
            raise Gemma4SyntaxError("unexpected end")
        if t.startswith(QUOTE, i):
            end = t.find(QUOTE, i + len(QUOTE))
            if end < 0:
                raise Gemma4SyntaxError("unterminated string")
            return t[i + len(QUOTE) : end], end + len(QUOTE)
        c = t[i]
        if c == "{":
            return self._object(i, depth)
        if c == "[":
            return self._array(i, depth)
        for word, val in (("true", True), ("false", False), ("null", None)):
            if t.startswith(word, i):
                return val, i + len(word)
        m = _NUMBER.match(t, i)
        if m:
            num = float(m.group()) if any(ch in m.group() for ch in ".eE") else int(m.group())
            return num, m.end()
        raise Gemma4SyntaxError(f"unexpected {t[i : i + 10]!r}")

    def _object(self, i: int, depth: int) -> tuple[dict[str, Any], int]:
        t, out = self.text, {}
        i = self._skip(i + 1)
        if i < len(t) and t[i] == "}":
            return out, i + 1
        while True:
            i = self._skip(i)
            if t.startswith(QUOTE, i):
                key, i = self.value_at(i, depth + 1)
            else:
                m = _KEY.match(t, i)
                if not m:
                    raise Gemma4SyntaxError(f"expected a key at {t[i : i + 10]!r}")
                key, i = m.group(), m.end()
            i = self._skip(i)
            if i >= len(t) or t[i] != ":":
                raise Gemma4SyntaxError(f"expected ':' after key {key!r}")
            out[key], i = self.value_at(i + 1, depth + 1)
            i = self._skip(i)
            if i < len(t) and t[i] == ",":
                i += 1
                continue
            if i < len(t) and t[i] == "}":
                return out, i + 1
            raise Gemma4SyntaxError("expected ',' or '}'")

    def _array(self, i: int, depth: int) -> tuple[list[Any], int]:
        t, out = self.text, []
        i = self._skip(i + 1)
        if i < len(t) and t[i] == "]":
            return out, i + 1
        while True:
            item, i = self.value_at(i, depth + 1)
            out.append(item)
            i = self._skip(i)
            if i < len(t) and t[i] == ",":
                i += 1
                continue
            if i < len(t) and t[i] == "]":
                return out, i + 1
            raise Gemma4SyntaxError("expected ',' or ']'")

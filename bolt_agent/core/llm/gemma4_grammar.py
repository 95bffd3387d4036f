"""GBNF for constrained calls in Gemma 4 syntax: ``<|tool_call>call:NAME{k:v,...}<tool_call|>``.

The bundled template renders history and few-shot examples in this syntax; a base model copies
a pattern far better when the grammar asks for the same text it was shown. Arguments are flat
objects (the profiles' tools): string (enum or free), bounded integer, number, boolean; keys
sorted as ``gemma4_syntax.format_value`` writes them. Anything else raises ``ValueError``.
"""

from __future__ import annotations

import json
from typing import Any

from bolt_agent.core.tools.registry import ToolRegistry

Q = '"<|\\"|>"'  # the Gemma 4 string delimiter token, as a GBNF literal
#: free strings: no marker start or delimiter inside, no leading space, bounded: a call ends
FREE_STRING = f"{Q} [^<|{{}}\\n ] [^<|{{}}\\n]{{0,47}} {Q}"


def _lit(text: str) -> str:
    return json.dumps(text)


def _value(schema: dict[str, Any], where: str) -> str:
    if "enum" in schema or "const" in schema:
        values = schema.get("enum", [schema.get("const")])
        alts = []
        for v in values:
            if isinstance(v, str):
                alts.append(f"{Q} {_lit(v)} {Q}")
            elif isinstance(v, bool):
                alts.append(_lit("true" if v else "false"))
            elif isinstance(v, int | float):
                alts.append(_lit(json.dumps(v)))
            else:
                raise ValueError(f"{where}: enum value {v!r} is not a string, number or boolean")
        return "(" + " | ".join(alts) + ")"
    kind = schema.get("type")
    if kind == "string":
        return FREE_STRING
    if kind == "boolean":
        return '("true" | "false")'
    if kind == "integer":
        lo, hi = schema.get("minimum"), schema.get("maximum")
        if lo is not None and hi is not None and 0 <= hi - lo < 64:
            return "(" + " | ".join(_lit(str(i)) for i in range(int(lo), int(hi) + 1)) + ")"
        digits = len(str(abs(int(hi)))) if hi is not None else 12
        sign = '"-"? ' if lo is None or lo < 0 else ""
        return f'({sign}("0" | [1-9] [0-9]{{0,{max(digits - 1, 0)}}}))'
    if kind == "number":
        return '("-"? [0-9]{1,9} ("." [0-9]{1,6})?)'
    raise ValueError(f"{where}: type {kind!r} has no Gemma 4 grammar (flat arguments only)")


def _object(schema: dict[str, Any], where: str) -> str:
    props: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    items = [
        (k, f"{_lit(k + ':')} {_value(props[k], f'{where}.{k}')}", k in required)
        for k in sorted(props)
    ]

    def seq(i: int, started: bool) -> str:
        if i == len(items):
            return ""
        _, kv, req = items[i]
        rest_started = seq(i + 1, True)
        if started:
            part = f'"," {kv}' if req else f'("," {kv})?'
            return f"{part} {rest_started}".strip()
        if req:
            return f"{kv} {rest_started}".strip()
        rest_fresh = seq(i + 1, False)
        with_it = f"{kv} {rest_started}".strip()
        return f"({with_it} | {rest_fresh})" if rest_fresh else f"({with_it})?"

    return f'"{{" {seq(0, False)} "}}"'


def build(registry: ToolRegistry, only: str | None, low: int, max_calls: int, speech: str) -> str:
    """``root ::= speech calls end``: `low`..`max_calls` calls, then the marker that ends the
    step in the template (``<|tool_response>`` after calls, ``<turn|>`` after words)."""
    calls = []
    for tool in registry:
        if only is None or tool.name == only:
            body = _object(tool.parameters, tool.name)
            calls.append(f'"call:" {_lit(tool.name)} {body}')
    if not calls:
        raise ValueError(f"no tool named {only!r}" if only else "the registry has no tools")
    one = '"<|tool_call>" call "<tool_call|>"'
    with_calls = f'({one}){{1,{max(max_calls, 1)}}} "<|tool_response>"?'
    tail = with_calls if low else f'({with_calls} | "<turn|>")?'
    return f"root ::= speech {tail}\n" + speech + "call ::= " + " | ".join(calls) + "\n"

"""GBNF grammar for the constrained mode: speech first, then zero or more allowlisted tool calls.

Output shape (``call_format="json"``): ``<speech><tool_call>{"name": ..., "arguments": {...}}
</tool_call>...``; (``"gemma4"``): ``<speech><|tool_call>call:NAME{k:v}<tool_call|>...`` then
an optional end marker, the very form the bundled template renders history and few-shot examples
in, so a base model continues the pattern it was shown instead of fighting the grammar.
Each call's arguments follow the tool's JSON schema and the name is one of the registry's tools,
so a small model that was never trained for tool use still produces calls the parser accepts.
The speech admits only what a voice can say (``SPEAKABLE_REST``): no markup ever reaches the TTS.
"""

from __future__ import annotations

from llama_cpp.llama_grammar import SchemaConverter

from bolt_agent.core.llm import gemma4_grammar
from bolt_agent.core.tools.registry import ToolRegistry

TOOL_CHOICES = ("auto", "none", "required")
CALL_FORMATS = ("json", "gemma4")

#: letters (ASCII, Latin-1 and Latin Extended, Greek, Cyrillic) and digits: what speech starts with
SPEAKABLE_FIRST = r"A-Za-z0-9\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u024F\u0370-\u03FF\u0400-\u04FF"
#: then spaces and sentence punctuation too; never | < > { } [ ] _ \ * # @ = ~ ^ or backticks,
#: nor colon and semicolon: a voice does not need them, and ``call:name`` is how markup begins
SPEAKABLE_REST = SPEAKABLE_FIRST + r" .,!?'\"()\u2019-"


MAX_ENUM_RANGE = 64  # integer ranges up to this many values become exact enums


def _bounded_ints(schema, wide: list[tuple[int | None, int | None]]):
    """llama-cpp-python's converter ignores minimum/maximum: small integer ranges become enums
    (exact); wide ones become placeholders that ``build_grammar`` turns into digit-limited rules
    (the validator still checks the exact bounds)."""
    if isinstance(schema, list):
        return [_bounded_ints(s, wide) for s in schema]
    if not isinstance(schema, dict):
        return schema
    lo, hi = schema.get("minimum"), schema.get("maximum")
    # a value fixed (pinned, copied); a ``properties`` dict with an argument named "const" is
    # not one (its value is a schema)
    if isinstance(schema.get("enum"), list) or not isinstance(schema.get("const", {}), dict):
        return schema
    if schema.get("type") == "integer" and (lo is not None or hi is not None):
        if lo is not None and hi is not None and 0 <= hi - lo < MAX_ENUM_RANGE:
            return {"enum": list(range(int(lo), int(hi) + 1))}
        wide.append((lo, hi))
        return {"const": f"@@int{len(wide) - 1}@@"}
    return {k: _bounded_ints(v, wide) for k, v in schema.items()}


def _int_rule(name: str, lo: int | None, hi: int | None) -> str:
    digits = len(str(abs(int(hi)))) if hi is not None else 12
    sign = '"-"? ' if lo is None or lo < 0 else ""
    body = f'("0" | [1-9] [0-9]{{0,{max(digits - 1, 0)}}})'
    return f"{name} ::= {sign}{body} space\n"


def call_schema(registry: ToolRegistry, only: str | None = None, wide: list | None = None) -> dict:
    """JSON schema of one call object: ``{"name": const, "arguments": <tool parameters>}``."""
    wide = [] if wide is None else wide
    variants = [
        {
            "type": "object",
            "properties": {
                "name": {"const": tool.name},
                "arguments": _bounded_ints(tool.parameters, wide),
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for tool in registry
        if only is None or tool.name == only
    ]
    if not variants:
        raise ValueError(f"no tool named {only!r}" if only else "the registry has no tools")
    return variants[0] if len(variants) == 1 else {"oneOf": variants}


def build_grammar(
    registry: ToolRegistry,
    tool_choice: str = "auto",
    max_speech_chars: int = 240,
    max_calls: int = 3,
    call_format: str = "json",
) -> str:
    """GBNF for the answer (after any thinking). `tool_choice`: auto | none | required | <name>;
    `call_format`: json (``<tool_call>{json}</tool_call>``) | gemma4 (the bundled template's)."""
    # speech starts with a letter or digit, so the first sentence is speakable and every call is
    # preceded by something the robot says; it holds only what a voice can say
    speech = f"speech ::= [{SPEAKABLE_FIRST}] [{SPEAKABLE_REST}]{{0,{max_speech_chars - 1}}}\n"
    if call_format not in CALL_FORMATS:
        raise ValueError(f"call_format must be one of {CALL_FORMATS}, not {call_format!r}")
    end = ' "<turn|>"?' if call_format == "gemma4" else ""
    if tool_choice == "none" or len(registry) == 0:
        if tool_choice == "required":
            raise ValueError("tool_choice 'required' with no tools")
        return f"root ::= speech{end}\n" + speech
    only = None if tool_choice in TOOL_CHOICES else tool_choice
    if only is not None and only not in registry:
        raise ValueError(f"tool_choice names an unknown tool {only!r}")
    if call_format == "gemma4":
        low = 1 if tool_choice == "required" or only else 0
        return gemma4_grammar.build(registry, only, low, max_calls, speech)
    converter = SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    wide: list[tuple[int | None, int | None]] = []
    schema = converter.resolve_refs(call_schema(registry, only, wide), "tools")
    converter.visit(schema, "call")
    low = 1 if tool_choice == "required" or only else 0
    calls = f'calls ::= ("<tool_call>" call "</tool_call>"){{{low},{max_calls}}}\n'
    # no '<' inside JSON strings: a string must never contain a marker like </tool_call>
    rules = converter.format_grammar().replace('char ::= [^"\\\\]', 'char ::= [^"\\\\<]')
    rules = rules.rstrip("\n") + "\n"
    for i, (lo, hi) in enumerate(wide):
        literal = '"\\"@@int' + str(i) + '@@\\""'
        rules = rules.replace(literal, f"int{i}") + _int_rule(f"int{i}", lo, hi)
    return "root ::= speech calls\n" + speech + calls + rules

"""GBNF grammar for the constrained mode: speech first, then zero or more allowlisted tool calls.

Output shape: ``<speech text><tool_call>{"name": ..., "arguments": {...}}</tool_call>...``.
Each call's arguments follow the tool's JSON schema (llama-cpp-python's JSON-schema converter),
and the name is one of the registry's tools, so a small model that was never trained for tool use
still produces calls the parser accepts.
"""

from __future__ import annotations

from llama_cpp.llama_grammar import SchemaConverter

from bolt_agent.core.tool_registry import ToolRegistry

TOOL_CHOICES = ("auto", "none", "required")


def call_schema(registry: ToolRegistry, only: str | None = None) -> dict:
    """JSON schema of one call object: ``{"name": const, "arguments": <tool parameters>}``."""
    variants = [
        {
            "type": "object",
            "properties": {"name": {"const": tool.name}, "arguments": tool.parameters},
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
) -> str:
    """GBNF for the answer (after any thinking). `tool_choice`: auto | none | required | <name>."""
    # speech starts with a visible character, so a call is always preceded by something to say
    speech = f"speech ::= [^<\\n\\t ] [^<]{{0,{max_speech_chars - 1}}}\n"
    if tool_choice == "none" or len(registry) == 0:
        if tool_choice == "required":
            raise ValueError("tool_choice 'required' with no tools")
        return "root ::= speech\n" + speech
    only = None if tool_choice in TOOL_CHOICES else tool_choice
    if only is not None and only not in registry:
        raise ValueError(f"tool_choice names an unknown tool {only!r}")
    converter = SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    schema = converter.resolve_refs(call_schema(registry, only), "tools")
    converter.visit(schema, "call")
    low = 1 if tool_choice == "required" or only else 0
    calls = f'calls ::= ("<tool_call>" call "</tool_call>"){{{low},{max_calls}}}\n'
    return "root ::= speech calls\n" + speech + calls + converter.format_grammar()

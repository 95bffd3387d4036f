"""Incremental output parser: formats, malformed input, and property-based robustness."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bolt_agent.core.llm.gemma4_syntax import format_call
from bolt_agent.core.llm.output_parser import (
    EndOfTurn,
    OutputParser,
    Sentence,
    SpeechDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallError,
)
from bolt_agent.core.tools.registry import ToolRegistry

REGISTRY = ToolRegistry.from_config(
    [
        {
            "name": "trigger_reachy_animation",
            "parameters": {
                "type": "object",
                "properties": {
                    "animation_name": {"type": "string", "enum": ["happy_nod", "scan_room"]},
                    "speed": {"type": "string", "enum": ["slow", "normal", "fast"]},
                },
                "required": ["animation_name"],
            },
            "binding": {"type": "play_animation", "action": "animation/play"},
        },
        {
            "name": "sell_to_player",
            "parameters": {
                "type": "object",
                "properties": {"item": {"type": "string"}, "quantity": {"type": "integer"}},
                "required": ["item"],
            },
            "binding": {"type": "execute_tool", "action": "game/execute_tool"},
        },
    ]
)


def parse(chunks, **kw):
    parser = OutputParser(REGISTRY.validate, **kw)
    events = []
    for chunk in chunks:
        events += parser.feed(chunk)
    events += parser.finish()
    return events, parser


def chars(text):
    return list(text)


def test_gemma4_stream_char_by_char():
    text = (
        "<|channel>thought\nThe user wants a nod.<channel|>Sure thing! Watch this."
        '<|tool_call>call:trigger_reachy_animation{animation_name:<|"|>happy_nod<|"|>,'
        'speed:<|"|>fast<|"|>}<tool_call|><turn|>ignored'
    )
    events, parser = parse(chars(text))
    assert (
        "".join(e.text for e in events if isinstance(e, ThinkingDelta)) == "The user wants a nod."
    )
    assert [e.text for e in events if isinstance(e, Sentence)] == ["Sure thing!", "Watch this."]
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert calls == [
        ToolCall("trigger_reachy_animation", {"animation_name": "happy_nod", "speed": "fast"})
    ]
    # every sentence of the step precedes the call
    order = [type(e).__name__ for e in events if isinstance(e, Sentence | ToolCall)]
    assert order == ["Sentence", "Sentence", "ToolCall"]
    assert isinstance(events[-1], EndOfTurn) and events[-1].marker == "<turn|>"
    assert "ignored" not in parser.speech_text


def test_json_tool_call_format_and_think_tags():
    text = (
        '<think>hmm</think>Let me check the back room for you.<tool_call>{"name": '
        '"sell_to_player", "arguments": {"item": "iron helmet", "quantity": 2}}</tool_call>'
    )
    events, _ = parse([text[i : i + 7] for i in range(0, len(text), 7)])
    assert next(e for e in events if isinstance(e, ToolCall)).arguments == {
        "item": "iron helmet",
        "quantity": 2,
    }
    assert [e.text for e in events if isinstance(e, Sentence)] == [
        "Let me check the back room for you."
    ]


def test_unknown_tool_invalid_arguments_and_garbage_become_errors():
    text = (
        'Okay.<tool_call>{"name": "launch_missiles", "arguments": {}}</tool_call>'
        '<tool_call>{"name": "sell_to_player", "arguments": {"quantity": "two"}}'
        '</tool_call><|tool_call>call:sell_to_player{item:<|"|>unterminated}<tool_call|>'
        "<tool_call>not json</tool_call>"
    )
    events, _ = parse([text])
    errors = [e for e in events if isinstance(e, ToolCallError)]
    assert [e for e in events if isinstance(e, ToolCall)] == []
    assert len(errors) == 4
    assert "unknown tool 'launch_missiles'" in errors[0].reason
    assert "invalid arguments for 'sell_to_player'" in errors[1].reason
    assert errors[2].reason.startswith("malformed tool call")
    assert errors[3].reason.startswith("malformed tool call")


def test_unterminated_call_and_control_tokens_never_reach_speech():
    events, parser = parse(['Hello <|"|> there<|image|>.', " <|tool_call>call:x{"])
    assert parser.speech_text.strip() == "Hello  there."
    assert isinstance(next(e for e in events if isinstance(e, ToolCallError)), ToolCallError)


def test_literal_angle_brackets_in_speech_survive():
    events, parser = parse(["3 <", " 5 and a<b. Done"])
    assert parser.speech_text == "3 < 5 and a<b. Done"
    assert [e.text for e in events if isinstance(e, Sentence)] == ["3 < 5 and a<b.", "Done"]


def test_abbreviations_do_not_split_sentences():
    events, _ = parse(["Dr. Smith said hi. Then left!"])
    assert [e.text for e in events if isinstance(e, Sentence)] == [
        "Dr. Smith said hi.",
        "Then left!",
    ]


def test_start_in_thinking_and_close_marker():
    parser = OutputParser(REGISTRY.validate, start_in_thinking=True)
    assert parser.in_thinking and parser.thinking_close_marker == "<channel|>"
    events = parser.feed("\nreasoning<chan") + parser.feed("nel|>Answer.")
    assert not parser.in_thinking
    assert parser.thinking_text == "reasoning"
    assert any(isinstance(e, SpeechDelta) and e.text == "Answer." for e in events)


# --- properties ----------------------------------------------------------------------------

MARKER_BITS = [
    "<|channel>thought\n",
    "<channel|>",
    "<|tool_call>",
    "<tool_call|>",
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "<turn|>",
    '<|"|>',
    "call:",
    "{",
    "}",
    ":",
    ",",
    "trigger_reachy_animation",
    "sell_to_player",
    "animation_name",
    "happy_nod",
    '"name"',
    '"arguments"',
    "<",
    ">",
    "|",
    ". ",
    "! ",
    "\n",
    "hello",
    " ",
    "[",
    "]",
    "1",
    "true",
]
noise = st.lists(st.one_of(st.sampled_from(MARKER_BITS), st.text(max_size=6)), max_size=40)
splits = st.lists(st.integers(min_value=1, max_value=9), min_size=1, max_size=20)


def split(text: str, sizes: list[int]) -> list[str]:
    out, i, k = [], 0, 0
    while i < len(text):
        n = sizes[k % len(sizes)]
        out.append(text[i : i + n])
        i, k = i + n, k + 1
    return out


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(noise, splits)
def test_random_streams_never_raise_and_never_emit_forbidden_calls(parts, sizes):
    events, _ = parse(split("".join(parts), sizes))
    for ev in events:
        if isinstance(ev, ToolCall):
            assert ev.name in REGISTRY
            assert REGISTRY.validate(ev.name, ev.arguments) is None
    assert isinstance(events[-1], EndOfTurn)
    assert sum(isinstance(e, EndOfTurn) for e in events) == 1


speech_text = st.text(
    alphabet=st.characters(blacklist_characters="<", blacklist_categories=["Cs"]), max_size=60
)
anim_args = st.fixed_dictionaries(
    {"animation_name": st.sampled_from(["happy_nod", "scan_room"])},
    optional={"speed": st.sampled_from(["slow", "normal", "fast"])},
)


@settings(max_examples=1500, deadline=None)
@given(speech_text, st.lists(anim_args, max_size=3), st.booleans(), splits)
def test_well_formed_streams_parse_the_same_under_any_chunking(speech, calls, as_json, sizes):
    blocks = []
    for args in calls:
        if as_json:
            body = json.dumps({"name": "trigger_reachy_animation", "arguments": args})
            blocks.append(f"<tool_call>{body}</tool_call>")
        else:
            blocks.append(
                f"<|tool_call>{format_call('trigger_reachy_animation', args)}<tool_call|>"
            )
    text = speech + "".join(blocks)
    whole, p1 = parse([text])
    pieces, p2 = parse(split(text, sizes))
    got = [e.arguments for e in pieces if isinstance(e, ToolCall)]
    assert got == calls == [e.arguments for e in whole if isinstance(e, ToolCall)]
    assert p1.speech_text == p2.speech_text
    assert "".join(e.text for e in pieces if isinstance(e, SpeechDelta)) == p2.speech_text


# --- complete markers in speech (issue 13) ---------------------------------------------------

#: complete markers that neither open a block nor end the turn: dropped, never spoken
DROPPED_MARKERS = [
    "<channel|>",
    "<tool_call|>",
    "</tool_call>",
    "</think>",
    '<|"|>',
    "<tool_response|>",
    "<|think|>",
    "<|channel>",
]


def test_an_end_of_channel_marker_at_the_very_end_is_not_spoken():
    for chunks in (
        ["Hello there.<channel|>"],
        ["Hello there.", "<channel|>"],
        chars("Hi.<|channel>"),
    ):
        events, parser = parse(chunks)
        assert "<" not in parser.speech_text and "channel" not in parser.speech_text, chunks
        assert [e.text for e in events if isinstance(e, Sentence)] == [parser.speech_text.strip()]


def test_a_next_turn_opening_ends_the_turn():
    events, parser = parse(["Bye now.<start_of_turn>user\nmore"])
    assert parser.speech_text == "Bye now."
    assert events[-1] == EndOfTurn("<start_of_turn>")
    _, parser = parse(chars("Bye.<|turn>user\nmore"))
    assert parser.speech_text == "Bye."


plain = st.text(alphabet=st.sampled_from(list("abc .!,xyz")), max_size=12)


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.tuples(plain, st.sampled_from(DROPPED_MARKERS)), max_size=4), plain, splits)
def test_complete_markers_are_dropped_wherever_they_fall_in_any_chunking(pieces, tail, sizes):
    text = "".join(p + m for p, m in pieces) + tail
    expected = "".join(p for p, _ in pieces) + tail
    for chunks in ([text], split(text, sizes), chars(text)):
        events, parser = parse(chunks)
        assert parser.speech_text == expected, (chunks, parser.speech_text)
        assert not any(isinstance(e, ToolCall | ToolCallError) for e in events)

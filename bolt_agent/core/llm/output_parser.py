"""Incremental parser of model output into thinking, speech, sentences and tool calls.

Feed decoded text piece by piece (any split, even inside a marker); get typed events back.
Understands Gemma 4 / Bolt blocks (``<|channel>thought ... <channel|>``,
``<|tool_call>call:NAME{...}<tool_call|>``, ``<turn|>``), ``<think>...</think>`` and
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (the constrained format).
Malformed, unknown or schema-invalid calls become ``ToolCallError`` events; nothing raises.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bolt_agent.core.llm import markers
from bolt_agent.core.llm.gemma4_syntax import Gemma4SyntaxError, parse_call
from bolt_agent.core.tts.sentences import SentenceSplitter

_THINK, _CALLS, _END = markers.THINK_BLOCKS, markers.CALL_BLOCKS, markers.TURN_ENDS
_ALL_MARKERS = (
    tuple(m for pair in _THINK for m in pair) + tuple(m for c in _CALLS for m in c[:2]) + _END
)
#: block closers met in speech (a stray ``<channel|>`` after an empty thought): never spoken
_CLOSERS = tuple(pair[1] for pair in _THINK) + tuple(c[1] for c in _CALLS)
_SPECIAL = re.compile(r"<\|[A-Za-z_\"]{1,24}\|?>|<[A-Za-z_\"]{1,24}\|>")
_MAYBE_SPECIAL = re.compile(r"<\|?[A-Za-z_\"]{0,24}\|?")
MAX_CALL_CHARS = 8192

Validator = Callable[[str, dict[str, Any]], "str | None"]


@dataclass(frozen=True)
class ThinkingDelta:
    text: str


@dataclass(frozen=True)
class SpeechDelta:
    text: str


@dataclass(frozen=True)
class Sentence:
    text: str


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(hash=False)
    raw: str = field(default="", compare=False)


@dataclass(frozen=True)
class ToolCallError:
    raw: str
    reason: str
    name: str = ""


@dataclass(frozen=True)
class EndOfTurn:
    marker: str


Event = ThinkingDelta | SpeechDelta | Sentence | ToolCall | ToolCallError | EndOfTurn


def parse_json_call(body: str) -> tuple[str, dict[str, Any]]:
    """``{"name": ..., "arguments": {...}}`` (``parameters`` accepted too)."""
    obj = json.loads(body)
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        raise ValueError('expected an object with a string "name"')
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        args = json.loads(args)
    if not isinstance(args, dict):
        raise ValueError('"arguments" must be an object')
    return obj["name"], args


class OutputParser:
    """State machine over the decoded stream. Not thread-safe; one per generation step."""

    def __init__(
        self,
        validator: Validator | None = None,
        start_in_thinking: bool = False,
        first_clause_chars: int = 0,
    ):
        self._validator = validator
        self._buf = ""
        self._mode = "think" if start_in_thinking else "speech"
        self._close = "<channel|>" if start_in_thinking else ""
        self._call_kind = ""
        self._strip_newline = start_in_thinking
        self._sentences = SentenceSplitter(first_clause_chars)
        self.done = False
        self.speech_text = ""
        self.thinking_text = ""

    @property
    def in_thinking(self) -> bool:
        return self._mode == "think"

    @property
    def thinking_close_marker(self) -> str:
        return self._close if self._mode == "think" else ""

    def feed(self, text: str) -> list[Event]:
        if self.done or not text:
            return []
        self._buf += text
        events: list[Event] = []
        while self._buf and not self.done:
            progressed = {
                "speech": self._step_speech,
                "think": self._step_think,
                "call": self._step_call,
            }[self._mode](events)
            if not progressed:
                break
        return events

    def finish(self) -> list[Event]:
        """End of stream: flush speech, report an unterminated call or thought."""
        events: list[Event] = []
        if self.done:
            return events
        if self._mode == "speech":  # nothing more will come: no marker prefix is held back
            while self._buf and not self.done and self._mode == "speech":
                self._step_speech(events, final=True)
        rest, self._buf = self._buf, ""
        if self.done:
            return events
        if self._mode == "think":
            self._thinking(rest, events)
        elif self._mode == "call":
            events.append(ToolCallError(raw=rest, reason="unterminated tool call"))
        self._flush_sentence(events)
        self.done = True
        events.append(EndOfTurn(marker=""))
        return events

    # --- modes ---------------------------------------------------------------------------------
    def _step_speech(self, events: list[Event], final: bool = False) -> bool:
        i = self._buf.find("<")
        if i < 0:
            self._speech(self._buf, events)
            self._buf = ""
            return False
        if i > 0:
            self._speech(self._buf[:i], events)
            self._buf = self._buf[i:]
        rest = self._buf
        for open_, close in _THINK:
            if rest.startswith(open_):
                self._buf = rest[len(open_) :]
                self._mode, self._close, self._strip_newline = "think", close, True
                return True
        for open_, close, kind in _CALLS:
            if rest.startswith(open_):
                self._flush_sentence(events)
                self._buf = rest[len(open_) :]
                self._mode, self._close, self._call_kind = "call", close, kind
                return True
        for end in _END:
            if rest.startswith(end):
                self._buf = ""
                self._flush_sentence(events)
                self.done = True
                events.append(EndOfTurn(marker=end))
                return False
        closer = next((m for m in _CLOSERS if rest.startswith(m)), None)
        if closer:
            self._buf = rest[len(closer) :]
            return True
        special = _SPECIAL.match(rest)
        if any(m.startswith(rest) for m in _ALL_MARKERS) or (
            len(rest) < 27 and _MAYBE_SPECIAL.fullmatch(rest)
        ):
            if final:  # the stream ended inside a possible marker: drop it, unspoken
                self._buf = rest[special.end() :] if special else ""
                return True
            return False  # wait for more text: may be a marker
        if special:  # an unknown control token: never spoken
            self._buf = rest[special.end() :]
            return True
        self._speech("<", events)
        self._buf = rest[1:]
        return True

    def _step_think(self, events: list[Event]) -> bool:
        if self._strip_newline:
            if self._buf.startswith("\n"):
                self._buf = self._buf[1:]
            self._strip_newline = False
        i = self._buf.find(self._close)
        if i >= 0:
            self._thinking(self._buf[:i], events)
            self._buf = self._buf[i + len(self._close) :]
            self._mode = "speech"
            return True
        keep = _partial_suffix(self._buf, self._close)
        self._thinking(self._buf[: len(self._buf) - keep], events)
        self._buf = self._buf[len(self._buf) - keep :]
        return False

    def _step_call(self, events: list[Event]) -> bool:
        i = self._buf.find(self._close)
        if i < 0:
            if len(self._buf) > MAX_CALL_CHARS:
                events.append(ToolCallError(raw=self._buf[:200], reason="tool call too long"))
                self._buf, self._mode = "", "speech"
                self.done = True
                events.append(EndOfTurn(marker=""))
            return False
        body, self._buf = self._buf[:i], self._buf[i + len(self._close) :]
        self._mode = "speech"
        events.append(self._make_call(body))
        return True

    # --- helpers -------------------------------------------------------------------------------
    def _make_call(self, body: str) -> ToolCall | ToolCallError:
        try:
            if self._call_kind == "gemma4":
                name, args = parse_call(body)
            else:
                name, args = parse_json_call(body)
        except (Gemma4SyntaxError, ValueError, RecursionError) as exc:
            return ToolCallError(raw=body, reason=f"malformed tool call: {exc}")
        if self._validator is not None:
            problem = self._validator(name, args)
            if problem:
                return ToolCallError(raw=body, reason=problem, name=name)
        return ToolCall(name=name, arguments=args, raw=body)

    def _speech(self, text: str, events: list[Event]) -> None:
        if not text:
            return
        self.speech_text += text
        events.append(SpeechDelta(text))
        events.extend(Sentence(s) for s in self._sentences.push(text))

    def _thinking(self, text: str, events: list[Event]) -> None:
        if text:
            self.thinking_text += text
            events.append(ThinkingDelta(text))

    def _flush_sentence(self, events: list[Event]) -> None:
        rest = self._sentences.flush()
        if rest:
            events.append(Sentence(rest))


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `marker`."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0

"""A TurnSink for tests: records every event in order; tool calls succeed (or as told)."""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future

from bolt_agent.core.llm.turn_runner import ToolResult
from bolt_agent.core.tools.registry import ToolRegistry


def speaking_after_results(registry: ToolRegistry) -> ToolRegistry:
    """``registry`` with every tool's turn going on after its result: cases about the steps
    after a tool (the profiles end a turn at an animation's result: ``after_result: end``)."""
    return ToolRegistry(dataclasses.replace(t, after_result="speak") for t in registry)


class RecordingSink:
    def __init__(self, result_for=lambda name, args: ToolResult(ok=True, result={"ok": True})):
        self.events: list[tuple] = []
        self.results: list = []  # TurnResult per turn end
        self.result_for = result_for

    def on_first_token(self, turn_id):
        self.events.append(("first",))

    def on_thinking(self, turn_id, text):
        self.events.append(("think", text))

    def on_speech_delta(self, turn_id, text):
        self.events.append(("delta", text))

    def on_sentence(self, turn_id, seq, text):
        self.events.append(("sentence", seq, text))

    def dispatch(self, turn_id, name, arguments):
        self.events.append(("dispatch", name, arguments))
        future = Future()
        future.set_result(self.result_for(name, arguments))
        return future

    def on_turn_end(self, turn_id, seq, result):
        self.events.append(("end", seq))
        self.results.append(result)

    def kinds(self):
        return [e[0] for e in self.events if e[0] in ("sentence", "dispatch")]

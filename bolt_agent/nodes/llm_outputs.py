"""llm_node's outputs and the sinks of its turns.

``LlmOutputs`` owns what llm_node publishes (``speech/say``, ``llm/thinking``, ``tts/stop``,
``llm/tool_events``, ``llm/end_of_turn``, turn metrics) and sends tool goals; a ``TurnSink`` is
what the core's turn runner writes one turn's output to, given the outputs explicitly. While the
operator mutes the robot (``muted()``), sentences are not published and tool calls come back
refused, so a muted turn is held whole.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from rclpy.node import Node
from std_msgs.msg import String

from bolt_agent.core.llm.turn_runner import ToolResult, TurnResult
from bolt_agent.nodes.messages import tool_event
from bolt_agent.nodes.metrics import TurnMetricsPublisher
from bolt_agent.nodes.qos import RELIABLE
from bolt_agent.nodes.tool_dispatcher import ToolDispatcher
from bolt_agent_interfaces.action import Converse
from bolt_agent_interfaces.msg import EndOfTurnHint, SpokenText, ToolEvent


class LlmOutputs:
    """Publishers and the tool dispatcher, created together at configure and destroyed together
    at cleanup. ``on_tool_error`` is called (from the dispatcher's callbacks) for each tool call
    that came back failed, not cancelled."""

    def __init__(
        self,
        node: Node,
        tools: ToolDispatcher,
        muted: Callable[[], bool],
        on_tool_error: Callable[[], None],
    ) -> None:
        self._node, self.tools, self.muted = node, tools, muted
        self._on_tool_error = on_tool_error
        self._say = node.create_publisher(SpokenText, "speech/say", RELIABLE)
        self._think = node.create_publisher(String, "llm/thinking", RELIABLE)
        self._stop = node.create_publisher(String, "tts/stop", RELIABLE)
        self._tool_events = node.create_publisher(ToolEvent, "llm/tool_events", RELIABLE)
        self._hint = node.create_publisher(EndOfTurnHint, "llm/end_of_turn", RELIABLE)
        self.metrics = TurnMetricsPublisher(node, "llm")

    def destroy(self) -> None:
        self.tools.destroy()
        for pub in (self._say, self._think, self._stop, self._tool_events, self._hint):
            self._node.destroy_publisher(pub)
        self.metrics.destroy()

    def _now(self):
        return self._node.get_clock().now().to_msg()

    def say(self, turn_id: str, seq: int, text: str, **flags: bool) -> None:
        """One ``SpokenText`` (flags: ``held``, ``discard``, ``is_last_in_turn``)."""
        msg = SpokenText(turn_id=turn_id, seq=seq, text=text, **flags)
        msg.header.stamp = self._now()
        self._say.publish(msg)

    def thinking(self, text: str) -> None:
        self._think.publish(String(data=text))

    def stop_speech(self, turn_id: str) -> None:
        self._stop.publish(String(data=turn_id))

    def hint(self, utterance_id: str, text: str, p_complete: float) -> None:
        msg = EndOfTurnHint(utterance_id=utterance_id, text=text, p_complete=float(p_complete))
        msg.header.stamp = self._now()
        self._hint.publish(msg)

    def dispatch(self, turn_id: str, name: str, arguments: dict[str, Any]) -> Future[ToolResult]:
        """Send a tool goal; held (an error result) while muted."""
        if self.muted():
            f: Future[ToolResult] = Future()
            f.set_result(ToolResult(ok=False, error="held: the operator muted the robot"))
            return f
        self.metrics.stamp(turn_id, "first_tool_goal", only_first=True)
        future = self.tools.dispatch(turn_id, name, arguments)
        future.add_done_callback(lambda f: self._tool_done(turn_id, name, arguments, f))
        return future

    def _tool_done(self, turn_id: str, name: str, arguments: dict, future: Future) -> None:
        """Stamp and publish a finished tool call (``llm/tool_events``)."""
        self.metrics.stamp(turn_id, "tool_done")
        outcome = (
            future.result() if not future.cancelled() else ToolResult(False, None, "cancelled")
        )
        event = tool_event(
            turn_id,
            name,
            arguments,
            ok=outcome.ok,
            cancelled=future.cancelled(),
            result=outcome.result,
            error=outcome.error,
        )
        event.header.stamp = self._now()
        self._tool_events.publish(event)
        line = f"tool {name} {json.dumps(arguments)} -> {outcome.error or outcome.result}"
        log = self._node.get_logger()
        if outcome.ok:  # two call sites: rclpy fixes one severity per call site
            log.info(line)
        else:
            log.warning(line)
        if not outcome.ok and not future.cancelled():
            self._on_tool_error()


class TurnSink:
    """One turn's output as the turn runner produces it, published through ``outputs``."""

    def __init__(self, outputs: LlmOutputs) -> None:
        self.out = outputs

    def on_first_token(self, turn_id: str) -> None:
        self.out.metrics.stamp(turn_id, "llm_first_token")

    def on_thinking(self, turn_id: str, text: str) -> None:
        self.out.thinking(text)

    def on_speech_delta(self, turn_id: str, text: str) -> None:
        pass

    def on_sentence(self, turn_id: str, seq: int, text: str) -> None:
        self._sentence(turn_id, seq, text, is_last_in_turn=False)

    def dispatch(self, turn_id: str, name: str, arguments: dict[str, Any]) -> Future[ToolResult]:
        return self.out.dispatch(turn_id, name, arguments)

    # a preemptive turn (HeldTurn): held sentences, then its release or its discard
    def on_held_sentence(self, turn_id: str, seq: int, text: str) -> None:
        self._sentence(turn_id, seq, text, held=True)

    def _sentence(self, turn_id: str, seq: int, text: str, **flags: bool) -> None:
        """A sentence of the turn (not while muted); the first one stamps the turn's metrics."""
        if self.out.muted():
            return
        if seq == 0:
            self.out.metrics.stamp(turn_id, "first_speech")
        self.out.say(turn_id, seq, text, **flags)

    def on_release(self, turn_id: str) -> None:
        self.out.say(turn_id, 0, "")

    def on_discard(self, turn_id: str) -> None:
        self.out.metrics.forget(turn_id)
        self.out.say(turn_id, 0, "", held=True, discard=True)

    def on_turn_end(self, turn_id: str, seq: int, result: TurnResult) -> None:
        if not self.out.muted() and not result.cancelled:
            self.out.say(turn_id, seq, "", is_last_in_turn=True)
        self.out.metrics.finish_llm_turn(turn_id, result)


class ConverseSink(TurnSink):
    """A ``llm/converse`` goal's turn: published as any turn, and its speech streamed back as
    the goal's feedback."""

    def __init__(self, outputs: LlmOutputs, goal_handle: Any) -> None:
        super().__init__(outputs)
        self.goal_handle = goal_handle

    def on_speech_delta(self, turn_id: str, text: str) -> None:
        self.goal_handle.publish_feedback(Converse.Feedback(spoken_delta=text))

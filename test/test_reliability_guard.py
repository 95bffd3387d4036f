"""The node base's callback guard, in-process over real DDS (private context): whatever a
subscription, timer, service or action callback raises is logged once per (callback, exception
type), counted in ``failures.callback`` and swallowed, so the executor keeps spinning and the
next good message is handled. Also the ASR input checks and the ASR device-choice reason."""

from __future__ import annotations

import math
from dataclasses import dataclass

import rclpy
from lifecycle_msgs.srv import GetState
from rclpy.action import ActionClient
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from std_msgs.msg import String

from bolt_agent.core.asr.asr_engine import WhisperEngine
from bolt_agent.core.asr.audio_ingest import audio_block_problem
from bolt_agent.nodes.base import BoltNode
from bolt_agent.nodes.params import param
from bolt_agent_interfaces.action import ExecuteTool
from support.ros_helpers import spin_until


@dataclass(frozen=True)
class _Params:
    limit: int = param(3, "a test parameter", low=0, high=10)


class FragileNode(BoltNode):
    """Every callback raises on the word 'boom' (a stand-in for any bug a message can hit)."""

    Params = _Params

    def __init__(self, **kwargs) -> None:
        super().__init__("fragile", **kwargs)
        self.handled: list[str] = []
        self.ticks = 0
        self.create_subscription(String, "words", self._on_word, 50)
        self.create_service(GetState, "poke", self._on_poke)
        self.create_timer(0.05, self._tick)
        self.server = self.create_action_server(ExecuteTool, "tool", self._execute)

    def _on_word(self, msg: String) -> None:
        if msg.data == "boom":
            raise ValueError("bad word")
        if msg.data == "key":
            raise KeyError("missing")
        self.handled.append(msg.data)

    def _on_poke(self, request, response):
        raise RuntimeError("service bug")

    def _tick(self) -> None:
        self.ticks += 1
        if self.ticks == 2:
            raise ZeroDivisionError("timer bug")

    def _execute(self, goal_handle):
        raise RuntimeError("execute bug")


def test_nothing_raised_in_a_callback_ends_the_node():
    context = Context()
    rclpy.init(context=context)
    try:
        node = FragileNode(context=context)
        probe = rclpy.create_node("probe", context=context)
        ex = SingleThreadedExecutor(context=context)
        ex.add_node(node)
        ex.add_node(probe)
        pub = probe.create_publisher(String, "words", 50)
        spin_until(ex, lambda: pub.get_subscription_count() > 0, 10, "the subscription")
        for i in range(20):
            pub.publish(String(data="boom" if i % 2 else "key"))
        pub.publish(String(data="fine"))
        spin_until(ex, lambda: node.handled == ["fine"], 10, "the good message after garbage")
        spin_until(ex, lambda: node.ticks >= 4, 10, "the timer to go on after raising")

        client = probe.create_client(GetState, "poke")
        spin_until(ex, client.service_is_ready, 10, "the service")
        answer = client.call_async(GetState.Request())
        spin_until(ex, answer.done, 10, "the service's (empty) answer")
        assert answer.result() is not None and answer.result().current_state.label == ""

        action = ActionClient(probe, ExecuteTool, "tool")
        spin_until(ex, action.server_is_ready, 10, "the action server")
        sent = action.send_goal_async(ExecuteTool.Goal(tool_name="x", arguments_json="{"))
        spin_until(ex, sent.done, 10, "the goal response")
        result = sent.result().get_result_async()
        spin_until(ex, result.done, 10, "the aborted goal's result")
        assert result.result().result.success is False

        # 20 subscription failures + timer + service + execute, each counted
        assert node.failures("callback") == 23
        # logged with a traceback once per (callback, exception type): 2 + 1 + 1 + 1
        assert len(node._callback_errors_seen) == 5
        values = {kv.key: kv.value for kv in node.diagnostic_status().values}
        assert values["failures.callback"] == "23" and "raised" in values["last_error"]
        node.destroy_node()
        probe.destroy_node()
        ex.shutdown()
    finally:
        rclpy.shutdown(context=context)


def test_audio_blocks_are_checked_before_conversion():
    ok = audio_block_problem
    assert ok(3200, 1, 16000, 2.0) is None and ok(3200, 2, 0, 2.0) is None
    assert "whole number" in ok(3, 2, 16000, 2.0)  # the block that once ended asr_node
    assert "channels" in ok(4, 0, 16000, 2.0) and "channels" in ok(4, 99, 16000, 2.0)
    assert "sample_rate" in ok(4, 1, 7, 2.0) and "sample_rate" in ok(4, 1, 10**9, 2.0)
    assert "max_chunk_s" in ok(160_000, 1, 16000, 2.0)  # ten seconds in one block
    assert "max_chunk_s" in ok(10, 1, 16000, math.nan)


def test_the_asr_device_choice_says_why_cuda_was_not_used():
    device, why = WhisperEngine.probe_device("auto")
    assert (device, bool(why)) in {("cpu", True), ("cuda", False)}
    assert WhisperEngine.probe_device("cpu") == ("cpu", "")

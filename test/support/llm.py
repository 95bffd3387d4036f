"""llm_node in its own process, and a test-side node that records what it says and does."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import rclpy
from rclpy.action import ActionServer, CancelResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.executors import MultiThreadedExecutor
from std_msgs.msg import String
from std_srvs.srv import Trigger

from bolt_agent.nodes.messages import tool_event_dict
from bolt_agent.nodes.qos import RELIABLE
from bolt_agent_interfaces.action import PlayAnimation
from bolt_agent_interfaces.msg import SpokenText, ToolEvent, TurnMetrics
from support.ros_helpers import spin_until

BASE_PARAMS = {
    "enable_thinking": "false",
    "max_speech_chars": "40",
    "max_new_tokens": "128",
    "seed": "11",
    "tool_server_wait_s": "1.0",
}


def start_llm(node_process, ns: str, **params):
    args = ["-m", "bolt_agent.nodes.llm_node", "--ros-args", "-r", f"__ns:={ns}"]
    for key, value in {**BASE_PARAMS, **params}.items():
        args += ["-p", f"{key}:={value}"]
    return node_process(*args, name="llm_node")


class Recorder:
    """Test-side node: SpokenText subscriber, PlayAnimation server, prompt publisher."""

    def __init__(
        self,
        node,
        serve_animation: bool = True,
        animation_ok: bool = True,
        hold_animations: bool = False,
    ):
        self.node = node
        self.animation_ok = animation_ok  # False: every animation fails ("the head is stuck")
        #: True: every animation goes on until ``release()`` or a cancel (the robot still
        #: moving): the turn that called it is in progress until then, whatever the model said
        self.hold_animations = hold_animations
        self._released = threading.Event()
        self.said: list[tuple[float, SpokenText]] = []
        self.goals: list[tuple[float, PlayAnimation.Goal]] = []
        self.tool_events: list[dict] = []
        self.thinking: list[str] = []
        self.metrics: list[TurnMetrics] = []
        self.stops: list[str] = []
        node.create_subscription(SpokenText, "speech/say", self._said, RELIABLE)
        node.create_subscription(
            ToolEvent,
            "llm/tool_events",
            lambda m: self.tool_events.append(tool_event_dict(m)),
            RELIABLE,
        )
        node.create_subscription(
            String, "llm/thinking", lambda m: self.thinking.append(m.data), RELIABLE
        )
        node.create_subscription(TurnMetrics, "bolt/turn_metrics", self.metrics.append, RELIABLE)
        node.create_subscription(String, "tts/stop", lambda m: self.stops.append(m.data), RELIABLE)
        self.prompt = node.create_publisher(String, "teleop/prompt", RELIABLE)
        self._server_executor = None
        if serve_animation:
            server_node = node
            if hold_animations:  # its own threads: a held goal must not block the test's spin
                server_node = rclpy.create_node(
                    f"{node.get_name()}_animation",
                    namespace=node.get_namespace(),
                    context=node.context,
                )
                self._server_executor = MultiThreadedExecutor(num_threads=2, context=node.context)
                self._server_executor.add_node(server_node)
                threading.Thread(target=self._server_executor.spin, daemon=True).start()
            self.server = ActionServer(
                server_node,
                PlayAnimation,
                "animation/play",
                self._execute,
                callback_group=ReentrantCallbackGroup(),
                cancel_callback=lambda _goal: CancelResponse.ACCEPT,
            )

    def _said(self, msg: SpokenText) -> None:
        self.said.append((time.monotonic(), msg))

    def release(self) -> None:
        """Let held animations (and every later one) finish."""
        self._released.set()

    def close(self) -> None:
        """Stop the held animations' executor (before the test's context goes down)."""
        self._released.set()
        if self._server_executor is not None:
            self._server_executor.shutdown()

    def _execute(self, goal_handle):
        self.goals.append((time.monotonic(), goal_handle.request))
        while self.hold_animations and not self._released.wait(0.02):
            if goal_handle.is_cancel_requested:
                goal_handle.canceled()
                return PlayAnimation.Result(success=False, message="cancelled")
        goal_handle.succeed()
        if not self.animation_ok:
            return PlayAnimation.Result(success=False, message="the head is stuck")
        return PlayAnimation.Result(success=True, message="played")

    def turn_over(self, turn_id: str) -> bool:
        return any(m.turn_id == turn_id and m.is_last_in_turn for _, m in self.said)

    def spoken(self, turn_id: str) -> list[tuple[float, SpokenText]]:
        return [(t, m) for t, m in self.said if m.turn_id == turn_id and m.text]


def trigger_caller(node, executor, service: str, llm) -> Callable[[], Trigger.Response]:
    """A function that calls llm_node's std_srvs/Trigger ``service`` (once it is up) and returns
    the answer; a timeout fails with the node's log."""
    client = node.create_client(Trigger, service)
    spin_until(executor, client.service_is_ready, 30, f"the {service} service")

    def call() -> Trigger.Response:
        future = client.call_async(Trigger.Request())
        spin_until(executor, future.done, 30, lambda: f"{service}\n{llm.log()[-2000:]}")
        return future.result()

    return call

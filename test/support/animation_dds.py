"""Helpers for animation_node tests over real DDS: start the node, record its topics, send goals."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rclpy.event_handler import PublisherEventCallbacks
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, String

from bolt_agent.nodes.action_client import ActionClient
from bolt_agent_interfaces.action import PlayAnimation
from bolt_agent_interfaces.msg import AnimationEvent, JointCommand
from support.ros_helpers import spin_until

RELIABLE = QoSProfile(depth=500, reliability=ReliabilityPolicy.RELIABLE)
LATCHED = QoSProfile(
    depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)


def start_animation_node(node_process, ns: str, **params):
    args = ["-m", "bolt_agent.nodes.animation_node", "--ros-args", "-r", f"__ns:={ns}"]
    params = {"idle_animation": "''", **params}
    for key, value in params.items():
        args += ["-p", f"{key}:={value}"]
    return node_process(*args, name="animation_node")


@dataclass
class Rx:
    """(receive time, message) lists per topic."""

    commands: list[tuple[float, JointState]] = field(default_factory=list)
    states: list[tuple[float, JointState]] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    override: list[tuple[float, bool]] = field(default_factory=list)

    def origins(self) -> list[str]:
        return [m.origin for _, m in self.commands]


class AnimationRig:
    """Subscriptions, teleop publishers and the action client, in the test's own process."""

    def __init__(self, node, executor, ns: str):
        self.node, self.executor, self.rx = node, executor, Rx()
        sub = node.create_subscription
        sub(
            JointCommand,
            f"{ns}/robot/joint_commands",
            lambda m: self.rx.commands.append((time.time(), m)),
            RELIABLE,
        )
        sub(
            JointState,
            f"{ns}/robot/joint_states",
            lambda m: self.rx.states.append((time.time(), m)),
            RELIABLE,
        )
        sub(
            AnimationEvent,
            f"{ns}/animation/events",
            self.rx.events.append,
            RELIABLE,
        )
        sub(
            Bool,
            f"{ns}/teleop/override_state",
            lambda m: self.rx.override.append((time.time(), m.data)),
            LATCHED,
        )
        volatile = QoSProfile(
            depth=10, reliability=ReliabilityPolicy.RELIABLE
        )  # as `ros2 topic pub`
        quiet = PublisherEventCallbacks(incompatible_qos=lambda _e: None)  # the latched sub
        self.override_pub = node.create_publisher(
            Bool, f"{ns}/teleop/override", volatile, event_callbacks=quiet
        )
        self.joint_pub = node.create_publisher(JointState, f"{ns}/teleop/joint_command", volatile)
        self.anim_pub = node.create_publisher(String, f"{ns}/teleop/animation", volatile)
        self.client = ActionClient(node, PlayAnimation, f"{ns}/animation/play")

    def wait_ready(self, timeout: float = 30.0) -> None:
        spin_until(self.executor, self.client.server_is_ready, timeout, "the animation/play server")
        for pub in (self.override_pub, self.joint_pub, self.anim_pub):
            spin_until(self.executor, lambda p=pub: p.get_subscription_count() > 0, timeout, "sub")
        spin_until(self.executor, lambda: len(self.rx.states) > 0, timeout, "robot/joint_states")
        spin_until(self.executor, lambda: self.rx.override, timeout, "teleop/override_state")

    def send(self, name: str, speed: float = 1.0, source: str = "", feedback=None):
        """Send a goal and wait for the accept/reject response; the goal handle."""
        goal = PlayAnimation.Goal(name=name, speed=speed, source=source)
        future = self.client.send_goal_async(goal, feedback_callback=feedback)
        spin_until(self.executor, future.done, 10.0, f"goal response for {name}")
        return future.result()

    def result(self, handle, timeout: float = 20.0):
        future = handle.get_result_async()
        spin_until(self.executor, future.done, timeout, "the goal's result")
        return future.result()

    def spin_for_states(self, n: int, timeout: float = 10.0) -> None:
        """Let ``n`` control periods pass (counted on robot/joint_states) — no fixed sleep."""
        target = len(self.rx.states) + n
        spin_until(self.executor, lambda: len(self.rx.states) >= target, timeout, f"{n} states")

    def set_override(self, on: bool, timeout: float = 10.0) -> float:
        """Publish teleop/override; wait for the latched acknowledgement; its receive time."""
        self.override_pub.publish(Bool(data=on))
        spin_until(self.executor, lambda: self.rx.override[-1][1] == on, timeout, "override ack")
        return self.rx.override[-1][0]

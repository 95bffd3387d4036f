"""animation_node's parameters, declared once with their descriptions (``config/params/
animation_node.yaml`` holds the same defaults; a test keeps them equal)."""

from __future__ import annotations

from dataclasses import dataclass

from bolt_agent.nodes.params import param


@dataclass(frozen=True)
class AnimationParams:
    animations_file: str = param(
        "", "animation library YAML ('' = config/animations.yaml)", load_time=True
    )
    rate_hz: float = param(
        50.0, "control rate of robot/joint_commands (50-100 Hz)", low=1.0, load_time=True
    )
    policy: str = param(
        "preempt",
        "what a new goal does to a running one",
        choices=("preempt", "queue", "reject"),
        load_time=True,
    )
    backend: str = param(
        "sim",
        "robot backend: sim (echoes commands as robot/joint_states) | reachy_mini (Pollen's "
        "SDK: the real robot, or its daemon simulating it in MuJoCo)",
        load_time=True,
        choices=("sim", "reachy_mini"),
    )
    reachy_host: str = param("localhost", "reachy_mini: the daemon's host", load_time=True)
    reachy_port: int = param(
        8000, "reachy_mini: the daemon's HTTP/websocket port", load_time=True, low=1, high=65535
    )
    connect_timeout_s: float = param(
        5.0, "reachy_mini: how long one connection attempt waits", load_time=True, low=0.1
    )
    reconnect_max_s: float = param(
        8.0,
        "longest wait between reconnection attempts once the robot is lost (the first is "
        "0.5 s, doubling)",
        load_time=True,
        low=0.1,
    )
    wake_up_on_start: bool = param(
        False, "reachy_mini: play the robot's wake-up motion once connected", load_time=True
    )
    sleep_on_stop: bool = param(
        False, "reachy_mini: put the robot in its resting pose when the node stops", load_time=True
    )
    idle_animation: str = param(
        "breathing",
        "looped while nothing else plays ('' = off; off during override)",
        load_time=True,
    )
    idle_after_s: float = param(
        3.0, "quiet time before the idle animation starts", low=0.0, load_time=True
    )
    feedback_rate_hz: float = param(
        10.0, "action feedback (progress) rate", low=0.1, load_time=True
    )

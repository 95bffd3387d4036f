"""The link to the robot (core/motion/robot_link.py), Reachy Mini's kinematic limits
(core/motion/reachy_mini.py) and what the animation controller does when the robot goes away,
synchronously: a scripted backend and a fake clock. The real daemon is in test_reachy_mini.py."""

from __future__ import annotations

import math

from bolt_agent.core.motion.animation import JOINTS, AnimationLibrary
from bolt_agent.core.motion.animation_control import AnimationController
from bolt_agent.core.motion.reachy_mini import MAX_RELATIVE_YAW, pose_problem
from bolt_agent.core.motion.robot_backend import RobotBackend, RobotUnavailableError
from bolt_agent.core.motion.robot_link import RobotLink


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Scripted(RobotBackend):
    """A robot whose link is up or down as the test says."""

    def __init__(self) -> None:
        self.up, self.sent, self.loads = True, [], 0
        self.pose = (0.0,) * len(JOINTS)

    def load(self) -> None:
        self.loads += 1
        if not self.up:
            raise RobotUnavailableError("connection refused")

    def send(self, positions) -> None:
        if not self.up:
            raise ConnectionError("Lost connection with the server.")
        self.sent.append(tuple(positions))

    def read_state(self):
        return self.pose


def pose(**joints: float) -> tuple[float, ...]:
    return tuple(joints.get(j, 0.0) for j in JOINTS)


def test_a_lost_link_says_why_and_is_retried_on_a_doubling_backoff():
    clock, robot = Clock(), Scripted()
    link = RobotLink(robot, retry_s=0.5, max_retry_s=2.0, clock=clock)
    assert link.connect().lost is False and link.connected
    robot.up = False
    event = link.send(pose())
    assert event.lost and "Lost connection" in event.reason and not link.connected
    assert link.send(pose()) is None and robot.sent == []  # nothing sent while lost
    waits = []
    for _ in range(4):  # 0.5, 1, 2, 2 s apart: no busy loop against a robot that stays away
        loads = robot.loads
        assert link.connect() is None and robot.loads == loads  # not yet
        waits.append(link.next_try_in)
        clock.t += link.next_try_in
        assert link.connect() is None and robot.loads == loads + 1  # tried, failed quietly
    assert waits == [0.5, 1.0, 2.0, 2.0]
    robot.up, robot.pose = True, pose(head_yaw=0.3)
    clock.t += link.next_try_in
    back = link.connect()
    assert back.lost is False and back.pose == pose(head_yaw=0.3) and link.losses == 1
    assert link.next_try_in == 0.0 or link.connected


def test_the_first_failed_connection_is_reported_once():
    clock, robot = Clock(), Scripted()
    robot.up = False
    link = RobotLink(robot, clock=clock)
    first = link.connect()
    assert first.lost and "connection refused" in first.reason
    clock.t += 10
    assert link.connect() is None  # later failures: the node already reports ERROR


def test_reachy_minis_limits_are_refused_with_the_reason():
    assert pose_problem(pose(head_yaw=0.8, body_yaw=0.4)) is None
    why = pose_problem(pose(head_yaw=1.2, body_yaw=-0.1))
    assert why is not None and "65 degrees" in why
    assert "non-finite" in pose_problem(pose(head_pitch=math.nan))
    assert "beyond" in pose_problem(pose(body_yaw=3.0, head_yaw=3.0))
    assert "tilt" in pose_problem(pose(head_roll=0.5, head_pitch=0.5))
    assert pose_problem(pose(head_yaw=MAX_RELATIVE_YAW)) is None


def test_the_controller_aborts_goals_when_the_robot_is_lost_and_resumes_from_the_measured_pose():
    lib = AnimationLibrary.load()
    ctl = AnimationController(lib, rate_hz=50, idle_animation="breathing", problem=pose_problem)
    assert ctl.refused == {}  # every shipped animation is within Reachy Mini's reach
    assert ctl.submit("g1", "scan_room").accepted
    ctl.step()
    ctl.robot_lost("Lost connection with the server.")
    outcomes = ctl.take_outcomes()
    assert [(o.goal_id, o.status) for o in outcomes] == [("g1", "aborted")]
    assert "robot unavailable: Lost connection" in outcomes[0].message
    refused = ctl.check("happy_nod")
    assert not refused.accepted and "robot unavailable" in refused.reason
    assert not ctl.teleop_pose({"head_yaw": 0.1}).accepted
    for _ in range(500):  # no idle motion while the robot is away
        assert ctl.step().command is None
    ctl.robot_back(pose(head_yaw=0.25))
    assert ctl.pose[JOINTS.index("head_yaw")] == 0.25
    assert ctl.submit("g2", "happy_nod").accepted


def test_animations_and_operator_poses_beyond_the_robot_are_refused():
    lib = AnimationLibrary.from_dict(
        {
            "joints": {j: {"min": -2.0, "max": 2.0, "max_velocity": 5.0} for j in JOINTS},
            "animations": {
                "fine": {"keyframes": [{"duration": 0.5, "head_yaw": 0.5}]},
                "too_far": {"keyframes": [{"duration": 0.5, "head_yaw": 1.5, "body_yaw": -0.2}]},
            },
        }
    )
    ctl = AnimationController(lib, problem=pose_problem)
    assert set(ctl.refused) == {"too_far"} and "keyframe 1" in ctl.refused["too_far"]
    decision = ctl.check("too_far")
    assert not decision.accepted and "beyond the robot" in decision.reason
    assert ctl.check("fine").accepted
    refused = ctl.teleop_pose({"head_yaw": 1.3})
    assert not refused.accepted and "65 degrees" in refused.reason
    assert ctl.teleop_pose({"head_yaw": 1.0, "body_yaw": 0.5}).accepted

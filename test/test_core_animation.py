"""Animation core: library validation, trajectories, limits (property-based), cancel/preempt."""

from __future__ import annotations

import math
import socket

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from bolt_agent.core.motion.animation import (
    JOINTS,
    AnimationConfigError,
    AnimationLibrary,
    Trajectory,
    ease,
    normalise_speed,
)
from bolt_agent.core.motion.animation_control import AnimationController
from bolt_agent.core.motion.backends import make_backend
from bolt_agent.core.motion.robot_backend import RobotUnavailableError, SimRobot
from bolt_agent.core.paths import config_dir

REQUIRED = ("curious_tilt", "happy_nod", "scan_room", "wave_antenna", "breathing")


@pytest.fixture(scope="module")
def lib() -> AnimationLibrary:
    return AnimationLibrary.load()


def run(ctrl: AnimationController, max_steps: int = 5000):
    """Step until idle; (commands, outcomes)."""
    cmds, outcomes = [], []
    for _ in range(max_steps):
        res = ctrl.step()
        outcomes += res.finished
        if res.command is None and ctrl.active is None:
            return cmds, outcomes
        if res.command is not None:
            cmds.append(res.command)
    raise AssertionError("controller never went idle")


def test_shipped_library_has_the_required_animations(lib):
    assert set(REQUIRED) <= set(lib.animations)
    assert set(lib.limits) == set(JOINTS)


def test_invalid_config_lists_every_problem():
    data = yaml.safe_load((config_dir() / "animations.yaml").read_text())
    data["joints"].pop("body_yaw")
    data["animations"]["bad"] = {"keyframes": [{"duration": -1}, {"duration": 1, "tail": 0.3}]}
    with pytest.raises(AnimationConfigError) as err:
        AnimationLibrary.from_dict(data)
    text = str(err.value)
    assert "joints.body_yaw" in text and "duration must be" in text and "unknown joints" in text


def test_min_jerk_shape():
    assert ease(0, "minjerk") == 0 and ease(1, "minjerk") == 1
    assert ease(0.5, "minjerk") == pytest.approx(0.5)
    assert ease(0.25, "linear") == 0.25
    assert normalise_speed(0.01) == 0.1 and normalise_speed(99) == 3.0


@pytest.mark.parametrize("name", REQUIRED)
def test_trajectory_hits_every_yaml_keyframe(lib, name):
    """Commands at the keyframe times equal the YAML poses (read independently of the core)."""
    raw = yaml.safe_load((config_dir() / "animations.yaml").read_text())["animations"][name]
    rate = 100.0
    ctrl = AnimationController(lib, rate_hz=rate)
    ctrl.submit("g", name)
    cmds, outcomes = run(ctrl)
    assert outcomes[-1].status == "succeeded"
    pose, t = dict.fromkeys(JOINTS, 0.0), 0.0
    for kf in raw["keyframes"]:
        t += kf["duration"]
        pose.update({k: v for k, v in kf.items() if k in JOINTS})
        k = round(t * rate) - 1  # command k is at time (k+1)/rate
        got = dict(zip(JOINTS, cmds[k].positions, strict=True))
        for j in JOINTS:
            assert got[j] == pytest.approx(pose[j], abs=0.02), (name, t, j)


def test_speed_scales_time(lib):
    steps = {}
    for speed in (0.6, 1.0, 1.6):
        ctrl = AnimationController(lib, rate_hz=50)
        ctrl.submit("g", "curious_tilt", speed)
        steps[speed] = len(run(ctrl)[0])
    base = lib.animations["curious_tilt"].duration * 50
    assert steps[1.0] == pytest.approx(base, abs=1)
    assert steps[0.6] == pytest.approx(base / 0.6, abs=2)
    assert steps[1.6] == pytest.approx(base / 1.6, abs=3)


def test_cancel_stops_within_one_period(lib):
    ctrl = AnimationController(lib, rate_hz=50)
    ctrl.submit("g", "scan_room")
    for _ in range(20):
        ctrl.step()
    assert ctrl.cancel("g")
    res = ctrl.step()
    assert res.command is None
    assert [(o.goal_id, o.status) for o in res.finished] == [("g", "canceled")]
    assert not ctrl.cancel("g")


def test_preempt_queue_reject_policies(lib):
    ctrl = AnimationController(lib, policy="preempt")
    ctrl.submit("a", "scan_room")
    ctrl.step()
    assert ctrl.submit("b", "happy_nod").accepted
    res = ctrl.step()
    assert res.command.goal_id == "b"
    assert res.finished[0].goal_id == "a" and res.finished[0].status == "aborted"

    ctrl = AnimationController(lib, policy="queue")
    ctrl.submit("a", "happy_nod")
    ctrl.submit("b", "wave_antenna")
    _, outcomes = run(ctrl)
    assert [o.goal_id for o in outcomes] == ["a", "b"]
    assert all(o.status == "succeeded" for o in outcomes)

    ctrl = AnimationController(lib, policy="reject")
    ctrl.submit("a", "happy_nod")
    decision = ctrl.submit("b", "wave_antenna")
    assert not decision.accepted and "busy" in decision.reason
    # teleop always wins, whatever the policy
    assert ctrl.submit("t", "curious_tilt", source="teleop").accepted
    assert ctrl.step().command.origin == "teleop"


def test_unknown_animation_and_source_rejected_with_reason(lib):
    ctrl = AnimationController(lib)
    d = ctrl.submit("x", "moonwalk")
    assert not d.accepted and "unknown animation 'moonwalk'" in d.reason
    d = ctrl.submit("x", "happy_nod", source="bogus")
    assert not d.accepted and "unknown source" in d.reason


def test_idle_breathing_loops_and_yields(lib):
    ctrl = AnimationController(lib, rate_hz=50, idle_animation="breathing", idle_after_s=0.1)
    origins = {ctrl.step().command for _ in range(4)} - {None}
    assert origins == set()  # nothing before idle_after_s
    for _ in range(400):  # longer than one breathing cycle: it loops
        ctrl.step()
    res = ctrl.step()
    assert res.command is not None and res.command.origin == "idle" and not res.finished
    ctrl.submit("g", "happy_nod")
    assert ctrl.step().command.origin == "llm"


def test_teleop_joint_command_is_clamped_and_velocity_limited(lib):
    ctrl = AnimationController(lib, rate_hz=50)
    ctrl.submit("g", "scan_room")
    ctrl.step()
    assert ctrl.teleop_pose({"head_yaw": 9.0, "left_antenna": -9.0}).accepted
    cmds, outcomes = run(ctrl)
    assert outcomes[0].status == "aborted"
    assert {c.origin for c in cmds} == {"teleop"}
    final = dict(zip(JOINTS, cmds[-1].positions, strict=True))
    assert final["head_yaw"] == lib.limits["head_yaw"].upper
    assert final["left_antenna"] == lib.limits["left_antenna"].lower
    assert not ctrl.teleop_pose({"tail": 1.0}).accepted


joint_values = st.floats(-4.0, 4.0, allow_nan=False)
keyframes = st.lists(
    st.fixed_dictionaries(
        {"duration": st.floats(0.02, 1.0)},
        optional={j: joint_values for j in JOINTS},
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=60, deadline=None)
@given(
    frames=keyframes,
    speed=st.floats(0.01, 5.0),
    interp=st.sampled_from(["minjerk", "linear"]),
    rate=st.sampled_from([50.0, 100.0]),
)
def test_limits_never_exceeded(lib, frames, speed, interp, rate):
    data = yaml.safe_load((config_dir() / "animations.yaml").read_text())
    data["animations"] = {"random": {"interpolation": interp, "keyframes": frames}}
    rlib = AnimationLibrary.from_dict(data)
    ctrl = AnimationController(rlib, rate_hz=rate)
    assert ctrl.submit("g", "random", speed).accepted
    prev = ctrl.pose
    cmds, outcomes = run(ctrl, max_steps=20000)
    assert outcomes[-1].status == "succeeded"
    for cmd in cmds:
        for j, p, q in zip(JOINTS, prev, cmd.positions, strict=True):
            lim = rlib.limits[j]
            assert lim.lower <= q <= lim.upper
            assert abs(q - p) <= lim.max_velocity / rate + 1e-9
        prev = cmd.positions
    # the end pose is the last keyframe (clamped)
    want = Trajectory(rlib.animations["random"], (0.0,) * len(JOINTS)).poses[-1]
    assert all(
        math.isclose(a, rlib.limits[j].clamp(b), abs_tol=1e-6)
        for j, a, b in zip(JOINTS, cmds[-1].positions, want, strict=True)
    )


def test_robot_backends():
    sim = make_backend("sim")
    assert isinstance(sim, SimRobot) and sim.read_state() == (0.0,) * len(JOINTS)
    sim.send([0.1] * len(JOINTS))
    assert sim.read_state() == (0.1,) * len(JOINTS)
    # nothing listens on a port just freed: a clear refusal, within the connect timeout
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    robot = make_backend("reachy_mini", host="127.0.0.1", port=port, connect_timeout_s=1.0)
    with pytest.raises(
        RobotUnavailableError, match=f"cannot connect to the Reachy Mini daemon at 127.0.0.1:{port}"
    ):
        robot.load()
    with pytest.raises(RobotUnavailableError, match="unknown robot backend"):
        make_backend("nao")

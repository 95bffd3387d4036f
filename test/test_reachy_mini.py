"""animation_node driving Pollen's Reachy Mini: Pollen's own daemon simulating the robot in MuJoCo
(``reachy-mini-daemon --sim``, its MJCF and its real HTTP/websocket API on loopback), Pollen's SDK
in the node's process, the node in its own process, over real DDS.

What is checked, each against what the daemon measures:
- every shipped animation moves the model as its keyframes say;
- a teleop joint command reaches the model, and the override holds llm goals off;
- poses beyond Reachy Mini (its kinematic limits, NaN) are refused before they reach the SDK;
- a daemon killed mid-goal aborts the goal with the reason and turns /diagnostics ERROR; once a
  daemon is back on the same port the node reconnects and the next goal moves the robot.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
from sensor_msgs.msg import JointState

from bolt_agent.core.motion.animation import JOINTS, AnimationLibrary
from bolt_agent.core.motion.reachy_daemon import ReachyDaemon, ReachyRecorder
from support.animation_dds import AnimationRig, start_animation_node
from support.diagnostics import Diagnostics
from support.launch import assert_nothing_survives
from support.remote_server import free_port
from support.ros_helpers import ros_node, spin_until

pytestmark = pytest.mark.slow

#: how far the simulated robot may be from a keyframe when the keyframe's time is up: the
#: steady error the daemon shows for a held pose (measured below) plus this tracking allowance
TRACKING_RAD = 0.08
LIB = AnimationLibrary.load()


@pytest.fixture
def daemon(tmp_path: Path):
    d = ReachyDaemon(free_port(), log_path=tmp_path / "reachy-daemon.log")
    try:
        yield d.start()
    finally:
        d.stop()
    assert not d.running


def start_node(node_process, ns: str, port: int, **params):
    return start_animation_node(
        node_process,
        ns,
        backend="reachy_mini",
        reachy_host="127.0.0.1",
        reachy_port=port,
        reconnect_max_s=1.0,
        diagnostics_period_s=0.2,
        **params,
    )


def measured(state: dict) -> dict[str, float]:
    """The daemon's own report, in our joint names (its antennas come as [right, left])."""
    head = state["head_pose"]
    right, left = state["antennas_position"]
    return {
        "head_x": head["x"],
        "head_y": head["y"],
        "head_z": head["z"],
        "head_roll": head["roll"],
        "head_pitch": head["pitch"],
        "head_yaw": head["yaw"],
        "body_yaw": state["body_yaw"],
        "left_antenna": left,
        "right_antenna": right,
    }


def as_dict(msg: JointState) -> dict[str, float]:
    return dict(zip(msg.name, msg.position, strict=True))


def keyframe_poses(name: str) -> list[tuple[float, dict[str, float]]]:
    """(time from the start at speed 1, the pose every joint should have then) per keyframe."""
    pose, t, out = dict(zip(JOINTS, LIB.neutral(), strict=True)), 0.0, []
    for kf in LIB.animations[name].keyframes:
        pose.update(kf.positions)
        t += kf.duration
        out.append((t, dict(pose)))
    return out


def settle_error(rig: AnimationRig, daemon: ReachyDaemon, target: dict[str, float]) -> float:
    """The daemon's steady error for a held pose: the tolerance's floor. The robot starts from
    its sleeping pose, so the held pose is first waited for (longer on a loaded machine)."""
    rig.joint_pub.publish(JointState(name=list(target), position=list(target.values())))

    def error() -> float:
        got = measured(daemon.state())
        return max(abs(got[j] - v) for j, v in target.items())

    spin_until(rig.executor, lambda: error() < 0.05, 20, "the robot at the held pose")
    rig.spin_for_states(25)
    return error()


def tracking_lag(commands: list, states: list) -> float:
    """How far the measured poses trail the commanded ones (s): the shift, in 20 ms steps up to
    0.3 s, that makes the two traces closest."""

    def error(shift: float) -> float:
        total, n, i = 0.0, 0, 0
        for t, m in states:
            while i + 1 < len(commands) and commands[i + 1][0] <= t - shift:
                i += 1
            if commands[i][0] <= t - shift:
                total += max(abs(a - b) for a, b in zip(m.position, commands[i][1].position))
                n += 1
        return total / n if n else math.inf

    return min((s * 0.02 for s in range(16)), key=error)


def test_every_animation_moves_the_simulated_robot_as_its_keyframes_say(
    node_process, unique_ns, daemon
):
    proc = start_node(node_process, unique_ns, daemon.port)
    with ros_node("reachy_probe") as (node, ex):
        rig = AnimationRig(node, ex, unique_ns)
        try:
            rig.wait_ready(60)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{proc.log()}") from None
        floor = settle_error(rig, daemon, dict(zip(JOINTS, LIB.neutral(), strict=True)))
        tolerance = floor + TRACKING_RAD
        assert floor < 0.05, f"the daemon holds the neutral pose {floor:.3f} rad off"
        worst: dict[str, float] = {}
        lags: dict[str, float] = {}
        for name in sorted(LIB.animations):
            rig.spin_for_states(5)
            sent = time.time()
            handle = rig.send(name)
            assert handle.accepted, name
            result = rig.result(handle).result
            assert result.success, f"{name}: {result.message}"
            rig.spin_for_states(5)  # the states measured at and just after its last keyframe
            # the motion starts with its first command; keyframe times count from there
            t0 = next(t for t, m in rig.rx.commands if t >= sent and m.origin == "llm")
            states = [(t, m) for t, m in rig.rx.states if t >= t0]
            mine = [(t, m) for t, m in rig.rx.commands if t >= t0 and m.origin == "llm"]
            lags[name] = lag = tracking_lag(mine, states) + 0.04  # + both sides' 20 ms period
            errors = []
            for t_kf, pose in keyframe_poses(name):
                # the measured pose follows the command by the daemon's latency (measured)
                window = [m for t, m in states if t0 + t_kf <= t <= t0 + t_kf + lag]
                assert window, f"{name}: no measured state after keyframe time {t_kf:.2f} s"
                errors.append(
                    min(
                        max(abs(as_dict(m)[j] - LIB.limits[j].clamp(v)) for j, v in pose.items())
                        for m in window
                    )
                )
            worst[name] = max(errors)
            assert worst[name] <= tolerance, (name, errors, tolerance)
            final = measured(daemon.state())  # the daemon's own word on where the robot is
            last = keyframe_poses(name)[-1][1]
            assert all(abs(final[j] - v) <= tolerance for j, v in last.items()), (name, final)
        print(f"FIGURE reachy_keyframe_error_rad={worst} floor={floor:.3f} lag_s={lags}")


def test_teleop_reaches_the_model_and_the_override_holds(node_process, unique_ns, daemon):
    start_node(node_process, unique_ns, daemon.port)
    with ros_node("reachy_probe") as (node, ex):
        rig = AnimationRig(node, ex, unique_ns)
        rig.wait_ready(60)
        rig.set_override(True)
        rig.joint_pub.publish(
            JointState(name=["head_yaw", "head_pitch", "right_antenna"], position=[0.5, -0.2, 1.0])
        )

        def there() -> bool:
            got = measured(daemon.state())
            return (
                abs(got["head_yaw"] - 0.5) < 0.05
                and abs(got["head_pitch"] + 0.2) < 0.05
                and abs(got["right_antenna"] - 1.0) < 0.05
            )

        spin_until(ex, there, 10, "the simulated head at the operator's pose")
        refused = rig.send("happy_nod")  # an llm goal while the operator holds the robot
        assert not refused.accepted
        rig.spin_for_states(25)
        assert there()  # the override holds: nothing moved it away


def test_poses_beyond_reachy_mini_are_refused_before_they_reach_it(node_process, unique_ns, daemon):
    start_node(node_process, unique_ns, daemon.port)
    with ros_node("reachy_probe") as (node, ex):
        rig = AnimationRig(node, ex, unique_ns)
        rig.wait_ready(60)
        before = measured(daemon.state())
        for names, values, why in (
            (["head_yaw", "body_yaw"], [1.2, -0.1], "65 degrees"),
            (["head_pitch"], [math.nan], "non-finite"),
            (["head_roll", "head_pitch"], [0.55, 0.55], "tilt"),
        ):
            n = len(rig.rx.events)
            rig.joint_pub.publish(JointState(name=names, position=values))

            def refusals(n=n) -> list:  # (the connection's own event may come first)
                return [e for e in rig.rx.events[n:] if e.event == "rejected"]

            spin_until(ex, refusals, 10, "the refusal")
            assert why in refusals()[0].reason, refusals()
        rig.spin_for_states(25)
        after = measured(daemon.state())
        assert all(abs(after[j] - before[j]) < 0.02 for j in JOINTS), (before, after)


def test_a_daemon_killed_mid_goal_aborts_it_and_the_node_recovers(
    node_process, unique_ns, daemon, tmp_path
):
    proc = start_node(node_process, unique_ns, daemon.port)
    with ros_node("reachy_probe") as (node, ex):
        rig = AnimationRig(node, ex, unique_ns)
        diag = Diagnostics(node, unique_ns)
        rig.wait_ready(60)
        diag.wait(ex, "animation_node", lambda lvl, msg, v: v["robot_connected"] == "true", 20)
        handle = rig.send("scan_room")  # 4.4 s long
        assert handle.accepted
        rig.spin_for_states(25)
        daemon.kill()
        result = rig.result(handle, timeout=15).result
        assert not result.success and "robot unavailable" in result.message, result.message
        _level, message, values = diag.wait(
            ex, "animation_node", lambda lvl, msg, v: lvl == "ERROR", 15, (proc,)
        )
        assert "robot unavailable" in message and values["robot_connected"] == "false"
        refused = rig.send("happy_nod")
        assert not refused.accepted  # while the robot is away

        again = ReachyDaemon(daemon.port, log_path=tmp_path / "reachy-daemon-2.log").start()
        try:
            diag.wait(ex, "animation_node", lambda lvl, msg, v: v["robot_connected"] == "true", 30)
            handle = rig.send("curious_tilt")
            assert handle.accepted
            rig.spin_for_states(30)  # 0.6 s: the first keyframe is done
            assert measured(again.state())["head_roll"] > 0.2  # the new daemon's robot moved
            assert rig.result(handle).result.success
            assert int(diag.get("animation_node")[2]["robot_losses"]) == 1
        finally:
            again.stop()


def test_launch_starts_the_simulated_robot_and_stops_it_with_everything_else(launch, unique_ns):
    """`robot:=reachy_mini_sim`: Pollen's daemon starts beside animation_node on loopback, the
    node connects to it, and Ctrl-C to the launch leaves no process behind (the daemon's
    MuJoCo process group included)."""
    port = free_port()
    stack = launch(
        "robot:=reachy_mini_sim", f"reachy_port:={port}", f"namespace:={unique_ns}",
        "llm:=false", "asr:=false", "tts:=false", "perception:=false",
    )  # fmt: skip
    with ros_node("reachy_probe") as (node, ex):
        diag = Diagnostics(node, unique_ns)
        try:
            diag.wait(ex, "animation_node", lambda lvl, msg, v: v["robot_connected"] == "true", 90)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{stack.log()}") from None
        sim = ReachyDaemon(port)
        assert sim.ready()  # answering on 127.0.0.1:port
        stack.children()
    assert stack.stop() == 0, stack.log()
    assert_nothing_survives(stack)
    assert not ReachyDaemon(port).ready()


def test_the_recorder_renders_the_poses_the_robot_took(node_process, unique_ns, daemon, tmp_path):
    """`--record`: Pollen's model rendered by MuJoCo in the poses the daemon measured: frames
    taken while the robot nods differ from one another."""
    from PIL import Image

    gif = tmp_path / "nod.gif"
    start_node(node_process, unique_ns, daemon.port)
    with ros_node("reachy_probe") as (node, ex):
        rig = AnimationRig(node, ex, unique_ns)
        rig.wait_ready(60)
        recorder = ReachyRecorder(daemon.port, gif, fps=8).start()
        handle = rig.send("wave_antenna")
        assert handle.accepted and rig.result(handle).result.success
        said = recorder.finish(timeout=120)
    assert "wrote" in said, said
    with Image.open(gif) as im:
        assert im.n_frames >= 8 and im.size == (320, 240)
        frames = []
        for k in range(im.n_frames):
            im.seek(k)
            frames.append(im.convert("L").tobytes())
    assert len(set(frames)) >= 4  # the antennas moved between frames

"""animation_node over real DDS (node in its own process): trajectory, speed, cancel, preempt,
rejection with a reason."""

from __future__ import annotations

import itertools
import statistics

import pytest
import yaml
from action_msgs.msg import GoalStatus

from bolt_agent.core.motion.animation import JOINTS, AnimationLibrary
from bolt_agent.core.motion.animation_control import AnimationController
from bolt_agent.core.paths import config_dir
from bolt_agent_interfaces.msg import AnimationEvent
from support.animation_dds import AnimationRig, start_animation_node
from support.ros_helpers import ros_node, spin_until

RATE = 50.0


@pytest.fixture
def rig(node_process, unique_ns):
    proc = start_animation_node(node_process, unique_ns, rate_hz=RATE)
    with ros_node("anim_test") as (node, executor):
        rig = AnimationRig(node, executor, unique_ns)
        rig.wait_ready()
        rig.proc = proc
        yield rig
    assert proc.alive(), proc.log()


def expected_commands(name: str, speed: float = 1.0) -> list[tuple[float, ...]]:
    ctrl = AnimationController(AnimationLibrary.load(), rate_hz=RATE)
    ctrl.submit("g", name, speed)
    out = []
    while (res := ctrl.step()).command is not None:
        out.append(res.command.positions)
    return out


@pytest.mark.parametrize("name", ["happy_nod", "curious_tilt"])
def test_goal_trajectory_matches_yaml_keyframes(rig, name):
    feedback = []
    handle = rig.send(name, feedback=lambda fb: feedback.append(fb.feedback.progress))
    assert handle.accepted
    result = rig.result(handle)
    assert result.status == GoalStatus.STATUS_SUCCEEDED and result.result.success
    spin_until(rig.executor, lambda: len(rig.rx.commands) >= len(expected_commands(name)), 5.0)
    cmds = [m for _, m in rig.rx.commands]
    assert {m.origin for m in cmds} == {"llm"} and list(cmds[0].name) == list(JOINTS)
    got = [tuple(m.position) for m in cmds]
    want = expected_commands(name)
    assert len(got) == len(want)
    assert all(g == pytest.approx(w, abs=1e-6) for g, w in zip(got, want, strict=True))
    # keyframes from the YAML file itself: the command at each keyframe time is that pose
    raw = yaml.safe_load((config_dir() / "animations.yaml").read_text())["animations"][name]
    pose, t = dict.fromkeys(JOINTS, 0.0), 0.0
    for kf in raw["keyframes"]:
        t += kf["duration"]
        pose.update({k: v for k, v in kf.items() if k in JOINTS})
        sample = dict(zip(JOINTS, got[round(t * RATE) - 1], strict=True))
        assert sample == pytest.approx(pose, abs=0.02), (name, t)
    # the control period, from the node's own stamps
    stamps = [m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for m in cmds]
    periods = [b - a for a, b in itertools.pairwise(stamps)]
    assert statistics.median(periods) == pytest.approx(1 / RATE, abs=0.004)
    assert feedback and all(0 <= p <= 1 for p in feedback) and feedback == sorted(feedback)


def test_speed_scales_time(rig):
    handle = rig.send("curious_tilt", speed=1.6)
    assert rig.result(handle).result.success
    n = len(expected_commands("curious_tilt", 1.6))
    spin_until(rig.executor, lambda: len(rig.rx.commands) >= n, 5.0)
    assert len(rig.rx.commands) == n
    assert n == pytest.approx(2.0 * RATE / 1.6, abs=3)


def test_cancel_stops_within_one_control_period(rig):
    handle = rig.send("scan_room")
    spin_until(rig.executor, lambda: len(rig.rx.commands) >= 40, 10.0, "motion")
    cancel = handle.cancel_goal_async()
    spin_until(rig.executor, cancel.done, 5.0, "cancel response")
    assert cancel.result().goals_canceling
    at_cancel = len(rig.rx.commands)
    result = rig.result(handle)
    assert result.status == GoalStatus.STATUS_CANCELED and not result.result.success
    rig.spin_for_states(10)
    # at most the command already on the wire when the cancel was answered, then nothing
    assert len(rig.rx.commands) - at_cancel <= 1
    last = [tuple(m.position) for _, m in rig.rx.states[-8:]]
    assert len(set(last)) == 1  # the robot stands still
    assert max(abs(v) for v in last[0]) > 0.05  # it stopped mid-motion, not at the end


def test_new_goal_preempts_the_running_one(rig):
    first = rig.send("scan_room")
    spin_until(rig.executor, lambda: len(rig.rx.commands) >= 20, 10.0, "motion")
    second = rig.send("happy_nod")
    assert second.accepted
    r1, r2 = rig.result(first), rig.result(second)
    assert r1.status == GoalStatus.STATUS_ABORTED and "preempted" in r1.result.message
    assert r2.status == GoalStatus.STATUS_SUCCEEDED


def test_unknown_animation_is_rejected_with_a_reason(rig):
    handle = rig.send("moonwalk")
    assert not handle.accepted
    spin_until(rig.executor, lambda: any(e.event == "rejected" for e in rig.rx.events), 5.0)
    event = next(e for e in rig.rx.events if e.event == AnimationEvent.EVENT_REJECTED)
    assert event.name == "moonwalk" and "unknown animation 'moonwalk'" in event.reason
    assert event.source == "llm" and event.header.stamp.sec > 0
    assert "unknown animation 'moonwalk'" in rig.proc.log()


def test_queue_policy_runs_goals_in_order_and_cancels_queued_ones(node_process, unique_ns):
    start_animation_node(node_process, unique_ns, rate_hz=RATE, policy="queue")
    with ros_node("anim_test") as (node, executor):
        rig = AnimationRig(node, executor, unique_ns)
        rig.wait_ready()
        first, second, third = (
            rig.send("happy_nod"),
            rig.send("wave_antenna"),
            rig.send("scan_room"),
        )
        assert first.accepted and second.accepted and third.accepted
        cancel = third.cancel_goal_async()  # still queued: ends CANCELED without moving
        spin_until(executor, cancel.done, 5.0, "cancel response")
        results = [rig.result(h) for h in (first, second, third)]
        n_first = len(expected_commands("happy_nod"))
        n_second = len(expected_commands("wave_antenna"))
        spin_until(executor, lambda: len(rig.rx.commands) >= n_first + n_second, 5.0)
        rig.spin_for_states(5)
    assert [r.status for r in results] == [
        GoalStatus.STATUS_SUCCEEDED,
        GoalStatus.STATUS_SUCCEEDED,
        GoalStatus.STATUS_CANCELED,
    ]
    assert len(rig.rx.commands) == n_first + n_second  # one after the other, nothing of the third

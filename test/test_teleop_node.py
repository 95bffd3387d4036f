"""Teleop over real DDS against animation_node in its own process: override race, latched state,
direct joint commands, named animations."""

from __future__ import annotations

import random
import time

import pytest
from action_msgs.msg import GoalStatus
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, String

from bolt_agent.core.motion.animation import JOINTS, AnimationLibrary
from support.animation_dds import LATCHED, AnimationRig, start_animation_node
from support.ros_helpers import ros_node, spin_until


@pytest.fixture
def rig(node_process, unique_ns):
    proc = start_animation_node(node_process, unique_ns, rate_hz=50.0)
    with ros_node("teleop_test") as (node, executor):
        rig = AnimationRig(node, executor, unique_ns)
        rig.wait_ready()
        rig.ns, rig.proc = unique_ns, proc
        yield rig
    assert proc.alive(), proc.log()


def stamp(msg: JointState) -> float:
    return msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9


def test_override_race_across_processes(rig):
    """Random interleavings of llm goals and override toggles: no llm-originated command is
    stamped between the node's override-on acknowledgement and the override-off request."""
    rng = random.Random(20240601)
    held: list[list[float]] = []  # [ack of on, request of off]
    futures, during_override = [], []
    override = False
    for _ in range(100):
        op = rng.random()
        if op < 0.45:
            goal = rig.client.send_goal_async(
                _goal(
                    rng.choice(["happy_nod", "scan_room", "wave_antenna"]), rng.choice(["", "llm"])
                )
            )
            futures.append(goal)
            if override:
                during_override.append(goal)
        elif op < 0.7:
            if not override:
                held.append([rig.set_override(True), float("inf")])
            else:
                # the goals sent during this override are answered before it ends (a goal
                # request and the off message travel apart: the node could see the off first)
                spin_until(
                    rig.executor,
                    lambda: all(f.done() for f in during_override),
                    20.0,
                    "answers to the goals sent during the override",
                )
                held[-1][1] = time.time()
                rig.set_override(False)
            override = not override
        else:
            rig.spin_for_states(rng.randint(1, 15))
    if override:
        held[-1][1] = time.time()
        rig.set_override(False)
    spin_until(rig.executor, lambda: all(f.done() for f in futures), 20.0, "goal responses")
    assert len(held) >= 5 and len(during_override) >= 5
    # every goal sent during an override (and answered before its end) was rejected
    assert [f.result().accepted for f in during_override] == [False] * len(during_override)
    llm = [stamp(m) for _, m in rig.rx.commands if m.origin == "llm"]
    assert len(llm) > 20  # llm motion did run between the override windows
    violations = [t for t in llm if any(on <= t <= off for on, off in held)]
    assert violations == []
    rejected = [e for e in rig.rx.events if e.event == "rejected"]
    assert any("override" in e.reason for e in rejected)


def test_override_cancels_running_llm_goal_and_is_latched(rig):
    handle = rig.send("scan_room")
    spin_until(rig.executor, lambda: len(rig.rx.commands) >= 10, 10.0, "llm motion")
    rig.set_override(True)
    result = rig.result(handle)
    assert result.status == GoalStatus.STATUS_ABORTED
    assert result.result.message == "canceled by teleop override"
    assert not rig.send("happy_nod", source="llm").accepted
    teleop_goal = rig.send("happy_nod", source="teleop")  # teleop goals still play
    assert teleop_goal.accepted and rig.result(teleop_goal).result.success
    late: list[bool] = []  # a late joiner gets the latched state
    rig.node.create_subscription(
        Bool, f"{rig.ns}/teleop/override_state", lambda m: late.append(m.data), LATCHED
    )
    spin_until(rig.executor, lambda: late == [True], 10.0, "latched override state")
    # a latched (transient-local) operator publisher works as well as a volatile one
    latched_pub = rig.node.create_publisher(Bool, f"{rig.ns}/teleop/override", LATCHED)
    latched_pub.publish(Bool(data=False))
    spin_until(rig.executor, lambda: late[-1] is False, 10.0, "override off")
    assert rig.send("happy_nod").accepted


def test_teleop_joint_command_drives_the_robot_clamped(rig):
    lib = AnimationLibrary.load()
    rig.joint_pub.publish(JointState(name=["head_yaw", "left_antenna"], position=[5.0, -0.5]))
    yaw = JOINTS.index("head_yaw")
    spin_until(
        rig.executor,
        lambda: any(m.position[yaw] == lib.limits["head_yaw"].upper for _, m in rig.rx.commands),
        10.0,
        "the yaw limit",
    )
    cmds = [m for _, m in rig.rx.commands]
    assert {m.origin for m in cmds} == {"teleop"}
    prev = [0.0] * len(JOINTS)
    for m in cmds:
        for j, p, q in zip(JOINTS, prev, m.position, strict=True):
            lim = lib.limits[j]
            assert lim.lower <= q <= lim.upper and abs(q - p) <= lim.max_velocity / 50 + 1e-9
        prev = list(m.position)
    rig.spin_for_states(5)
    state = dict(zip(JOINTS, rig.rx.states[-1][1].position, strict=True))
    assert state["head_yaw"] == 1.2 and state["left_antenna"] == pytest.approx(-0.5)


def test_teleop_animation_wins_over_llm(rig):
    handle = rig.send("scan_room")
    spin_until(rig.executor, lambda: len(rig.rx.commands) >= 10, 10.0, "llm motion")
    rig.anim_pub.publish(String(data="wave_antenna"))
    result = rig.result(handle)
    assert (
        result.status == GoalStatus.STATUS_ABORTED
        and "preempted by teleop" in result.result.message
    )
    spin_until(rig.executor, lambda: rig.rx.origins()[-1] == "teleop", 5.0, "teleop motion")
    assert not rig.send("happy_nod").accepted  # an llm goal does not preempt teleop motion
    rig.anim_pub.publish(String(data="moonwalk"))
    spin_until(
        rig.executor,
        lambda: any("moonwalk" in e.reason for e in rig.rx.events),
        5.0,
        "the rejection event",
    )
    origins = rig.rx.origins()
    first_teleop = origins.index("teleop")
    assert set(origins[first_teleop:]) == {"teleop"}


def _goal(name: str, source: str):
    from bolt_agent_interfaces.action import PlayAnimation

    return PlayAnimation.Goal(name=name, source=source)

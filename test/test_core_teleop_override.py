"""Teleop override, core level: randomized interleavings, deterministic (the step is the clock)."""

from __future__ import annotations

import random

import pytest

from bolt_agent.core.motion.animation import AnimationLibrary
from bolt_agent.core.motion.animation_control import AnimationController

NAMES = ["curious_tilt", "happy_nod", "scan_room", "wave_antenna", "breathing"]


@pytest.fixture(scope="module")
def lib() -> AnimationLibrary:
    return AnimationLibrary.load()


@pytest.mark.parametrize("policy", ["preempt", "queue", "reject"])
def test_no_llm_command_while_override_in_randomized_interleavings(lib, policy):
    """250 seeds per policy, each a random interleaving of goals, toggles, cancels and steps."""
    violations, llm_emitted, rejected_held = 0, 0, 0
    for seed in range(250):
        rng = random.Random(f"{policy}-{seed}")
        ctrl = AnimationController(lib, rate_hz=50, policy=policy, idle_animation="breathing",
                                   idle_after_s=rng.choice([0.0, 0.1]))  # fmt: skip
        override, goals = False, 0
        for _ in range(rng.randint(50, 300)):
            op = rng.random()
            if op < 0.15:
                source = rng.choice(["", "llm", "llm", "teleop", "idle"])
                d = ctrl.submit(f"g{goals}", rng.choice(NAMES), rng.uniform(0, 3), source)
                goals += 1
                if override and source in ("", "llm"):
                    assert not d.accepted and "override" in d.reason
                    rejected_held += 1
            elif op < 0.22:
                override = not override
                ctrl.set_override(override)
            elif op < 0.25:
                ctrl.cancel(f"g{rng.randrange(goals + 1)}")
            elif op < 0.27:
                ctrl.teleop_pose({"head_yaw": rng.uniform(-1, 1)})
            elif op < 0.29:
                ctrl.play_teleop(rng.choice(NAMES))
            else:
                res = ctrl.step()
                if res.command is not None and res.command.origin == "llm":
                    llm_emitted += 1
                    violations += override
                if override:
                    running = ctrl.active
                    assert running is None or running[2] != "llm"
    assert violations == 0
    assert llm_emitted > 1000 and rejected_held > 100  # the interleavings exercised both sides


def test_override_aborts_running_and_queued_llm_goals(lib):
    ctrl = AnimationController(lib, policy="queue")
    ctrl.submit("a", "scan_room")
    ctrl.submit("b", "happy_nod")
    ctrl.submit("t", "wave_antenna", source="teleop")
    first = ctrl.step()  # the teleop goal preempted the running llm goal 'a'; 'b' is queued
    assert [(o.goal_id, o.status) for o in first.finished] == [("a", "aborted")]
    ctrl.set_override(True)
    res = ctrl.step()
    status = {o.goal_id: (o.status, o.message) for o in res.finished}
    assert status == {"b": ("aborted", "canceled by teleop override")}
    assert res.command.origin == "teleop"  # the teleop goal is untouched
    ctrl.set_override(False)
    assert ctrl.submit("c", "happy_nod", source="llm").accepted

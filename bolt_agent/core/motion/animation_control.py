"""The animation executor: one motion at a time, stepped at a fixed rate.

``AnimationController`` is stepped at a fixed rate (the step *is* its clock, so tests drive it
synchronously). One motion runs at a time; ``policy`` decides what a new goal does to a running
one (preempt | queue | reject). Origins rank ``teleop`` > ``llm`` > ``idle``: a lower-ranked goal
never preempts a higher-ranked motion. While the teleop override is on, llm goals are rejected,
running/queued ones are aborted, and — checked again at every step under the same lock — no
llm-originated command is ever emitted.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import count
from typing import NamedTuple

from bolt_agent.core.motion.animation import (
    AnimationLibrary,
    Trajectory,
    limit_step,
    normalise_speed,
)

ORIGINS = ("llm", "teleop", "idle")
RANK = {"idle": 0, "llm": 1, "teleop": 2}
POLICIES = ("preempt", "queue", "reject")


class Decision(NamedTuple):
    accepted: bool
    reason: str = ""


@dataclass(frozen=True)
class Command:
    positions: tuple[float, ...]
    origin: str  # llm | teleop | idle
    goal_id: str | None


@dataclass(frozen=True)
class Outcome:
    goal_id: str
    status: str  # succeeded | canceled | aborted
    message: str


@dataclass
class StepResult:
    command: Command | None = None
    progress: dict[str, float] = field(default_factory=dict)
    finished: list[Outcome] = field(default_factory=list)
    started: list[str] = field(default_factory=list)  # goals whose motion began this step


@dataclass
class _Motion:
    goal_id: str
    name: str
    origin: str
    speed: float
    seq: int
    trajectory: Trajectory | None = None
    t: float = 0.0


class AnimationController:
    """Fixed-rate motion executor; thread-safe (one lock around every public call)."""

    def __init__(
        self,
        library: AnimationLibrary,
        rate_hz: float = 50.0,
        policy: str = "preempt",
        idle_animation: str = "",
        idle_after_s: float = 3.0,
        start_pose: tuple[float, ...] | None = None,
        problem: Callable[[tuple[float, ...]], str | None] | None = None,
    ):
        if policy not in POLICIES:
            raise ValueError(f"policy {policy!r} not in {POLICIES}")
        if idle_animation and idle_animation not in library.animations:
            raise ValueError(f"idle animation {idle_animation!r} is not in the library")
        if rate_hz <= 0:
            raise ValueError("rate_hz must be > 0")
        self.lib, self.dt, self.policy = library, 1.0 / rate_hz, policy
        self.idle_animation, self._idle_after = (
            idle_animation,
            max(0, round(idle_after_s * rate_hz)),
        )
        self.pose = library.clamp_pose(start_pose or library.neutral())
        self.override = False
        self._lock = threading.RLock()
        self._active: _Motion | None = None
        self._queue: list[_Motion] = []
        self._teleop_target: tuple[float, ...] | None = None
        self._outcomes: list[Outcome] = []
        self._quiet_steps = 0
        self._seq = count()
        #: why a pose is beyond the robot (cross-joint limits the per-joint ranges miss)
        self.problem = problem or (lambda _pose: None)
        #: animations the robot cannot play, with why (refused as goals, never started)
        self.refused = {
            name: why
            for name, anim in library.animations.items()
            if (why := self._keyframes_problem(anim)) is not None
        }
        if idle_animation in self.refused:
            raise ValueError(f"idle animation {idle_animation!r}: {self.refused[idle_animation]}")
        self.robot_reason = ""  # why the robot is unavailable ('' while it is there)

    def _keyframes_problem(self, anim) -> str | None:
        """The first keyframe pose of ``anim`` the robot cannot take (from the neutral pose;
        interpolation between two poses within the limits stays within them)."""
        pose = dict(zip(self.lib.joints, self.lib.neutral(), strict=True))
        for i, kf in enumerate(anim.keyframes):
            pose.update(kf.positions)
            why = self.problem(self.lib.clamp_pose(tuple(pose[j] for j in self.lib.joints)))
            if why is not None:
                return f"keyframe {i + 1}: {why}"
        return None

    # -- requests -------------------------------------------------------------------------------
    def check(self, name: str, speed: float = 1.0, source: str = "") -> Decision:
        """Would a goal be accepted now? (no side effects)"""
        with self._lock:
            origin = source or "llm"
            if origin not in ORIGINS:
                return Decision(False, f"unknown source {source!r} (expected one of {ORIGINS})")
            if name not in self.lib.animations:
                known = ", ".join(sorted(self.lib.animations))
                return Decision(False, f"unknown animation {name!r} (known: {known})")
            if not math.isfinite(speed) or speed <= 0:  # NaN would pass every comparison
                return Decision(False, f"speed must be a finite number > 0, got {speed}")
            if name in self.refused:
                return Decision(False, f"{name!r} is beyond the robot: {self.refused[name]}")
            if self.robot_reason:
                return Decision(False, f"robot unavailable: {self.robot_reason}")
            if origin == "llm" and self.override:
                return Decision(False, "teleop override is active: llm motion goals are held")
            running = self._running_rank()
            if running is not None and RANK[origin] <= running and self.policy == "reject":
                return Decision(False, "busy: another animation is running (policy=reject)")
            if running is not None and RANK[origin] < running and self.policy == "preempt":
                return Decision(False, "busy: a higher-priority (teleop) animation is running")
            return Decision(True)

    def submit(self, goal_id: str, name: str, speed: float = 1.0, source: str = "") -> Decision:
        """Start (or queue) a goal; preempted goals end as aborted outcomes."""
        with self._lock:
            decision = self.check(name, speed, source)
            if not decision.accepted:
                return decision
            origin = source or "llm"
            motion = _Motion(goal_id, name, origin, normalise_speed(speed), next(self._seq))
            running = self._running_rank()
            if running is None or RANK[origin] > running or self.policy == "preempt":
                if self._active is not None:
                    self._finish(self._active, "aborted", f"preempted by {origin} goal {name!r}")
                self._teleop_target = None
                self._active = motion
            else:  # queue: higher origins first, then FIFO
                self._queue.append(motion)
                self._queue.sort(key=lambda m: (-RANK[m.origin], m.seq))
            return decision

    def play_teleop(self, name: str, speed: float = 1.0) -> Decision:
        """A named animation from the operator: always wins (preempts anything running)."""
        return self.submit(f"teleop-{next(self._seq)}", name, speed, "teleop")

    def teleop_pose(self, positions: dict[str, float]) -> Decision:
        """Drive joints directly (clamped, velocity-limited); stops any running animation."""
        with self._lock:
            unknown = [j for j in positions if j not in self.lib.joints]
            if unknown:
                return Decision(False, f"unknown joints {unknown} (known: {self.lib.joints})")
            bad = {j: v for j, v in positions.items() if not math.isfinite(v)}
            if bad:  # a NaN would be "clamped" to a joint's lower limit: a jump, not a stop
                return Decision(False, f"non-finite joint positions {bad}")
            base = self._teleop_target or self.pose
            target = tuple(positions.get(j, b) for j, b in zip(self.lib.joints, base, strict=True))
            if self.robot_reason:
                return Decision(False, f"robot unavailable: {self.robot_reason}")
            why = self.problem(self.lib.clamp_pose(target))
            if why is not None:
                return Decision(False, why)
            if self._active is not None:
                self._finish(self._active, "aborted", "preempted by a teleop joint command")
                self._active = None
            self._teleop_target = self.lib.clamp_pose(target)
            return Decision(True)

    def cancel(self, goal_id: str) -> bool:
        """Stop a goal now: the next step emits nothing for it. False if unknown/finished."""
        with self._lock:
            if self._active is not None and self._active.goal_id == goal_id:
                self._finish(self._active, "canceled", "canceled")
                self._active = None
                return True
            for m in self._queue:
                if m.goal_id == goal_id:
                    self._queue.remove(m)
                    self._finish(m, "canceled", "canceled before it started")
                    return True
            return False

    def set_override(self, on: bool) -> None:
        """Teleop override: on → abort running/queued llm goals, hold new ones (and idle)."""
        with self._lock:
            self.override = bool(on)
            if not on:
                return
            if self._active is not None and self._active.origin in ("llm", "idle"):
                self._finish(self._active, "aborted", "canceled by teleop override")
                self._active = None
            for m in [m for m in self._queue if m.origin in ("llm", "idle")]:
                self._queue.remove(m)
                self._finish(m, "aborted", "canceled by teleop override")

    def robot_lost(self, reason: str) -> None:
        """The robot went away: every goal running or queued ends aborted with the reason, the
        operator's target is dropped, and new goals are refused until ``robot_back``."""
        with self._lock:
            self.robot_reason = reason or "the robot stopped answering"
            why = f"robot unavailable: {self.robot_reason}"
            if self._active is not None:
                self._finish(self._active, "aborted", why)
                self._active = None
            for m in self._queue:
                self._finish(m, "aborted", why)
            self._queue.clear()
            self._teleop_target = None

    def robot_back(self, pose: tuple[float, ...] | None) -> None:
        """The robot is there again: motion starts from where it measures itself."""
        with self._lock:
            self.robot_reason = ""
            if pose is not None:
                self.pose = self.lib.clamp_pose(tuple(pose))

    # -- stepping -------------------------------------------------------------------------------
    def step(self) -> StepResult:
        """Advance one control period; returns the command to send (or None) and goal events."""
        with self._lock:
            result = StepResult()
            if self._active is None and self._queue:
                self._active = self._queue.pop(0)
            if self._active is None and self._teleop_target is None:
                self._maybe_start_idle()
            motion = self._active
            if motion is not None and motion.origin == "llm" and self.override:
                self._finish(motion, "aborted", "canceled by teleop override")  # defensive gate
                self._active = motion = None
            if motion is not None:
                if motion.trajectory is None:
                    result.started.append(motion.goal_id)
                    motion.trajectory = Trajectory(
                        self.lib.animations[motion.name], self.pose, self.lib.joints
                    )
                traj = motion.trajectory
                motion.t = min(traj.duration, motion.t + self.dt * motion.speed)
                target, origin, goal_id = traj.sample(motion.t), motion.origin, motion.goal_id
            elif self._teleop_target is not None:
                target, origin, goal_id = self._teleop_target, "teleop", None
            else:
                self._quiet_steps += 1
                result.finished, self._outcomes = self._outcomes, []
                return result
            target = self.lib.clamp_pose(target)
            self.pose = limit_step(self.lib, self.pose, target, self.dt)
            result.command = Command(self.pose, origin, goal_id)
            reached = all(abs(a - b) < 1e-6 for a, b in zip(self.pose, target, strict=True))
            if motion is not None:
                assert motion.trajectory is not None
                dur = motion.trajectory.duration
                done = motion.t >= dur and reached
                result.progress[motion.goal_id] = 1.0 if done else min(0.99, motion.t / dur)
                if done:
                    self._finish(motion, "succeeded", f"played {motion.name!r}")
                    self._active = None
            elif reached:
                self._teleop_target = None
            self._quiet_steps = 0 if origin != "idle" else self._quiet_steps
            result.finished, self._outcomes = self._outcomes, []
            return result

    @property
    def active(self) -> tuple[str, str, str] | None:
        """(goal_id, name, origin) of the running motion, if any."""
        with self._lock:
            m = self._active
            return (m.goal_id, m.name, m.origin) if m else None

    def _running_rank(self) -> int | None:
        if self._teleop_target is not None:
            return RANK["teleop"]
        if self._active is None or self._active.origin == "idle":
            return None  # idle always yields
        return RANK[self._active.origin]

    def take_outcomes(self) -> list[Outcome]:
        """Goal outcomes not yet returned by ``step`` (while the robot is lost, nothing steps)."""
        with self._lock:
            outcomes, self._outcomes = self._outcomes, []
            return outcomes

    def _maybe_start_idle(self) -> None:
        if self.robot_reason:
            return
        if self.idle_animation and not self.override and self._quiet_steps >= self._idle_after:
            self._active = _Motion(
                f"idle-{next(self._seq)}", self.idle_animation, "idle", 1.0, next(self._seq)
            )

    def _finish(self, motion: _Motion, status: str, message: str) -> None:
        if not motion.goal_id.startswith("idle-"):  # built-in idle motions report nothing
            self._outcomes.append(Outcome(motion.goal_id, status, message))

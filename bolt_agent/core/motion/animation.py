"""Animations: a validated keyframe library, interpolation, trajectories, limits.

The library comes from ``config/animations.yaml``: joint limits (position and maximum velocity)
and named animations, each a list of keyframes (``duration`` to reach the pose from the previous
one, and the joints it sets; unset joints keep their previous value). An animation starts from
wherever the robot is. The fixed-rate executor: ``core.animation_control.AnimationController``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bolt_agent.core.paths import config_dir

#: Reachy Mini's degrees of freedom: the head's orientation (radians), the body's yaw and the
#: antennas (radians), then the head's translation (metres, Stewart platform); the translation
#: comes last so that a joint command naming no joints keeps addressing the first ones
JOINTS = (
    "head_roll",
    "head_pitch",
    "head_yaw",
    "body_yaw",
    "left_antenna",
    "right_antenna",
    "head_x",
    "head_y",
    "head_z",
)
INTERPOLATIONS = ("minjerk", "linear")
MIN_SPEED, MAX_SPEED = 0.1, 3.0


class AnimationConfigError(ValueError):
    """animations.yaml is malformed; the message lists every problem found."""


@dataclass(frozen=True)
class JointLimit:
    lower: float
    upper: float
    max_velocity: float  # rad/s

    def clamp(self, value: float) -> float:
        return min(self.upper, max(self.lower, value))


@dataclass(frozen=True)
class Keyframe:
    duration: float  # seconds (at speed 1) to reach this pose from the previous one
    positions: dict[str, float]  # the joints this keyframe sets
    interpolation: str = "minjerk"


@dataclass(frozen=True)
class Animation:
    name: str
    keyframes: tuple[Keyframe, ...]
    description: str = ""

    @property
    def duration(self) -> float:
        return sum(k.duration for k in self.keyframes)


@dataclass(frozen=True)
class AnimationLibrary:
    limits: dict[str, JointLimit]
    animations: dict[str, Animation]
    joints: tuple[str, ...] = JOINTS

    @classmethod
    def load(cls, path: Path | str | None = None) -> AnimationLibrary:
        path = Path(path) if path else config_dir() / "animations.yaml"
        return cls.from_dict(yaml.safe_load(Path(path).read_text()) or {})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AnimationLibrary:
        errors: list[str] = []
        limits: dict[str, JointLimit] = {}
        raw_joints = data.get("joints") or {}
        for joint in JOINTS:
            spec = raw_joints.get(joint)
            if not isinstance(spec, dict):
                errors.append(f"joints.{joint}: missing (need min, max, max_velocity)")
                continue
            try:
                lim = JointLimit(
                    float(spec["min"]), float(spec["max"]), float(spec["max_velocity"])
                )
            except (KeyError, TypeError, ValueError) as exc:
                errors.append(f"joints.{joint}: {exc!r}")
                continue
            if lim.lower > 0 or lim.upper < 0 or lim.max_velocity <= 0:
                errors.append(f"joints.{joint}: need min <= 0 <= max and max_velocity > 0")
            limits[joint] = lim
        errors += [f"joints.{j}: unknown joint" for j in raw_joints if j not in JOINTS]
        animations: dict[str, Animation] = {}
        for name, spec in (data.get("animations") or {}).items():
            anim = _parse_animation(str(name), spec, errors)
            if anim:
                animations[anim.name] = anim
        if not animations:
            errors.append("animations: none defined")
        if errors:
            raise AnimationConfigError("invalid animation config:\n  " + "\n  ".join(errors))
        return cls(limits=limits, animations=animations)

    def neutral(self) -> tuple[float, ...]:
        return tuple(self.limits[j].clamp(0.0) for j in self.joints)

    def clamp_pose(self, pose: tuple[float, ...]) -> tuple[float, ...]:
        return tuple(self.limits[j].clamp(p) for j, p in zip(self.joints, pose, strict=True))


def _parse_animation(name: str, spec: Any, errors: list[str]) -> Animation | None:
    if not isinstance(spec, dict) or not isinstance(spec.get("keyframes"), list):
        errors.append(f"animations.{name}: need a 'keyframes' list")
        return None
    default_interp = spec.get("interpolation", "minjerk")
    keyframes: list[Keyframe] = []
    for i, kf in enumerate(spec["keyframes"]):
        where = f"animations.{name}.keyframes[{i}]"
        if not isinstance(kf, dict):
            errors.append(f"{where}: not a mapping")
            continue
        kf = dict(kf)
        interp = kf.pop("interpolation", default_interp)
        duration = kf.pop("duration", None)
        if interp not in INTERPOLATIONS:
            errors.append(f"{where}: interpolation {interp!r} not in {INTERPOLATIONS}")
        if not isinstance(duration, int | float) or duration <= 0:
            errors.append(f"{where}: duration must be a number > 0")
            continue
        unknown = [j for j in kf if j not in JOINTS]
        if unknown:
            errors.append(f"{where}: unknown joints {unknown}")
            continue
        try:
            keyframes.append(
                Keyframe(float(duration), {j: float(v) for j, v in kf.items()}, interp)
            )
        except (TypeError, ValueError):
            errors.append(f"{where}: joint values must be numbers (radians)")
    if not keyframes:
        errors.append(f"animations.{name}: no valid keyframes")
        return None
    return Animation(name, tuple(keyframes), str(spec.get("description", "")))


def ease(s: float, interpolation: str) -> float:
    """Normalised progress 0..1 → blend factor 0..1 (min-jerk: 10s^3 - 15s^4 + 6s^5)."""
    s = min(1.0, max(0.0, s))
    if interpolation == "linear":
        return s
    return s * s * s * (10.0 + s * (-15.0 + 6.0 * s))


class Trajectory:
    """An animation anchored at a start pose; ``sample(t)`` at animation time t (speed 1)."""

    def __init__(self, anim: Animation, start: tuple[float, ...], joints: tuple[str, ...] = JOINTS):
        self.joints = joints
        self.poses: list[tuple[float, ...]] = [tuple(start)]
        self.times: list[float] = [0.0]
        self.interps: list[str] = []
        for kf in anim.keyframes:
            prev = self.poses[-1]
            self.poses.append(
                tuple(kf.positions.get(j, p) for j, p in zip(joints, prev, strict=True))
            )
            self.times.append(self.times[-1] + kf.duration)
            self.interps.append(kf.interpolation)

    @property
    def duration(self) -> float:
        return self.times[-1]

    def sample(self, t: float) -> tuple[float, ...]:
        if t >= self.duration:
            return self.poses[-1]
        seg = max(0, next(i for i, end in enumerate(self.times[1:]) if t < end))
        t0, t1 = self.times[seg], self.times[seg + 1]
        a = ease((t - t0) / (t1 - t0), self.interps[seg])
        p0, p1 = self.poses[seg], self.poses[seg + 1]
        return tuple(x0 + a * (x1 - x0) for x0, x1 in zip(p0, p1, strict=True))


def limit_step(
    lib: AnimationLibrary, current: tuple[float, ...], target: tuple[float, ...], dt: float
) -> tuple[float, ...]:
    """Clamp ``target`` to the joint limits, then move from ``current`` by at most v_max·dt."""
    out = []
    for j, cur, tgt in zip(lib.joints, current, target, strict=True):
        lim = lib.limits[j]
        step = lim.max_velocity * dt
        out.append(lim.clamp(min(cur + step, max(cur - step, lim.clamp(tgt)))))
    return tuple(out)


def normalise_speed(speed: float) -> float:
    """Clamped to [MIN_SPEED, MAX_SPEED] (a speed <= 0 is refused before: ``check``)."""
    return min(MAX_SPEED, max(MIN_SPEED, float(speed)))

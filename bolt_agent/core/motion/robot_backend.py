"""Robot backends: where joint commands go and where joint states come from.

``sim`` echoes every command as the new state (an ideal position-controlled robot).
``reachy_mini`` is the hook for Pollen's Reachy Mini SDK (``pip install reachy-mini``; the daemon
must run): joint targets map onto ``ReachyMini.set_target(head=create_head_pose(roll, pitch, yaw),
antennas=[left, right], body_yaw=...)`` at the control rate, and ``goto_target(..., duration=...)``
for slow moves. The hardware is absent here, so it is an interface only: ``load()`` raises a clear
error when the SDK is missing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from bolt_agent.core.motion.animation import JOINTS


class RobotUnavailableError(RuntimeError):
    """The selected robot backend cannot run here; the message says why and what to do."""


class RobotBackend(ABC):
    """Position-controlled joints named as in ``core.motion.animation.JOINTS`` (radians)."""

    joints: tuple[str, ...] = JOINTS

    def load(self) -> None:  # noqa: B027 - optional hook
        """Connect to the robot; raise RobotUnavailableError with a clear message on failure."""

    @abstractmethod
    def send(self, positions: Sequence[float]) -> None:
        """Command joint positions (already clamped and velocity-limited)."""

    @abstractmethod
    def read_state(self) -> tuple[float, ...]:
        """Current joint positions."""

    def goto(self, positions: Sequence[float], duration: float) -> None:
        """Move smoothly over ``duration`` s (hardware-side interpolation); default: jump."""
        self.send(positions)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the robot."""


class SimRobot(RobotBackend):
    """Ideal robot: the state is the last command."""

    def __init__(self, start: Sequence[float] | None = None):
        self._state = tuple(start) if start is not None else (0.0,) * len(self.joints)

    def send(self, positions: Sequence[float]) -> None:
        if len(positions) != len(self.joints):
            raise ValueError(f"expected {len(self.joints)} positions, got {len(positions)}")
        self._state = tuple(float(p) for p in positions)

    def read_state(self) -> tuple[float, ...]:
        return self._state


class ReachyMiniRobot(RobotBackend):
    """Hook for the Reachy Mini SDK (interface only: untested without the robot)."""

    def __init__(self, **connect_kwargs: Any):
        self._kwargs = connect_kwargs
        self._mini: Any = None
        self._pose_fn: Any = None
        self._last: tuple[float, ...] = (0.0,) * len(self.joints)

    def load(self) -> None:
        try:
            from reachy_mini import ReachyMini  # type: ignore[import-not-found]
            from reachy_mini.utils import create_head_pose  # type: ignore[import-not-found]
        except ImportError as exc:
            raise RobotUnavailableError(
                "robot backend 'reachy_mini' needs Pollen's SDK: `pip install reachy-mini` and a "
                "running `reachy-mini-daemon` (use backend 'sim' without the robot)"
            ) from exc
        try:
            self._mini = ReachyMini(**self._kwargs)
        except Exception as exc:  # connection refused, daemon missing, ...
            raise RobotUnavailableError(f"cannot connect to Reachy Mini: {exc}") from exc
        self._pose_fn = create_head_pose

    def _targets(self, positions: Sequence[float]) -> dict[str, Any]:
        p = dict(zip(self.joints, positions, strict=True))
        head = self._pose_fn(
            roll=p["head_roll"], pitch=p["head_pitch"], yaw=p["head_yaw"], degrees=False
        )
        return {
            "head": head,
            "antennas": [p["left_antenna"], p["right_antenna"]],
            "body_yaw": p["body_yaw"],
        }

    def send(self, positions: Sequence[float]) -> None:
        if self._mini is None:
            raise RobotUnavailableError("reachy_mini backend used before load()")
        self._mini.set_target(**self._targets(positions))
        self._last = tuple(positions)

    def goto(self, positions: Sequence[float], duration: float) -> None:
        if self._mini is None:
            raise RobotUnavailableError("reachy_mini backend used before load()")
        self._mini.goto_target(**self._targets(positions), duration=duration, method="minjerk")
        self._last = tuple(positions)

    def read_state(self) -> tuple[float, ...]:
        return self._last  # the SDK's measured pose would go here (get_current_joint_positions)

    def close(self) -> None:
        if self._mini is not None:
            self._mini.__exit__(None, None, None)
            self._mini = None


BACKENDS = {"sim": SimRobot, "reachy_mini": ReachyMiniRobot}


def make_backend(name: str, start: Sequence[float] | None = None) -> RobotBackend:
    if name == "sim":
        return SimRobot(start)
    if name == "reachy_mini":
        return ReachyMiniRobot()
    raise RobotUnavailableError(f"unknown robot backend {name!r} (known: {', '.join(BACKENDS)})")

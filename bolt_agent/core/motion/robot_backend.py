"""Robot backends: where joint commands go and where joint states come from.

``sim`` echoes every command as the new state (an ideal position-controlled robot, for tests and
bags); ``reachy_mini`` is Pollen's robot, real or simulated by Pollen's daemon
(``core/motion/reachy_mini.py``). A backend says why a pose is out of its reach (``problem``)
and whether its link still works (``alive``); ``send`` and ``read_state`` raise when it does not.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

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

    def problem(self, positions: Sequence[float]) -> str | None:
        """Why the robot cannot take ``positions`` beyond each joint's own range, or None."""
        return None

    @property
    def alive(self) -> bool:
        """The link to the robot still works (a simulated one always does)."""
        return True

    @property
    def where(self) -> str:
        """What the backend talks to, for messages."""
        return type(self).__name__

    def wake_up(self) -> None:  # noqa: B027 - optional hook
        """The robot's own wake-up motion, where it has one."""

    def goto_sleep(self) -> None:  # noqa: B027 - optional hook
        """The robot's own resting pose, where it has one."""

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

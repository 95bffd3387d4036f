"""The robot backends by name, as animation_node's ``backend`` parameter chooses them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bolt_agent.core.motion.reachy_mini import ReachyMiniRobot
from bolt_agent.core.motion.robot_backend import RobotBackend, RobotUnavailableError, SimRobot

BACKENDS = ("sim", "reachy_mini")


def make_backend(name: str, start: Sequence[float] | None = None, **options: Any) -> RobotBackend:
    """The backend ``name``, not connected; ``options`` go to Reachy Mini's (host, port,
    connect_timeout_s). The SDK itself is imported only when a Reachy Mini connects."""
    if name == "sim":
        return SimRobot(start)
    if name == "reachy_mini":
        return ReachyMiniRobot(**options)
    raise RobotUnavailableError(f"unknown robot backend {name!r} (known: {', '.join(BACKENDS)})")

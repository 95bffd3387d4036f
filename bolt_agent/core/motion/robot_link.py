"""The link to the robot: connected or lost, why, and when to try again.

animation_node's control thread owns one. Every failure of the backend (a connection refused, a
command the daemon did not take, a link the SDK says is dead) marks the link lost with its
reason; while lost, nothing is sent, and a reconnect is tried on an exponential backoff
(``retry_s`` doubling up to ``max_retry_s``) so a daemon that restarts is found again within
seconds without a busy loop against one that stays away. Pure logic on an injected clock:
``test/test_core_robot_link.py`` drives it synchronously.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bolt_agent.core.motion.robot_backend import RobotBackend


@dataclass(frozen=True)
class LinkEvent:
    """A change of the link: ``lost`` (with why) or back (``lost`` false, the measured pose)."""

    lost: bool
    reason: str = ""
    pose: tuple[float, ...] | None = None


class RobotLink:
    """A backend and the state of its connection (one thread calls it)."""

    def __init__(
        self,
        backend: RobotBackend,
        retry_s: float = 0.5,
        max_retry_s: float = 8.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend, self.retry_s, self.max_retry_s = backend, retry_s, max_retry_s
        self._clock = clock
        self.connected = False
        self.reason = "not connected yet"
        self.losses = 0  # times a working link was lost
        self.attempts = 0  # connection attempts that failed
        self._delay = retry_s
        self._next_try = clock()

    def connect(self) -> LinkEvent | None:
        """Try to connect if it is time; the event when the link came back (or failed first)."""
        if self.connected or self._clock() < self._next_try:
            return None
        try:
            self.backend.load()
            pose = self.backend.read_state()
        except Exception as exc:
            self.attempts += 1
            first = self.attempts == 1 and self.losses == 0
            self._schedule(f"{exc}")
            return LinkEvent(True, self.reason) if first else None
        self.connected, self.reason, self._delay = True, "", self.retry_s
        return LinkEvent(False, pose=pose)

    def send(self, positions: Sequence[float]) -> LinkEvent | None:
        """Command ``positions``; the event if that lost the link."""
        return self._guard(lambda: self.backend.send(positions))

    def read_state(self) -> tuple[tuple[float, ...] | None, LinkEvent | None]:
        """The measured pose (None while lost) and the event if reading lost the link."""
        pose: list[tuple[float, ...]] = []
        event = self._guard(lambda: pose.append(self.backend.read_state()))
        return (pose[0] if pose else None), event

    def _guard(self, call: Callable[[], None]) -> LinkEvent | None:
        if not self.connected:
            return None
        try:
            call()
            if not self.backend.alive:
                raise ConnectionError(f"lost the connection to the {self.backend.where}")
        except Exception as exc:
            self.connected = False
            self.losses += 1
            self.backend.close()
            self._delay = self.retry_s
            self._schedule(str(exc) or repr(exc))
            return LinkEvent(True, self.reason)
        return None

    def _schedule(self, reason: str) -> None:
        self.reason = reason
        self._next_try = self._clock() + self._delay
        self._delay = min(self.max_retry_s, self._delay * 2)

    @property
    def next_try_in(self) -> float:
        return max(0.0, self._next_try - self._clock())

"""Pollen's Reachy Mini through its SDK (``reachy_mini``): the real robot, or Pollen's daemon
simulating it in MuJoCo, behind the same ``RobotBackend``.

Joints map onto the SDK's calls: ``head_x/y/z`` (metres) and ``head_roll/pitch/yaw`` make the
head pose (a 4x4 matrix in the robot's frame, ``xyz`` Euler angles in radians, as
``create_head_pose`` builds it), ``body_yaw``
turns the base, and the antennas go as ``[right, left]`` (the SDK's order, the reverse of ours).
Commands at the control rate use ``set_target``; slow moves ``goto_target``. ``read_state``
returns what the robot *measures*: the head pose the daemon computes from its motors, the
body's motor, the antennas' motors.

Limits come from Pollen's kinematics, not only from each joint's range: the head may turn at
most 65 degrees away from the body, and the body at most 160 degrees either way (the analytical
IK's ``max_relative_yaw`` / ``max_body_yaw``). ``pose_problem`` says why a pose is out, and the
node refuses it instead of letting the IK clip it silently.

The SDK connects over a websocket and serves the robot's state from the last message it got; a
daemon that goes away shows as ``send`` raising ``ConnectionError`` (the SDK checks its link
once a second) and as ``alive`` turning false, never as a stale pose taken for a fresh one.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from typing import Any

from bolt_agent.core.motion.animation import JOINTS
from bolt_agent.core.motion.robot_backend import RobotBackend, RobotUnavailableError

#: Pollen's analytical IK keeps the head within this yaw of the body, and the body within
#: MAX_BODY_YAW (reachy_mini/kinematics/analytical_kinematics.py)
MAX_RELATIVE_YAW = math.radians(65.0)
MAX_BODY_YAW = math.radians(160.0)
#: the head's tilt (roll, pitch) the Stewart platform reaches (placo's 35-degree cone)
MAX_TILT = math.radians(35.0)


def pose_problem(positions: Sequence[float], joints: Sequence[str] = JOINTS) -> str | None:
    """Why Reachy Mini cannot take ``positions`` (radians, ``joints`` order), or None."""
    if len(positions) != len(joints):
        return f"expected {len(joints)} positions, got {len(positions)}"
    p = dict(zip(joints, positions, strict=True))
    bad = {j: v for j, v in p.items() if not math.isfinite(v)}
    if bad:
        return f"non-finite joint positions {bad}"
    if abs(p["body_yaw"]) > MAX_BODY_YAW + 1e-9:
        return f"body_yaw {p['body_yaw']:.3f} rad is beyond Reachy Mini's ±{MAX_BODY_YAW:.3f}"
    relative = p["head_yaw"] - p["body_yaw"]
    if abs(relative) > MAX_RELATIVE_YAW + 1e-9:
        return (
            f"head_yaw - body_yaw = {relative:.3f} rad: Reachy Mini's head turns at most "
            f"±{MAX_RELATIVE_YAW:.3f} rad (65 degrees) away from its body"
        )
    tilt = math.hypot(p["head_roll"], p["head_pitch"])
    if tilt > MAX_TILT + 1e-9:
        return f"head tilt {tilt:.3f} rad (roll, pitch) is beyond Reachy Mini's {MAX_TILT:.3f}"
    return None


def euler_xyz(matrix: Any) -> tuple[float, float, float]:
    """(roll, pitch, yaw) of a rotation matrix, ``xyz`` extrinsic as ``create_head_pose``."""
    from scipy.spatial.transform import Rotation

    roll, pitch, yaw = Rotation.from_matrix([row[:3] for row in matrix[:3]]).as_euler("xyz")
    return float(roll), float(pitch), float(yaw)


class ReachyMiniRobot(RobotBackend):
    """Reachy Mini through Pollen's SDK (``pip install reachy-mini``; a daemon must run)."""

    def __init__(
        self, host: str = "localhost", port: int = 8000, connect_timeout_s: float = 5.0
    ) -> None:
        self.host, self.port, self.connect_timeout_s = host, port, connect_timeout_s
        self._mini: Any = None
        self._pose_fn: Any = None

    @property
    def where(self) -> str:
        return f"Reachy Mini daemon at {self.host}:{self.port}"

    def load(self) -> None:
        try:
            from reachy_mini import ReachyMini  # type: ignore[import-not-found]
            from reachy_mini.utils import create_head_pose  # type: ignore[import-not-found]
        except ImportError as exc:
            raise RobotUnavailableError(
                "robot backend 'reachy_mini' needs Pollen's SDK (`pip install --no-deps -r "
                f"requirements/reachy-client.txt`; `make setup` does it): {exc}"
            ) from exc
        local = self.host in ("localhost", "127.0.0.1", "::1")
        try:
            self._mini = ReachyMini(
                host=self.host,
                port=self.port,
                connection_mode="localhost_only" if local else "network",
                media_backend="no_media",
                timeout=self.connect_timeout_s,
            )
        except Exception as exc:  # refused, timed out, another robot's name
            raise RobotUnavailableError(f"cannot connect to the {self.where}: {exc}") from exc
        self._pose_fn = create_head_pose

    @property
    def alive(self) -> bool:
        """The SDK still hears the daemon (it checks once a second; its only liveness flag)."""
        client = getattr(self._mini, "client", None)
        return client is not None and bool(getattr(client, "_is_alive", True))

    def _sdk(self) -> Any:
        if self._mini is None:
            raise RobotUnavailableError(f"not connected to the {self.where}")
        if not self.alive:
            raise ConnectionError(f"lost the connection to the {self.where}")
        return self._mini

    def _targets(self, positions: Sequence[float]) -> dict[str, Any]:
        p = dict(zip(self.joints, positions, strict=True))
        head = self._pose_fn(
            x=p["head_x"],
            y=p["head_y"],
            z=p["head_z"],
            roll=p["head_roll"],
            pitch=p["head_pitch"],
            yaw=p["head_yaw"],
            degrees=False,
        )
        return {
            "head": head,
            "antennas": [p["right_antenna"], p["left_antenna"]],  # the SDK's order
            "body_yaw": p["body_yaw"],
        }

    def send(self, positions: Sequence[float]) -> None:
        targets = self._targets(positions)
        self._call(lambda mini: mini.set_target(**targets))

    def goto(self, positions: Sequence[float], duration: float) -> None:
        targets = self._targets(positions)
        self._call(lambda mini: mini.goto_target(**targets, duration=duration, method="minjerk"))

    def _call(self, fn: Any) -> Any:
        """One SDK call; a failing link (websocket closed, refused) says where it was lost."""
        mini = self._sdk()
        try:
            return fn(mini)
        except (ConnectionError, OSError) as exc:
            raise ConnectionError(f"lost the connection to the {self.where}: {exc}") from exc
        except Exception as exc:  # the websocket library's own ConnectionClosed and kin
            if "websockets" in type(exc).__module__:
                raise ConnectionError(f"lost the connection to the {self.where}: {exc}") from exc
            raise

    def read_state(self) -> tuple[float, ...]:
        head_joints, antennas = self._call(lambda mini: mini.get_current_joint_positions())
        pose = self._call(lambda mini: mini.get_current_head_pose())
        roll, pitch, yaw = euler_xyz(pose.tolist())
        x, y, z = (float(pose[i][3]) for i in range(3))
        measured = {
            "head_x": x,
            "head_y": y,
            "head_z": z,
            "head_roll": roll,
            "head_pitch": pitch,
            "head_yaw": yaw,
            "body_yaw": float(head_joints[0]),
            "right_antenna": float(antennas[0]),
            "left_antenna": float(antennas[1]),
        }
        return tuple(measured[j] for j in self.joints)

    def wake_up(self) -> None:
        self._call(lambda mini: mini.wake_up())

    def goto_sleep(self) -> None:
        self._call(lambda mini: mini.goto_sleep())

    def problem(self, positions: Sequence[float]) -> str | None:
        return pose_problem(positions, self.joints)

    def close(self) -> None:
        mini, self._mini = self._mini, None
        if mini is not None:
            with contextlib.suppress(Exception):  # a daemon already gone: nothing left to close
                mini.client.disconnect()

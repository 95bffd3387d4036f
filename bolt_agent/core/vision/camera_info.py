"""The camera's intrinsics for ``camera/camera_info``, from a calibration file or uncalibrated.

The file is the YAML that ROS's camera calibrator writes (``camera_calibration_parsers``:
``image_width``, ``image_height``, ``camera_name``, ``camera_matrix``, ``distortion_model``,
``distortion_coefficients``, ``rectification_matrix``, ``projection_matrix``, each matrix as
``{rows, cols, data}``), so a calibration made with the standard tools is used as it is. Without
a file the intrinsics are all zero: REP 104's mark of an uncalibrated camera, which consumers
(image_proc, rviz) recognise, rather than invented numbers that would look like a calibration.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml


class CalibrationError(ValueError):
    """The calibration file is missing, unreadable or malformed; the message says which."""


@dataclass(frozen=True)
class Intrinsics:
    width: int
    height: int
    distortion_model: str = "plumb_bob"
    d: tuple[float, ...] = ()
    k: tuple[float, ...] = (0.0,) * 9
    r: tuple[float, ...] = (1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0)
    p: tuple[float, ...] = (0.0,) * 12
    camera_name: str = field(default="")

    @property
    def calibrated(self) -> bool:
        return any(self.k)

    def resized(self, width: int, height: int) -> Intrinsics:
        """The same camera seen at another resolution (frames are resized before publishing):
        focal lengths and principal point scale with the image, distortion does not."""
        if (width, height) == (self.width, self.height) or not self.calibrated:
            return Intrinsics(width, height, self.distortion_model, self.d, self.k, self.r,
                              self.p, self.camera_name)  # fmt: skip
        sx, sy = width / self.width, height / self.height
        k = list(self.k)
        k[0], k[2], k[4], k[5] = k[0] * sx, k[2] * sx, k[4] * sy, k[5] * sy
        p = list(self.p)
        p[0], p[2], p[3], p[5], p[6] = p[0] * sx, p[2] * sx, p[3] * sx, p[5] * sy, p[6] * sy
        return Intrinsics(width, height, self.distortion_model, self.d, tuple(k), self.r,
                          tuple(p), self.camera_name)  # fmt: skip


def uncalibrated(width: int, height: int) -> Intrinsics:
    return Intrinsics(width, height)


def load_calibration(path: str | Path) -> Intrinsics:
    """Read a ``camera_calibration_parsers`` YAML file."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise CalibrationError(f"calibration file {path}: {exc}") from None
    if not isinstance(data, dict):
        raise CalibrationError(f"calibration file {path}: not a YAML mapping")

    def matrix(key: str, size: int, required: bool = True) -> tuple[float, ...] | None:
        entry = data.get(key)
        if entry is None and not required:
            return None
        values = entry.get("data") if isinstance(entry, dict) else None
        if not isinstance(values, list) or (size and len(values) != size):
            want = f"{size} numbers" if size else "a list of numbers"
            raise CalibrationError(f"calibration file {path}: {key}.data must be {want}")
        try:
            return tuple(float(v) for v in values)
        except (TypeError, ValueError):
            raise CalibrationError(f"calibration file {path}: {key}.data is not numeric") from None

    try:
        width, height = int(data["image_width"]), int(data["image_height"])
    except (KeyError, TypeError, ValueError):
        raise CalibrationError(
            f"calibration file {path}: image_width and image_height are required integers"
        ) from None
    k = matrix("camera_matrix", 9)
    d = matrix("distortion_coefficients", 0)
    r = matrix("rectification_matrix", 9, required=False) or Intrinsics(0, 0).r
    p = matrix("projection_matrix", 12, required=False)
    if p is None:  # a monocular camera: P = [K | 0]
        p = (k[0], k[1], k[2], 0.0, k[3], k[4], k[5], 0.0, k[6], k[7], k[8], 0.0)
    return Intrinsics(
        width=width,
        height=height,
        distortion_model=str(data.get("distortion_model", "plumb_bob")),
        d=d,
        k=k,
        r=r,
        p=p,
        camera_name=str(data.get("camera_name", "")),
    )

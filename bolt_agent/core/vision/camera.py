"""Frames from OpenCV: a device index ("0"), a video file, or a GStreamer pipeline string.

A pipeline is recognised by its ``!`` separators and needs an OpenCV built with GStreamer (the
JetPack OpenCV on a Jetson; the pip wheels have none). For the Jetson CSI camera:

    nvarguscamerasrc sensor-id=0 ! video/x-raw(memory:NVMM),width=1280,height=720,framerate=30/1
    ! nvvidconv ! video/x-raw,width=640,height=480,format=BGRx ! videoconvert
    ! video/x-raw,format=BGR ! appsink drop=1 max-buffers=1
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np


class CameraError(RuntimeError):
    """The camera/video cannot be opened or read; the message says which and why."""


def gstreamer_available() -> bool:
    info = cv2.getBuildInformation()
    return any(
        line.strip().startswith("GStreamer:") and "YES" in line for line in info.splitlines()
    )


class FrameSource:
    """``open()`` raises CameraError; ``read()`` returns a BGR frame or None (end / lost)."""

    def __init__(self, source: str, loop: bool = False):
        self.source, self.loop = source.strip(), loop
        self._cap: cv2.VideoCapture | None = None
        self.kind = (
            "device" if self.source.isdigit() else "gstreamer" if "!" in self.source else "file"
        )

    @property
    def opened(self) -> bool:
        return self._cap is not None

    def open(self) -> None:
        self.close()
        if self.kind == "device":
            cap = cv2.VideoCapture(int(self.source))
        elif self.kind == "gstreamer":
            if not gstreamer_available():
                raise CameraError(
                    "a GStreamer pipeline was given but this OpenCV has no GStreamer support "
                    "(pip opencv wheels have none; on the Jetson use JetPack's OpenCV)"
                )
            cap = cv2.VideoCapture(self.source, cv2.CAP_GSTREAMER)
        else:
            if not Path(self.source).expanduser().is_file():
                raise CameraError(f"video file {self.source!r} does not exist")
            cap = cv2.VideoCapture(str(Path(self.source).expanduser()))
        if not cap.isOpened():
            cap.release()
            raise CameraError(f"cannot open camera {self.kind} {self.source!r}")
        self._cap = cap

    def read(self) -> np.ndarray | None:
        if self._cap is None:
            return None
        ok, frame = self._cap.read()
        if not ok and self.kind == "file" and self.loop:
            self._cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
            ok, frame = self._cap.read()
        if not ok:
            return None
        return frame if frame.ndim == 3 else cv2.cvtColor(frame, cv2.COLOR_GRAY2BGR)

    def close(self) -> None:
        if self._cap is not None:
            self._cap.release()
            self._cap = None

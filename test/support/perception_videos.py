"""Test videos written with OpenCV's VideoWriter: a textured room, a moving shape, a light
change, then a person (the astronaut, bundled with scikit-image) appearing on the left."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
from skimage import data

W, H, FPS = 320, 240, 10
#: frame index → what happens from there (used by the assertions)
MOVE_START, MOVE_END, DARK_START, DARK_END, PERSON_START, N_FRAMES = 20, 40, 60, 80, 85, 100


def astronaut_bgr() -> np.ndarray:
    return cv2.cvtColor(data.astronaut(), cv2.COLOR_RGB2BGR)


def _room() -> np.ndarray:
    rng = np.random.default_rng(0)
    room = np.full((H, W, 3), (90, 110, 130), np.uint8)
    for _ in range(12):
        x, y = (int(v) for v in rng.integers(0, (W - 40, H - 40)))
        colour = tuple(int(c) for c in rng.integers(40, 220, 3))
        cv2.rectangle(room, (x, y), (x + 40, y + 30), colour, -1)
    return room


def scenario_frames() -> list[np.ndarray]:
    room, face = _room(), cv2.resize(astronaut_bgr()[20:260, 120:330], (105, 120))
    frames = []
    for i in range(N_FRAMES):
        f = room.copy()
        if MOVE_START <= i < MOVE_END:
            cv2.circle(f, (20 + (i - MOVE_START) * 14, 120), 25, (0, 0, 230), -1)
        if DARK_START <= i < DARK_END:
            f = (f * 0.35).astype(np.uint8)
        if i >= PERSON_START:
            f[60:180, 10:115] = face
        frames.append(f)
    return frames


def write_video(path: Path, frames: list[np.ndarray], fps: int = FPS) -> Path:
    h, w = frames[0].shape[:2]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), fps, (w, h))
    assert writer.isOpened(), "OpenCV cannot write MJPG"
    for f in frames:
        writer.write(f)
    writer.release()
    return path

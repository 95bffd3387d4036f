"""Scene description for the LLM: backends, classical vision, change detection, pacing.

A backend turns a frame (BGR numpy) into a ``SceneDescription`` with ``describe(frame, previous)``;
``observe(frame)`` runs on every frame (cheap frame differencing, so motion is measured at the
capture rate even when descriptions are rare). ``ClassicalBackend`` uses only what ships with
OpenCV: Haar face cascade + HOG people detector, frame differencing, brightness, HSV colour
buckets. ``VlmBackend`` is the documented slot for a Cosmos VLM on the Jetson (configuration
only). ``SceneMonitor`` paces descriptions: a periodic check, an immediate one when motion
starts or the light jumps, published when something changed or as a heartbeat.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field

import cv2
import numpy as np


class BackendUnavailableError(RuntimeError):
    """The selected perception backend cannot run here; the message says what is missing."""


@dataclass(frozen=True)
class Box:
    x: int
    y: int
    w: int
    h: int

    def position(self, frame_width: int) -> str:
        cx = (self.x + self.w / 2) / max(frame_width, 1)
        return "left" if cx < 1 / 3 else "right" if cx > 2 / 3 else "centre"


@dataclass
class SceneDescription:
    summary: str = ""
    people_count: int = 0
    people_boxes: list[Box] = field(default_factory=list)
    motion_level: float = 0.0  # 0 still .. 1 everything moving
    brightness: float = 0.0  # 0 black .. 1 white
    labels: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    colours: list[str] = field(default_factory=list)
    width: int = 0
    height: int = 0

    def positions(self) -> list[str]:
        return sorted(b.position(self.width) for b in self.people_boxes)


class MotionMeter:
    """Fraction of pixels that changed between consecutive frames (gain-normalised, so a
    lighting change alone is not motion); keeps the peak since the last ``take_peak``."""

    def __init__(self, size: tuple[int, int] = (160, 120), threshold: float = 20.0):
        self.size, self.threshold = size, threshold
        self._prev: np.ndarray | None = None
        self._last_input: np.ndarray | None = None
        self.level = 0.0
        self.brightness = 0.0
        self._peak = 0.0

    def update(self, frame: np.ndarray) -> float:
        gray = frame if frame.ndim == 2 else cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY)
        small = cv2.GaussianBlur(
            cv2.resize(gray, self.size, interpolation=cv2.INTER_AREA), (5, 5), 0
        )
        small = small.astype(np.float32)
        mean = float(small.mean())
        self.brightness = mean / 255.0
        norm = small * (128.0 / max(mean, 1.0))
        if self._prev is not None:
            self.level = float(np.mean(np.abs(norm - self._prev) > self.threshold))
        self._prev, self._last_input = norm, frame
        self._peak = max(self._peak, self.level)
        return self.level

    def take_peak(self, frame: np.ndarray) -> float:
        if frame is not self._last_input:
            self.update(frame)
        peak, self._peak = self._peak, self.level
        return peak


class PerceptionBackend(ABC):
    name = "base"

    def __init__(self) -> None:
        self.motion = MotionMeter()

    def load(self) -> None:  # noqa: B027 - optional hook
        """Load models; raise BackendUnavailableError with a clear message if impossible."""

    def observe(self, frame: np.ndarray) -> float:
        """Every captured frame: cheap motion update; returns the motion level."""
        return self.motion.update(frame)

    @abstractmethod
    def describe(self, frame: np.ndarray, previous: SceneDescription | None) -> SceneDescription:
        """The scene now, with ``changes`` relative to ``previous``."""


class ClassicalBackend(PerceptionBackend):
    """OpenCV-only: faces (Haar) + people (HOG), motion, brightness, dominant colours."""

    name = "classical"

    def __init__(self, detect_width: int = 320, use_hog: bool = True, hog_min_weight: float = 1.0):
        super().__init__()
        self.detect_width, self.use_hog, self.hog_min_weight = detect_width, use_hog, hog_min_weight
        self._faces: cv2.CascadeClassifier | None = None
        self._hog: cv2.HOGDescriptor | None = None

    def load(self) -> None:
        path = cv2.data.haarcascades + "haarcascade_frontalface_default.xml"
        self._faces = cv2.CascadeClassifier(path)
        if self._faces.empty():
            raise BackendUnavailableError(f"cannot load the OpenCV face cascade {path}")
        if self.use_hog:
            self._hog = cv2.HOGDescriptor()
            self._hog.setSVMDetector(cv2.HOGDescriptor_getDefaultPeopleDetector())

    def detect_people(self, frame: np.ndarray) -> list[Box]:
        if self._faces is None:
            self.load()
        assert self._faces is not None
        h, w = frame.shape[:2]
        scale = min(1.0, self.detect_width / w)
        small = cv2.resize(frame, (round(w * scale), round(h * scale))) if scale < 1 else frame
        gray = cv2.equalizeHist(cv2.cvtColor(small, cv2.COLOR_BGR2GRAY))
        faces = self._faces.detectMultiScale(gray, 1.15, 5, minSize=(24, 24))
        bodies = []
        if self._hog is not None:
            rects, weights = self._hog.detectMultiScale(small, winStride=(8, 8), scale=1.1)
            bodies = [
                r
                for r, wt in zip(rects, np.ravel(weights), strict=True)
                if wt >= self.hog_min_weight
            ]
        people = [tuple(b) for b in bodies]
        for fx, fy, fw, fh in faces:  # a face inside a body box is the same person
            cx, cy = fx + fw / 2, fy + fh / 2
            if not any(bx <= cx <= bx + bw and by <= cy <= by + bh for bx, by, bw, bh in people):
                people.append((fx, fy, fw, fh))
        return [Box(*(round(v / scale) for v in p)) for p in people]

    def describe(self, frame: np.ndarray, previous: SceneDescription | None) -> SceneDescription:
        motion = self.motion.take_peak(frame)
        boxes = self.detect_people(frame)
        gray = frame if frame.ndim == 2 else cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY)
        desc = SceneDescription(
            people_count=len(boxes),
            people_boxes=sorted(boxes, key=lambda b: b.x),
            motion_level=motion,
            brightness=float(gray.mean()) / 255.0,
            colours=dominant_colours(frame),
            width=frame.shape[1],
            height=frame.shape[0],
        )
        return finish(desc, previous)


class VlmBackend(PerceptionBackend):
    """Slot for a Cosmos 3 Edge VLM served on the Jetson (see docs/perception_animation.md).

    Configuration only: ``model`` (engine/checkpoint path) and ``endpoint`` (the runtime's
    OpenAI-compatible URL). The runtime is not part of this build, so ``load()`` always says so.
    """

    name = "vlm"

    def __init__(self, model: str = "", endpoint: str = "", prompt: str = ""):
        super().__init__()
        self.model, self.endpoint, self.prompt = model, endpoint, prompt

    def load(self) -> None:
        raise BackendUnavailableError(
            "perception backend 'vlm' (Cosmos 3 Edge) needs its Jetson runtime, which is not part "
            f"of this build (vlm_model={self.model!r}, vlm_endpoint={self.endpoint!r}); "
            "use backend 'classical', or see docs/perception_animation.md"
        )

    def describe(self, frame: np.ndarray, previous: SceneDescription | None) -> SceneDescription:
        raise BackendUnavailableError("the 'vlm' backend is not loaded")


def make_perception_backend(name: str, **options) -> PerceptionBackend:
    if name == "classical":
        return ClassicalBackend(**options)
    if name == "vlm":
        return VlmBackend(**options)
    raise BackendUnavailableError(f"unknown perception backend {name!r} (classical | vlm)")


# -- colours, changes, summary --------------------------------------------------------------------
_HUES = ((8, "red"), (20, "orange"), (33, "yellow"), (85, "green"), (100, "cyan"), (130, "blue"),
         (150, "purple"), (170, "pink"), (181, "red"))  # fmt: skip


def dominant_colours(frame: np.ndarray, top: int = 3, min_share: float = 0.12) -> list[str]:
    """Colour names covering at least ``min_share`` of the frame, most common first."""
    if frame.ndim == 2:
        frame = cv2.cvtColor(frame, cv2.COLOR_GRAY2BGR)
    hsv = cv2.cvtColor(cv2.resize(frame, (32, 24), interpolation=cv2.INTER_AREA), cv2.COLOR_BGR2HSV)
    names = Counter()
    for h, s, v in hsv.reshape(-1, 3).tolist():
        if v < 50:
            names["black"] += 1
        elif s < 50:
            names["white" if v > 200 else "grey"] += 1
        else:
            names[next(n for limit, n in _HUES if h < limit)] += 1
    total = sum(names.values())
    return [n for n, c in names.most_common(top) if c / total >= min_share]


#: motion level that starts / keeps "moving" (hysteresis); brightness jump that is a change
MOTION_ON, MOTION_OFF, LIGHT_JUMP = 0.01, 0.004, 0.15


def scene_changes(prev: SceneDescription | None, cur: SceneDescription) -> list[str]:
    """What changed from ``prev`` to ``cur``, in words ("a person appeared on the left")."""
    if prev is None:
        return []
    out: list[str] = []
    before, now = Counter(prev.positions()), Counter(cur.positions())
    came, went = list((now - before).elements()), list((before - now).elements())
    if len(came) == 1 and len(went) == 1:
        out.append(f"a person moved from the {went[0]} to the {came[0]}")
    else:
        out += [f"a person appeared {_where(p)}" for p in came]
        out += [f"the person {_where(p)} left" for p in went]
    was, now_moving = "moving" in prev.labels, "moving" in cur.labels
    if now_moving and not was:
        out.append("something started moving")
    elif was and not now_moving:
        out.append("everything is still now")
    if cur.brightness - prev.brightness >= LIGHT_JUMP:
        out.append("the light got brighter")
    elif prev.brightness - cur.brightness >= LIGHT_JUMP:
        out.append("the light got darker")
    return out


def _where(position: str) -> str:
    return "in the centre" if position == "centre" else f"on the {position}"


def finish(desc: SceneDescription, previous: SceneDescription | None) -> SceneDescription:
    """Fill ``labels``, ``changes`` and ``summary`` from the measured fields."""
    was_moving = previous is not None and "moving" in previous.labels
    moving = desc.motion_level >= (MOTION_OFF if was_moving else MOTION_ON)
    light = "dark" if desc.brightness < 0.2 else "bright" if desc.brightness > 0.75 else "lit"
    desc.labels = ["person"] * bool(desc.people_count) + ["moving" if moving else "still", light]
    desc.labels += desc.colours
    desc.changes = scene_changes(previous, desc)
    if desc.people_count:
        where = ", ".join(desc.positions())
        people = f"{desc.people_count} {'person' if desc.people_count == 1 else 'people'} ({where})"
    else:
        people = "nobody in view"
    motion = (
        "a lot of motion" if desc.motion_level > 0.15 else "some motion" if moving else "no motion"
    )
    parts = [
        people,
        motion,
        {"dark": "dark", "bright": "bright light", "lit": "normal light"}[light],
    ]
    if desc.colours:
        parts.append("mostly " + " and ".join(desc.colours))
    desc.summary = ", ".join(parts) + "."
    if desc.changes:
        desc.summary += " Just now: " + "; ".join(desc.changes) + "."
    return desc


class SceneMonitor:
    """Feeds every frame to the backend; returns a description when one should be published."""

    def __init__(
        self,
        backend: PerceptionBackend,
        check_period_s: float = 0.5,
        publish_period_s: float = 5.0,
        min_gap_s: float = 0.2,
    ):
        self.backend = backend
        self.check_period, self.publish_period, self.min_gap = (
            check_period_s,
            publish_period_s,
            min_gap_s,
        )
        self.last: SceneDescription | None = None
        self._last_check = self._last_pub = float("-inf")

    def push(self, frame: np.ndarray, now: float) -> SceneDescription | None:
        motion = self.backend.observe(frame)
        prev = self.last
        urgent = prev is not None and (
            (motion >= MOTION_ON and "moving" not in prev.labels)
            or abs(self.backend.motion.brightness - prev.brightness) >= LIGHT_JUMP
        )
        since = now - self._last_check
        if not (since >= self.check_period or (urgent and since >= self.min_gap)):
            return None
        self._last_check = now
        desc = self.backend.describe(frame, prev)
        self.last = desc
        if desc.changes or now - self._last_pub >= self.publish_period:
            self._last_pub = now
            return desc
        return None

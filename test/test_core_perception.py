"""Perception core: image conversion, the classical backend on real images and generated videos,
change detection, camera sources and the VLM slot."""

from __future__ import annotations

import numpy as np
import pytest

from bolt_agent.core.vision.camera import CameraError, FrameSource
from bolt_agent.core.vision.image_conv import ImageEncodingError, from_image_fields, to_image_fields
from bolt_agent.core.vision.perception import (
    BackendUnavailableError,
    Box,
    ClassicalBackend,
    SceneDescription,
    SceneMonitor,
    finish,
    make_perception_backend,
)
from support.perception_videos import (
    DARK_END,
    DARK_START,
    MOVE_END,
    MOVE_START,
    PERSON_START,
    astronaut_bgr,
    scenario_frames,
    write_video,
)


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    return write_video(tmp_path_factory.mktemp("video") / "scenario.avi", scenario_frames())


@pytest.fixture(scope="module")
def published(video):
    """Run the monitor over the video: [(frame index, description)] it chose to publish."""
    backend = ClassicalBackend()
    backend.load()
    monitor = SceneMonitor(backend, check_period_s=0.5, publish_period_s=5.0)
    source = FrameSource(str(video))
    source.open()
    out, i = [], 0
    while (frame := source.read()) is not None:
        desc = monitor.push(frame, i / 10)
        if desc is not None:
            out.append((i, desc))
        i += 1
    assert i == len(scenario_frames())
    return out


def when(published, change: str) -> list[int]:
    return [i for i, d in published if change in d.changes]


@pytest.mark.parametrize(
    "encoding, frame",
    [
        ("bgr8", np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3)),
        ("mono8", np.arange(20, dtype=np.uint8).reshape(4, 5)),
        ("mono16", np.arange(20, dtype=np.uint16).reshape(4, 5) * 1000),
        ("32FC1", np.linspace(0, 1, 20, dtype=np.float32).reshape(4, 5)),
    ],
)
def test_image_round_trip(encoding, frame):
    fields = to_image_fields(frame)
    assert fields["encoding"] == encoding and fields["height"] == 4 and fields["width"] == 5
    back = from_image_fields(**fields)
    np.testing.assert_array_equal(back, frame)


def test_image_rgb_and_padded_rows():
    rgb = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    padded = np.zeros((2, 12), np.uint8)
    padded[:, :9] = rgb.reshape(2, 9)
    bgr = from_image_fields(2, 3, "rgb8", 12, padded.tobytes())
    np.testing.assert_array_equal(bgr, rgb[:, :, ::-1])
    with pytest.raises(ImageEncodingError, match="too little data"):
        from_image_fields(2, 3, "bgr8", 9, b"\0" * 10)
    with pytest.raises(ImageEncodingError, match="unsupported encoding"):
        from_image_fields(2, 3, "yuv422", 6, b"\0" * 12)


def test_detector_finds_the_astronaut():
    backend = ClassicalBackend()
    backend.load()
    img = astronaut_bgr()
    desc = backend.describe(img, None)
    assert desc.people_count == 1, desc
    box = desc.people_boxes[0]
    assert 150 <= box.x + box.w / 2 <= 300 and 50 <= box.y + box.h / 2 <= 200  # her face
    assert "person" in desc.labels and desc.summary.startswith("1 person (centre)")
    empty = backend.describe(np.full_like(img, 128), desc)
    assert empty.people_count == 0 and "the person in the centre left" in empty.changes


def test_motion_events_follow_the_moving_shape(published):
    assert published[0][0] == 0 and published[0][1].changes == []  # first one: a heartbeat
    started = when(published, "something started moving")
    stopped = when(published, "everything is still now")
    assert started and MOVE_START <= started[0] <= MOVE_START + 5
    assert [s for s in stopped if MOVE_END <= s <= MOVE_END + 15]
    moving = [d for i, d in published if MOVE_START <= i < MOVE_END]
    assert all(d.motion_level > 0.01 and "moving" in d.labels for d in moving)
    assert not [s for s in started if MOVE_END + 15 < s < PERSON_START]  # the light is no motion


def test_light_change_events(published):
    darker, brighter = (
        when(published, "the light got darker"),
        when(published, "the light got brighter"),
    )
    assert darker and DARK_START <= darker[0] <= DARK_START + 1  # immediate, not the 0.5 s check
    assert brighter and DARK_END <= brighter[0] <= DARK_END + 1
    dark = next(d for i, d in published if i == darker[0])
    assert "dark" in dark.labels and dark.brightness < 0.2 and dark.motion_level < 0.01


def test_person_appears_on_the_left(published):
    appeared = when(published, "a person appeared on the left")
    assert appeared and PERSON_START <= appeared[0] <= PERSON_START + 5
    assert not [i for i in when(published, "a person appeared on the left") if i < PERSON_START]
    last = published[-1][1]
    assert last.people_count == 1 and last.positions() == ["left"]


def test_change_wording():
    prev = finish(
        SceneDescription(people_boxes=[Box(0, 0, 10, 10)], people_count=1, width=90), None
    )
    cur = finish(
        SceneDescription(people_boxes=[Box(80, 0, 10, 10)], people_count=1, width=90), prev
    )
    assert cur.changes == ["a person moved from the left to the right"]
    assert "Just now: a person moved" in cur.summary


def test_camera_errors_are_clear(tmp_path):
    with pytest.raises(CameraError, match="does not exist"):
        FrameSource(str(tmp_path / "nope.avi")).open()
    with pytest.raises(CameraError, match="cannot open camera device '99'"):
        FrameSource("99").open()
    with pytest.raises(CameraError, match="GStreamer"):
        FrameSource("videotestsrc ! videoconvert ! appsink").open()


def test_video_loops_when_asked(tmp_path):
    path = write_video(tmp_path / "short.avi", scenario_frames()[:3])
    source = FrameSource(str(path), loop=True)
    source.open()
    assert all(source.read() is not None for _ in range(7))
    once = FrameSource(str(path))
    once.open()
    assert [once.read() is not None for _ in range(4)] == [True, True, True, False]


def test_vlm_slot_gives_a_clear_error():
    backend = make_perception_backend("vlm", model="cosmos.engine", endpoint="")
    with pytest.raises(BackendUnavailableError, match="Cosmos 3 Edge"):
        backend.load()
    with pytest.raises(BackendUnavailableError, match="unknown perception backend"):
        make_perception_backend("yolo")

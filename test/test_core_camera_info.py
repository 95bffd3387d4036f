"""camera_info intrinsics: the calibrator's YAML, scaled to the published size; uncalibrated
without one; clear errors for broken files."""

from __future__ import annotations

import pytest

from bolt_agent.core.vision.camera_info import CalibrationError, load_calibration, uncalibrated

CAL = """image_width: 640
image_height: 480
camera_name: head_cam
camera_matrix: {rows: 3, cols: 3, data: [600, 0, 320, 0, 610, 240, 0, 0, 1]}
distortion_model: plumb_bob
distortion_coefficients: {rows: 1, cols: 5, data: [0.1, -0.2, 0.001, 0.002, 0]}
rectification_matrix: {rows: 3, cols: 3, data: [1, 0, 0, 0, 1, 0, 0, 0, 1]}
projection_matrix: {rows: 3, cols: 4, data: [590, 0, 321, 0, 0, 600, 241, 0, 0, 0, 1, 0]}
"""


def test_calibration_file_is_read_and_scaled(tmp_path):
    path = tmp_path / "cam.yaml"
    path.write_text(CAL)
    cal = load_calibration(path)
    assert cal.calibrated and cal.camera_name == "head_cam" and len(cal.d) == 5
    half = cal.resized(320, 240)
    assert half.k == pytest.approx((300, 0, 160, 0, 305, 120, 0, 0, 1))
    assert half.p == pytest.approx((295, 0, 160.5, 0, 0, 300, 120.5, 0, 0, 0, 1, 0))
    assert half.d == cal.d  # distortion does not depend on the resolution


def test_projection_defaults_to_k_for_a_monocular_file(tmp_path):
    path = tmp_path / "cam.yaml"
    path.write_text(CAL.split("rectification_matrix")[0])
    cal = load_calibration(path)
    assert cal.p == (600, 0, 320, 0, 0, 610, 240, 0, 0, 0, 1, 0)


def test_uncalibrated_is_all_zero_intrinsics():
    info = uncalibrated(320, 240).resized(160, 120)
    assert not info.calibrated and info.k == (0.0,) * 9 and (info.width, info.height) == (160, 120)


@pytest.mark.parametrize(
    "text, why",
    [
        ("[1, 2]", "not a YAML mapping"),
        ("image_width: 640\n", "image_width and image_height"),
        (
            CAL.replace("data: [600, 0, 320, 0, 610, 240, 0, 0, 1]", "data: [1, 2]"),
            "camera_matrix.data must be 9 numbers",
        ),
        (CAL.replace("[0.1, -0.2, 0.001, 0.002, 0]", "[a, b]"), "not numeric"),
    ],
)
def test_broken_files_say_why(tmp_path, text, why):
    path = tmp_path / "cam.yaml"
    path.write_text(text)
    with pytest.raises(CalibrationError, match=why):
        load_calibration(path)
    with pytest.raises(CalibrationError, match="calibration file"):
        load_calibration(tmp_path / "missing.yaml")

"""perception_node: camera frames → ``camera/image_raw``, ``camera/camera_info`` and
``perception/scene``.

Images and scene descriptions carry the camera's optical frame (``frame_id``, REP 103/105: z
forward, x right, y down). ``camera/camera_info`` goes out with every image, same stamp and frame:
the calibration of ``camera_info_file`` (the camera calibrator's YAML, scaled to the published
size) or, without one, zero intrinsics, ROS's mark of an uncalibrated camera.

A lifecycle node: ``on_configure`` loads the scene backend (classical | vlm; FAILURE with a clear
log when it cannot run), ``on_activate`` starts capturing (OpenCV device index, video file or
GStreamer pipeline; ``camera: topic`` subscribes ``camera/image_raw`` instead, for simulation).
A missing camera is logged, reported on ``perception/scene`` (label ``camera_unavailable``) and
retried (``/diagnostics`` says ERROR with the reason meanwhile); the node stays up.
Logic: ``core.vision.perception`` / ``camera`` / ``image_conv``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.lifecycle import TransitionCallbackReturn
from sensor_msgs.msg import CameraInfo, Image, RegionOfInterest

from bolt_agent.core.vision.camera import CameraError, FrameSource
from bolt_agent.core.vision.camera_info import (
    CalibrationError,
    Intrinsics,
    load_calibration,
    uncalibrated,
)
from bolt_agent.core.vision.image_conv import ImageEncodingError, from_image_fields, to_image_fields
from bolt_agent.core.vision.perception import (
    BackendUnavailableError,
    Box,
    SceneDescription,
    SceneMonitor,
    make_perception_backend,
)
from bolt_agent.nodes import qos
from bolt_agent.nodes.lifecycle import BoltLifecycleNode
from bolt_agent.nodes.params import param
from bolt_agent.nodes.runtime import main_for
from bolt_agent_interfaces.msg import SceneDescription as SceneMsg


@dataclass(frozen=True)
class PerceptionParams:
    camera: str = param(
        "0", "device index | video file | GStreamer pipeline | 'topic' (subscribe)", load_time=True
    )
    loop: bool = param(False, "replay a video file when it ends")
    rate_hz: float = param(10.0, "capture (and camera/image_raw) rate", low=0.1, load_time=True)
    width: int = param(640, "resize frames to width x height (0 = keep)", low=0)
    height: int = param(480, "resize frames to width x height (0 = keep)", low=0)
    publish_image: bool = param(
        True, "publish camera/image_raw (not in 'topic' mode)", load_time=True
    )
    frame_id: str = param(
        "camera_optical_frame",
        "frame_id of images, camera_info and scene descriptions: the camera's optical frame "
        "(z forward, x right, y down)",
    )
    camera_info_file: str = param(
        "",
        "calibration YAML (camera_calibration_parsers format) for camera/camera_info ('' = "
        "uncalibrated: zero intrinsics)",
        load_time=True,
    )
    backend: str = param(
        "classical",
        "scene describer: classical (OpenCV) | vlm (Cosmos Edge slot, Jetson runtime)",
        choices=("classical", "vlm"),
        load_time=True,
    )
    check_rate_hz: float = param(
        2.0, "scene checks (immediate on motion start / light jump)", low=0.01, load_time=True
    )
    publish_period_s: float = param(
        5.0, "heartbeat on perception/scene when nothing changed", load_time=True
    )
    retry_period_s: float = param(2.0, "reopen a missing camera this often", low=0.1)
    detect_width: int = param(320, "classical: detector input width", low=32, load_time=True)
    use_hog: bool = param(
        True, "classical: HOG people detector besides the face cascade", load_time=True
    )
    vlm_model: str = param("", "vlm: model / TensorRT engine on the Jetson", load_time=True)
    vlm_endpoint: str = param("", "vlm: the runtime's URL", load_time=True)
    max_image_pixels: int = param(
        3840 * 2160,
        "largest camera/image_raw image (width x height) accepted; a larger one is refused "
        "and counted before any copy is made",
        low=1,
    )


class PerceptionNode(BoltLifecycleNode):
    Params = PerceptionParams

    def __init__(self, **node_kwargs) -> None:  # e.g. context=, parameter_overrides=
        super().__init__("perception_node", **node_kwargs)
        self.monitor: SceneMonitor | None = None
        self.source: FrameSource | None = None
        self.scene_pub = self.image_pub = self.info_pub = self.timer = self.image_sub = None
        self._calibration: Intrinsics | None = None
        self._info: CameraInfo | None = None
        self._next_try = 0.0
        self._ended = False
        self._frames = 0  # frames processed since start

    # -- lifecycle ------------------------------------------------------------------------------
    def configure(self) -> TransitionCallbackReturn:
        p = self.params
        if p.backend == "vlm":
            options = {"model": p.vlm_model, "endpoint": p.vlm_endpoint}
        else:
            options = {"detect_width": p.detect_width, "use_hog": p.use_hog}
        try:
            backend = make_perception_backend(p.backend, **options)
            backend.load()
        except (BackendUnavailableError, TypeError) as exc:
            self.record_failure("configure", f"perception backend: {exc}")
            return TransitionCallbackReturn.FAILURE
        try:
            self._calibration = load_calibration(p.camera_info_file) if p.camera_info_file else None
        except CalibrationError as exc:
            self.record_failure("configure", str(exc))
            return TransitionCallbackReturn.FAILURE
        self._info = None
        self.monitor = SceneMonitor(backend, 1.0 / max(p.check_rate_hz, 0.01), p.publish_period_s)
        self.scene_pub = self.create_publisher(SceneMsg, "perception/scene", qos.RELIABLE)
        if p.camera != "topic" and p.publish_image:
            self.image_pub = self.create_publisher(Image, "camera/image_raw", qos.SENSOR)
            self.info_pub = self.create_publisher(CameraInfo, "camera/camera_info", qos.SENSOR)
        self.get_logger().info(f"backend {backend.name}, camera {p.camera!r}")
        return TransitionCallbackReturn.SUCCESS

    def activate(self) -> TransitionCallbackReturn:
        p = self.params
        if p.camera == "topic":
            self.image_sub = self.create_subscription(
                Image, "camera/image_raw", self._on_image, qos.SENSOR,
                callback_group=MutuallyExclusiveCallbackGroup(),
            )  # fmt: skip
            self.status("OK", "subscribed to camera/image_raw")
        else:
            self.source, self._next_try, self._ended = FrameSource(p.camera, p.loop), 0.0, False
            self.timer = self.create_timer(
                1.0 / p.rate_hz, self._tick, callback_group=MutuallyExclusiveCallbackGroup()
            )
        return TransitionCallbackReturn.SUCCESS

    def deactivate(self) -> None:
        if self.timer is not None:
            self.destroy_timer(self.timer)
            self.timer = None
        if self.image_sub is not None:
            self.destroy_subscription(self.image_sub)
            self.image_sub = None
        if self.source is not None:
            self.source.close()

    def cleanup(self) -> None:
        for pub in (self.scene_pub, self.image_pub, self.info_pub):
            if pub is not None:
                self.destroy_publisher(pub)
        self.scene_pub = self.image_pub = self.info_pub = self.monitor = None

    # -- capture --------------------------------------------------------------------------------
    def _now(self) -> float:
        return self.get_clock().now().nanoseconds / 1e9

    def _tick(self) -> None:
        assert self.source is not None
        if self._ended:
            return
        if not self.source.opened:
            if self._now() < self._next_try:
                return
            try:
                self.source.open()
                self.get_logger().info(f"camera {self.params.camera!r} opened")
                self.status("OK", f"camera {self.params.camera!r} open")
            except CameraError as exc:
                self._next_try = self._now() + self.params.retry_period_s
                msg = f"{exc}; retrying every {self.params.retry_period_s:g} s"
                self.get_logger().error(msg)
                self.status("ERROR", f"camera unavailable: {msg}")
                self._publish(
                    SceneDescription(summary=f"I cannot see: {msg}.", labels=["camera_unavailable"])
                )
                return
        frame = self.source.read()
        if frame is None:
            self.source.close()
            if self.source.kind == "file":
                self._ended = True
                self.get_logger().info("end of the video file (set loop:=true to replay)")
                self.status("WARN", "end of the video file: no more frames (loop:=true replays)")
            else:
                self.get_logger().error("camera stopped delivering frames; reopening")
                self.status("ERROR", "camera stopped delivering frames; reopening")
            return
        self._process(frame, publish_image=True)

    def _on_image(self, msg: Image) -> None:
        if msg.width * msg.height > self.params.max_image_pixels:
            why = f"camera/image_raw: {msg.width}x{msg.height} over max_image_pixels; dropped"
            self.get_logger().error(why, throttle_duration_sec=5.0)
            self.record_failure("bad_image", why, log=False)
            return
        try:
            frame = from_image_fields(
                msg.height, msg.width, msg.encoding, msg.step, msg.data, msg.is_bigendian
            )
        except ImageEncodingError as exc:
            self.get_logger().error(f"camera/image_raw: {exc}", throttle_duration_sec=5.0)
            self.record_failure("bad_image", f"camera/image_raw: {exc}", log=False)
            return
        if frame.ndim == 2:
            frame = cv2.cvtColor(frame.astype(np.uint8), cv2.COLOR_GRAY2BGR)
        self._process(frame, publish_image=False)

    def _process(self, frame: np.ndarray, publish_image: bool) -> None:
        w, h = self.params.width, self.params.height
        if w > 0 and h > 0 and frame.shape[:2] != (h, w):
            frame = cv2.resize(frame, (w, h), interpolation=cv2.INTER_AREA)
        stamp = self.get_clock().now().to_msg()
        if publish_image and self.image_pub is not None:
            img = Image(**to_image_fields(frame))
            img.header.stamp, img.header.frame_id = stamp, self.params.frame_id
            self.image_pub.publish(img)
            self._publish_info(img.width, img.height, img.header)
        assert self.monitor is not None
        self._frames += 1
        desc = self.monitor.push(frame, self._now())
        if desc is not None:
            self._publish(desc, stamp)

    def _publish_info(self, width: int, height: int, header) -> None:
        """``camera/camera_info`` for an image of this size (rebuilt only when the size
        changes)."""
        info = self._info
        if info is None or (info.width, info.height) != (width, height):
            cal = self._calibration or uncalibrated(width, height)
            cal = cal.resized(width, height)
            info = CameraInfo(
                width=width,
                height=height,
                distortion_model=cal.distortion_model,
                d=list(cal.d),
                k=list(cal.k),
                r=list(cal.r),
                p=list(cal.p),
            )
            self._info = info
        info.header = header
        if self.info_pub is not None:
            self.info_pub.publish(info)

    def _publish(self, desc: SceneDescription, stamp=None) -> None:
        msg = SceneMsg(
            summary=desc.summary,
            people_count=desc.people_count,
            people_boxes=[_roi(b) for b in desc.people_boxes],
            motion_level=float(desc.motion_level),
            brightness=float(desc.brightness),
            labels=list(desc.labels),
            changes=list(desc.changes),
        )
        msg.header.stamp = stamp or self.get_clock().now().to_msg()
        msg.header.frame_id = self.params.frame_id
        if self.scene_pub is not None:
            self.scene_pub.publish(msg)

    def diagnostic_values(self) -> dict[str, Any]:
        p, monitor, source = self.params, self.monitor, self.source
        if p.camera == "topic":
            camera_open = self.image_sub is not None
        else:
            camera_open = source is not None and source.opened and not self._ended
        return {
            "model": monitor.backend.name if monitor is not None else "(not loaded)",
            "device": "topic camera/image_raw" if p.camera == "topic" else f"camera {p.camera}",
            "camera_open": camera_open,
            "frames": self._frames,
            "calibrated": self._calibration is not None,
        }


def _roi(box: Box) -> RegionOfInterest:
    x, y = max(0, box.x), max(0, box.y)
    return RegionOfInterest(x_offset=x, y_offset=y, width=box.w, height=box.h)


def main(args: list[str] | None = None) -> int:
    return main_for(PerceptionNode, args)


if __name__ == "__main__":
    raise SystemExit(main())

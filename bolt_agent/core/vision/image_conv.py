"""numpy ↔ sensor_msgs/Image without cv_bridge: the message as a dict of its fields.

``to_image_fields(frame)`` gives ``height, width, encoding, is_bigendian, step, data`` (bytes) for
the node to copy into a ``sensor_msgs.msg.Image``; ``from_image_fields(...)`` takes the same
fields (``data`` any buffer: bytes, array.array, memoryview) and returns a BGR/mono numpy array.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

#: encoding → (dtype, channels)
ENCODINGS: dict[str, tuple[str, int]] = {
    "bgr8": ("uint8", 3),
    "rgb8": ("uint8", 3),
    "bgra8": ("uint8", 4),
    "rgba8": ("uint8", 4),
    "mono8": ("uint8", 1),
    "8UC1": ("uint8", 1),
    "8UC3": ("uint8", 3),
    "mono16": ("uint16", 1),
    "16UC1": ("uint16", 1),
    "32FC1": ("float32", 1),
}


class ImageEncodingError(ValueError):
    """Unsupported encoding or a data/shape mismatch."""


def to_image_fields(frame: np.ndarray, encoding: str | None = None) -> dict[str, Any]:
    """An HxW or HxWxC array → Image fields; encoding defaults to bgr8/bgra8/mono8/mono16/32FC1."""
    if frame.ndim not in (2, 3):
        raise ImageEncodingError(f"expected an HxW or HxWxC array, got shape {frame.shape}")
    channels = 1 if frame.ndim == 2 else frame.shape[2]
    if encoding is None:
        encoding = _default_encoding(frame.dtype, channels)
    dtype, want_channels = _spec(encoding)
    if channels != want_channels or frame.dtype != np.dtype(dtype):
        raise ImageEncodingError(
            f"{encoding} needs {want_channels} channel(s) of {dtype}, "
            f"got {channels} of {frame.dtype}"
        )
    frame = np.ascontiguousarray(frame)
    return {
        "height": int(frame.shape[0]),
        "width": int(frame.shape[1]),
        "encoding": encoding,
        "is_bigendian": int(frame.dtype.byteorder == ">" or (
            frame.dtype.byteorder == "=" and sys.byteorder == "big"
        )),
        "step": int(frame.strides[0]),
        "data": frame.tobytes(),
    }  # fmt: skip


def from_image_fields(
    height: int, width: int, encoding: str, step: int, data: Any, is_bigendian: int = 0
) -> np.ndarray:
    """Image fields → numpy (a copy). rgb8/rgba8 come back as BGR/BGRA for OpenCV."""
    dtype_name, channels = _spec(encoding)
    dtype = np.dtype(dtype_name).newbyteorder(">" if is_bigendian else "<")
    row_bytes = width * channels * dtype.itemsize
    step = step or row_bytes
    buf = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
    if step < row_bytes or buf.size < step * (height - 1) + row_bytes:
        raise ImageEncodingError(
            f"{encoding} {width}x{height}: step {step}, {buf.size} bytes is too little data"
        )
    if buf.size < step * height:  # a last row without padding
        buf = np.concatenate([buf, np.zeros(step * height - buf.size, np.uint8)])
    rows = buf[: step * height].reshape(height, step)[:, :row_bytes]
    img = np.ascontiguousarray(rows).view(dtype).astype(dtype.newbyteorder("="))
    img = img.reshape(height, width, channels) if channels > 1 else img.reshape(height, width)
    if encoding == "rgb8":
        img = img[:, :, ::-1]
    elif encoding == "rgba8":
        img = img[:, :, [2, 1, 0, 3]]
    return np.ascontiguousarray(img)


def _spec(encoding: str) -> tuple[str, int]:
    try:
        return ENCODINGS[encoding]
    except KeyError:
        known = ", ".join(ENCODINGS)
        raise ImageEncodingError(f"unsupported encoding {encoding!r} (known: {known})") from None


def _default_encoding(dtype: np.dtype, channels: int) -> str:
    table = {
        ("uint8", 3): "bgr8",
        ("uint8", 4): "bgra8",
        ("uint8", 1): "mono8",
        ("uint16", 1): "mono16",
        ("float32", 1): "32FC1",
    }
    try:
        return table[(np.dtype(dtype).name, channels)]
    except KeyError:
        raise ImageEncodingError(f"no default encoding for {channels} x {dtype}") from None

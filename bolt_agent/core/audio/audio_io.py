"""Audio devices (PortAudio via sounddevice), sample conversion and resampling.

Devices are chosen by index or by name (exact, then case-insensitive substring); a missing one
raises ``DeviceNotFoundError`` whose message lists what is available. ``MicCapture`` delivers
16 kHz mono float32 blocks whatever rate the device runs at (resampled with soxr).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import soxr

from bolt_agent.core.audio.sample_clock import SampleClock

Kind = Literal["input", "output"]


class _StreamCount:
    """Streams this process holds open; PortAudio is only re-initialised when there are none."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def add(self, n: int) -> None:
        with self._lock:
            self.count += n


OPEN_STREAMS = _StreamCount()
# PortAudio's (re-)initialisation walks ALSA's global configuration without alsa-lib's lock, so
# a rescan, a stream opening or closing, and ``release_alsa_plugins`` take this lock (two nodes
# in one process open their devices from their own threads; a slow scan or a stuck close holds
# the other node's open for that long). An audio callback must never take it: ``close`` holds
# it while PortAudio waits for the callback thread to finish.
PORTAUDIO_LOCK = threading.RLock()


class DeviceNotFoundError(RuntimeError):
    """No device matches the request; the message lists the available devices."""


class DeviceError(RuntimeError):
    """A device exists but cannot be opened (busy, unsupported settings)."""


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    max_input_channels: int
    max_output_channels: int
    default_samplerate: float

    def channels(self, kind: Kind) -> int:
        return self.max_input_channels if kind == "input" else self.max_output_channels


def _sd() -> Any:
    import sounddevice as sd  # imported lazily: it loads the PortAudio library

    return sd


def list_devices(kind: Kind | None = None, rescan: bool = False) -> list[DeviceInfo]:
    """Devices PortAudio sees. ``rescan`` re-initialises PortAudio (its list is cached at start-up)
    so a device plugged in later shows up; only do that while this process has no open stream."""
    sd = _sd()
    with PORTAUDIO_LOCK:
        if rescan and OPEN_STREAMS.count == 0:
            sd._terminate()
            sd._initialize()
        listed = sd.query_devices()
    devices = [
        DeviceInfo(
            index=int(d["index"]),
            name=str(d["name"]),
            max_input_channels=int(d["max_input_channels"]),
            max_output_channels=int(d["max_output_channels"]),
            default_samplerate=float(d["default_samplerate"]),
        )
        for d in listed
    ]
    return [d for d in devices if kind is None or d.channels(kind) > 0]


ALSA_RELEASE_MIN_VERSION = (1, 2, 0)  # reference-counted plugin cache, locked configuration


def release_alsa_plugins() -> bool:
    """Unload the ALSA plugins that no open stream uses; False when it did nothing (ALSA not
    loaded, or an alsa-lib older than ``ALSA_RELEASE_MIN_VERSION``).

    PortAudio's device scan opens the PCMs the ALSA configuration defines (all but a few it
    ignores, such as hw and plughw), which loads their plugin modules and the libraries behind
    them (with Debian's ``libasound2-plugins``: a52 and lavrate pull in libavcodec, librsvg,
    libx265 …: 125 libraries, ~11 MiB resident here), and they stay until ``Pa_Terminate``
    frees ALSA's global configuration. This makes that same call
    (``snd_config_update_free_global``) once a stream is open, under ``PORTAUDIO_LOCK``: alsa-lib
    closes only the plugin modules no open PCM holds a reference to, and the next
    ``snd_pcm_open`` (or PortAudio's next scan) reads the configuration again. Older alsa-lib
    closed every module, open or not: there it does nothing."""
    try:
        alsa = ctypes.CDLL("libasound.so.2", mode=os.RTLD_NOLOAD)
        version = ctypes.CFUNCTYPE(ctypes.c_char_p)(("snd_asoundlib_version", alsa))()
        free_global = alsa.snd_config_update_free_global
    except (OSError, AttributeError):  # not loaded (PortAudio without ALSA), or no such symbol
        return False
    numbers = tuple(int(n) for n in version.decode().split(".")[:3] if n.isdigit())
    if numbers < ALSA_RELEASE_MIN_VERSION:
        return False
    with PORTAUDIO_LOCK:
        return free_global() == 0


def open_stream(
    kind: Kind,
    device_spec: str | int | None,
    rate: int,
    rescan: bool,
    make: Callable[[DeviceInfo, int], Any],
    env: dict[str, str] | None = None,
) -> tuple[Any, DeviceInfo, int]:
    """Find the device, pick its rate, build the stream (``make(device, rate)``, not started)
    and start it, under ``PORTAUDIO_LOCK``; then it is counted open and the ALSA plugins no
    stream uses are released. A stream that opens but will not start is closed again.
    ``env``: variables set only while the stream is built and started (``PULSE_SINK``: the
    PulseAudio sink of an output), restored after. Returns (stream, device, rate);
    ``DeviceError`` says why it could not."""
    with PORTAUDIO_LOCK:
        device = find_device(device_spec, kind, rescan)
        rate = supported_rate(device, rate, kind)
        stream = None
        try:
            with _scoped_env(env or {}):
                stream = make(device, rate)
                stream.start()
        except Exception as exc:
            if stream is not None:
                with contextlib.suppress(Exception):
                    stream.close()
            raise DeviceError(
                f"cannot open {kind} device {device.name!r} at {rate} Hz: {exc}"
            ) from exc
        OPEN_STREAMS.add(1)
        release_alsa_plugins()
        return stream, device, rate


@contextlib.contextmanager
def _scoped_env(changes: dict[str, str]):
    """Set ``changes`` in the environment for the block, then put back what was there. Only
    under ``PORTAUDIO_LOCK``: no other stream of the process opens meanwhile, and the
    process's environment is left as it was (one process hosts every node when embedded)."""
    saved = {key: os.environ.get(key) for key in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def close_stream(stream: Any) -> None:
    """Abort and close a stream ``open_stream`` opened, under ``PORTAUDIO_LOCK``; it counts as
    open until closed (no rescan under a closing stream). A stream whose device is gone may
    refuse to abort: it is closed anyway."""
    with PORTAUDIO_LOCK:
        with contextlib.suppress(Exception):
            stream.abort()
        try:
            stream.close()
        finally:
            OPEN_STREAMS.add(-1)


def describe_devices(devices: Sequence[DeviceInfo], kind: Kind) -> str:
    if not devices:
        return f"no {kind} devices"
    return "; ".join(f"[{d.index}] {d.name} ({d.default_samplerate:.0f} Hz)" for d in devices)


def select_device(spec: str | int | None, devices: Sequence[DeviceInfo], kind: Kind) -> DeviceInfo:
    """Pick by index (int or digits) or name: exact match first, then a substring (any case).

    ``None``/'' selects 'default' when present, else the first device of the kind.
    """
    candidates = [d for d in devices if d.channels(kind) > 0]
    spec = spec.strip() if isinstance(spec, str) else spec
    found: DeviceInfo | None = None
    if spec is None or spec == "":
        found = next((d for d in candidates if d.name == "default"), None) or (
            candidates[0] if candidates else None
        )
    elif isinstance(spec, int) or spec.isdigit():
        found = next((d for d in candidates if d.index == int(spec)), None)
    else:
        found = next((d for d in candidates if d.name == spec), None) or next(
            (d for d in candidates if spec.lower() in d.name.lower()), None
        )
    if found is None:
        raise DeviceNotFoundError(
            f"{kind} device {spec!r} not found; available {kind} devices: "
            + describe_devices(candidates, kind)
        )
    return found


def find_device(spec: str | int | None, kind: Kind, rescan: bool = False) -> DeviceInfo:
    return select_device(spec, list_devices(kind, rescan), kind)


def supported_rate(device: DeviceInfo, wanted: int, kind: Kind, channels: int = 1) -> int:
    """``wanted`` if the device accepts it, else the device's default rate (we resample)."""
    sd = _sd()
    check = sd.check_input_settings if kind == "input" else sd.check_output_settings
    try:
        check(device=device.index, samplerate=wanted, channels=channels, dtype="float32")
        return wanted
    except Exception:
        return int(device.default_samplerate)


# --- samples ---------------------------------------------------------------------------------


def int16_to_float(samples: np.ndarray | Sequence[int]) -> np.ndarray:
    return np.asarray(samples, dtype=np.int16).astype(np.float32) / 32768.0


def float_to_int16(samples: np.ndarray) -> np.ndarray:
    scaled = np.round(np.asarray(samples, dtype=np.float32) * 32768.0)
    return np.clip(scaled, -32768, 32767).astype(np.int16)


def to_mono(samples: np.ndarray, channels: int) -> np.ndarray:
    """Interleaved (or (n, ch)) samples → mono by averaging channels."""
    if channels <= 1:
        return samples.reshape(-1)
    return samples.reshape(-1, channels).mean(axis=1).astype(samples.dtype)


def resample(samples: np.ndarray, in_rate: int, out_rate: int) -> np.ndarray:
    """One-shot resampling (soxr HQ); float32 in, float32 out."""
    x = np.asarray(samples, dtype=np.float32)
    if in_rate == out_rate or x.size == 0:
        return x
    return soxr.resample(x, in_rate, out_rate, quality="HQ").astype(np.float32)


class StreamResampler:
    """Chunk-wise resampling with state kept between chunks (no clicks at chunk borders)."""

    def __init__(self, in_rate: int, out_rate: int) -> None:
        self.in_rate, self.out_rate = in_rate, out_rate
        self._stream = (
            None if in_rate == out_rate else soxr.ResampleStream(in_rate, out_rate, 1, "float32")
        )

    def process(self, chunk: np.ndarray, last: bool = False) -> np.ndarray:
        x = np.asarray(chunk, dtype=np.float32).reshape(-1)
        if self._stream is None:
            return x
        return self._stream.resample_chunk(x, last=last)


class RateResamplers:
    """Resampling to ``out_rate`` for a stream whose blocks each say their rate (audio/input):
    one ``StreamResampler`` per rate, kept between blocks. ``gap``: audio is missing before this
    block, so that rate's filter starts afresh (it must not join the two sides). A rate that
    changes every block keeps at most ``max_rates`` of them."""

    def __init__(self, out_rate: int, max_rates: int = 4) -> None:
        self.out_rate, self.max_rates = out_rate, max_rates
        self._by_rate: dict[int, StreamResampler] = {}

    def reset(self) -> None:
        self._by_rate.clear()

    def process(self, chunk: np.ndarray, rate: int, gap: bool = False) -> np.ndarray:
        resampler = self._by_rate.get(rate)  # (at out_rate: one that passes the audio through)
        if resampler is None or gap:  # (not setdefault: it would build one every block)
            if len(self._by_rate) >= self.max_rates:
                self._by_rate.clear()
            resampler = self._by_rate[rate] = StreamResampler(rate, self.out_rate)
        return resampler.process(chunk)


# --- capture ---------------------------------------------------------------------------------


class MicCapture:
    """An input stream delivering ``on_audio(float32 mono at rate, stamp_ns, lost_ns)`` blocks:
    the stamp of the block's first sample by the device's sample clock (``SampleClock`` on the
    monotonic clock, put on ``clock_ns``'s, the wall clock by default), and the ns of audio the
    device lost in front of it (0 almost always).

    Opens at ``rate`` when the device supports it, else at its default rate with resampling.
    ``open()`` raises DeviceNotFoundError / DeviceError; the callback runs in PortAudio's thread.
    """

    def __init__(
        self,
        device: str | int | None,
        on_audio: Callable[[np.ndarray, int, int], None],
        rate: int = 16000,
        block_ms: int = 32,
        clock_ns: Callable[[], int] = time.time_ns,
        monotonic_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.device_spec, self.rate, self.block_ms = device, rate, block_ms
        self._on_audio, self._clock_ns, self._monotonic_ns = on_audio, clock_ns, monotonic_ns
        self._stream: Any = None
        self._resampler: StreamResampler | None = None
        self._samples: SampleClock | None = None
        self.device: DeviceInfo | None = None
        self.device_rate = rate
        self.errors = 0
        self.warm = False
        self.warmup_timeout_s = 3.0
        self._running = threading.Event()
        self._lock = threading.Lock()

    def open(self, rescan: bool = False) -> None:
        sd = _sd()

        def make(device: DeviceInfo, rate: int):
            self._start(rate)
            stream = sd.InputStream(
                device=device.index,
                samplerate=rate,
                channels=1,
                dtype="float32",
                blocksize=max(1, rate * self.block_ms // 1000),
                callback=self._callback,
            )
            self._running.clear()
            return stream

        opened = open_stream("input", self.device_spec, self.rate, rescan, make)
        with self._lock:
            self._stream, self.device, self.device_rate = opened
        # PulseAudio through ALSA delivers nothing for ~1.5 s after a stream opens (and drops
        # that audio): wait until blocks flow so "open" means "listening".
        self.warm = self._running.wait(self.warmup_timeout_s)

    @property
    def is_open(self) -> bool:
        return self._stream is not None

    def _start(self, device_rate: int) -> None:
        """A fresh resampler and sample clock for a stream opening at ``device_rate``."""
        self._resampler = StreamResampler(device_rate, self.rate)
        self._samples = SampleClock(device_rate)

    def _callback(self, indata: np.ndarray, frames: int, time_info: Any, status: Any) -> None:
        arrival_ns = self._monotonic_ns()
        offset_ns = self._clock_ns() - arrival_ns  # the stamps' clock (it may step; this not)
        if status:
            self.errors += 1
        self._running.set()
        assert self._resampler is not None and self._samples is not None
        overflow = bool(getattr(status, "input_overflow", False))
        stamp_ns, lost_ns = self._samples.block(frames, arrival_ns, overflow)
        if overflow:  # the filter's state must not join the audio on both sides of the loss
            self._resampler = StreamResampler(self._resampler.in_rate, self.rate)
        chunk = self._resampler.process(indata[:, 0].copy())
        self._on_audio(chunk, stamp_ns + offset_ns, lost_ns)

    def close(self) -> None:
        with self._lock:
            stream, self._stream = self._stream, None
        if stream is not None:
            close_stream(stream)

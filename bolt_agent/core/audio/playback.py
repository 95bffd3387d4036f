"""Interruptible audio output: a device player (sounddevice) and a paced sink for simulation.

Both queue int16 segments under a tag, report per-tag progress (samples played of total) and
stop at once: ``Player.stop`` silences the PortAudio callback from its next block and aborts the
stream (dropping what the device buffered), then restarts it for the next turn. The returned
``StopReport`` says how long that took and when the last non-silent block went out.

``Player.lost()`` says when the output device went away under an open stream: the stream ended
(a PortAudio error), its callback stalled (a USB speaker unplugged under ALSA), or, with a
``PulseRoute``, the configured PulseAudio sink is gone or the stream was moved off it (what
PulseAudio does when a sink is unloaded: PortAudio sees nothing). The owner then closes the
player and opens it again once the device is back (``open`` refuses a missing sink).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from bolt_agent.core.audio.audio_io import (
    DeviceError,
    DeviceInfo,
    DeviceNotFoundError,
    StreamResampler,
    close_stream,
    float_to_int16,
    int16_to_float,
    open_stream,
)
from bolt_agent.core.audio.pulse_route import PulseRoute, PulseRouteError


@dataclass(frozen=True)
class StopReport:
    stop_s: float  # stop request → output aborted (stop() returned)
    last_audio_s: float  # stop request → end of the last non-silent block handed to the device
    dropped_tags: int  # segments that had not finished


class _Segment:
    __slots__ = ("data", "played", "tag", "total")

    def __init__(self, tag: Hashable, data: np.ndarray, total: int) -> None:
        self.tag, self.data, self.played, self.total = tag, data, 0, total


class _SegmentQueue:
    """Segments in play order, consumed block by block; progress is kept for finished ones."""

    def __init__(self, on_done: Callable[[Hashable], None] | None) -> None:
        self._q: deque[_Segment] = deque()
        self._progress: dict[Hashable, tuple[int, int]] = {}
        self._lock = threading.Lock()
        self._on_done = on_done
        self._gain = self._target_gain = 1.0  # (ducking: ``set_gain``)

    def set_gain(self, gain: float) -> None:
        """Scale what plays from the next block on (0..1), ramped over that block (a step
        would click). With nothing queued it is the level at once: a sink that only fills while
        it has audio would otherwise fade the next line in from the old level."""
        gain = min(1.0, max(0.0, float(gain)))  # (above 1 would wrap int16)
        with self._lock:
            self._target_gain = gain
            if not self._q:
                self._gain = gain

    def add(self, tag: Hashable, data: np.ndarray, total: int) -> None:
        with self._lock:
            self._q.append(_Segment(tag, data, total))
            self._progress[tag] = (0, total)

    def fill(self, out: np.ndarray) -> bool:
        """Fill ``out`` (1-D int16) with queued samples, zeros after; True if anything was real."""
        n, pos, done = len(out), 0, []
        with self._lock:
            while pos < n and self._q:
                seg = self._q[0]
                k = min(n - pos, len(seg.data) - seg.played)
                out[pos : pos + k] = seg.data[seg.played : seg.played + k]
                seg.played += k
                pos += k
                scaled = seg.total if seg.played >= len(seg.data) else seg.played
                if len(seg.data) != seg.total:
                    scaled = round(seg.played * seg.total / max(1, len(seg.data)))
                self._progress[seg.tag] = (scaled, seg.total)
                if seg.played >= len(seg.data):
                    self._q.popleft()
                    done.append(seg.tag)
            gain, target = self._gain, self._target_gain
            self._gain = target
        out[pos:] = 0
        if pos and (gain != 1.0 or target != 1.0):
            ramp = np.linspace(gain, target, pos, dtype=np.float32)
            out[:pos] = np.round(out[:pos] * ramp).astype(np.int16)
        for tag in done:
            if self._on_done:
                self._on_done(tag)
        return pos > 0

    def progress(self, tag: Hashable) -> tuple[int, int]:
        with self._lock:
            return self._progress.get(tag, (0, 0))

    def done(self, tag: Hashable) -> bool:
        played, total = self.progress(tag)
        return total > 0 and played >= total

    def clear(self, keep: Callable[[Hashable, bool], bool] | None = None) -> int:
        """Drop the queued segments, except those not started that ``keep(tag, started)``
        accepts (asked of every segment in play order, so it can tell a turn already heard);
        they play next, in order. Returns how many were dropped."""
        with self._lock:
            n = len(self._q)
            kept = [s for s in self._q if keep is not None and keep(s.tag, s.played > 0)]
            self._q = deque(s for s in kept if not s.played)
            return n - len(self._q)

    def drop(self, tags: set[Hashable]) -> bool:
        """Take the segments of ``tags`` out of the queue, all or none: none is taken when one
        of them has started playing or is not queued (finished). True when all were taken."""
        with self._lock:
            found = [s for s in self._q if s.tag in tags]
            if len(found) != len(tags) or any(s.played for s in found):
                return False
            self._q = deque(s for s in self._q if s.tag not in tags)
            for tag in tags:
                self._progress.pop(tag, None)
            return True

    def forget(self, tag: Hashable) -> None:
        with self._lock:
            self._progress.pop(tag, None)

    def empty(self) -> bool:
        with self._lock:
            return not self._q


class Player:
    """Plays int16 mono segments on an output device in small blocks; interruptible."""

    def __init__(
        self,
        device: str | int | None,
        sample_rate: int,
        block_ms: int = 20,
        latency: float | str = "low",
        on_done: Callable[[Hashable], None] | None = None,
        route: PulseRoute | None = None,
        stall_s: float = 3.0,
    ) -> None:
        self.device_spec, self.sample_rate = device, sample_rate
        self.block_ms, self.latency = block_ms, latency
        self.route = route  # the PulseAudio sink the output must be on (None: not watched)
        # no callback for this long means the device is gone; above PulseAudio's ~1.5 s hold of
        # a (re)started stream
        self.stall_s = stall_s
        self._last_callback_t = 0.0
        self._broken = ""  # why restarting the stream after a stop failed (device gone)
        self.route_error = ""  # why the route could not be checked (pactl missing, no answer)
        self._queue = _SegmentQueue(on_done)
        self._stream: Any = None
        self._halt = False
        self._last_audio_t = 0.0
        self.device: DeviceInfo | None = None
        self.device_rate = sample_rate
        self.underflows = 0  # the device ran dry (PortAudio's output_underflow)
        self.underflows_playing = 0  # ... right after a block of real audio: a gap heard
        self._was_playing = False
        self.warm = False
        self.warmup_timeout_s = 3.0
        self._running = threading.Event()
        self._frames = 0
        self._warm_frames = 0

    def open(self, rescan: bool = False) -> None:
        """Open and start the stream; DeviceNotFoundError / DeviceError when it cannot play on
        the configured device (with a route: the sink is missing, or the stream lands
        elsewhere)."""
        import sounddevice as sd

        if self.route is not None and not self._route_ok(lambda r: r.sink_exists()):
            raise DeviceNotFoundError(f"PulseAudio sink {self.route.sink!r} not found")

        def make(device: DeviceInfo, rate: int):
            stream = sd.OutputStream(
                device=device.index,
                samplerate=rate,
                channels=1,
                dtype="int16",
                blocksize=max(1, rate * self.block_ms // 1000),
                latency=self.latency,
                callback=self._callback,
            )
            self._frames = 0
            self._running.clear()
            self._warm_frames = int(rate * (stream.latency + 0.1))
            return stream

        # PortAudio cannot name a PulseAudio sink: libpulse takes it from PULSE_SINK while the
        # stream is opened (the process's environment is left as it was)
        env = {"PULSE_SINK": self.route.sink} if self.route is not None else None
        opened = open_stream("output", self.device_spec, self.sample_rate, rescan, make, env)
        self._stream, self.device, self.device_rate = opened
        # Some back ends (PulseAudio through ALSA) hold a new stream for ~1.5 s before its clock
        # runs; wait for that here so the first sentence is not delayed.
        self.warm = self._running.wait(self.warmup_timeout_s)
        self._last_callback_t = time.monotonic()
        why = self.route.check() if self.route is not None else None
        if why is not None:  # the sink vanished meanwhile: PulseAudio put the stream elsewhere
            self.close()
            raise DeviceError(f"output not on the configured device: {why}")

    def _route_ok(self, test: Callable[[PulseRoute], bool]) -> bool:
        try:
            return test(self.route)  # type: ignore[arg-type]
        except PulseRouteError as exc:  # PulseAudio not answering: the stream itself will tell
            self.route_error = str(exc)
            return True

    @property
    def is_open(self) -> bool:
        return self._stream is not None

    def lost(self) -> str | None:
        """Why the open output no longer plays on its device, or None (also when closed or
        stopping). Blocks for a ``pactl`` call when routed: call it from a watcher thread."""
        stream = self._stream
        if stream is None:
            return None
        if self._broken:
            return self._broken
        if self._halt:
            return None
        if not stream.active:
            return "the output stream ended (PortAudio error)"
        silent_s = time.monotonic() - self._last_callback_t
        if silent_s > self.stall_s:
            return f"the output stalled: no audio callback for {silent_s:.1f} s"
        if self.route is not None:
            try:
                return self.route.check(force=False)  # asks only after a PulseAudio event
            except PulseRouteError as exc:  # the owner warns; the stall check still works
                self.route_error = str(exc)
                return None
        return None

    def _callback(self, outdata: np.ndarray, frames: int, time_info: Any, status: Any) -> None:
        self._last_callback_t = time.monotonic()
        if status.output_underflow:
            self.underflows += 1
            self.underflows_playing += self._was_playing
        self._frames += frames
        if self._frames >= self._warm_frames:
            self._running.set()
        if self._halt:
            outdata.fill(0)
            self._was_playing = False
            return
        self._was_playing = self._queue.fill(outdata[:, 0])
        if self._was_playing:
            self._last_audio_t = time.monotonic()

    def write(self, tag: Hashable, audio: np.ndarray) -> None:
        """Queue a segment (int16 mono at ``sample_rate``); returns at once. A write to a
        closed player (the device was lost between the caller's ``is_open`` and this call) is
        dropped: the caller's stop after the loss accounts for it."""
        if self._stream is None:
            return
        data = np.asarray(audio, dtype=np.int16)
        if self.device_rate != self.sample_rate:
            resampler = StreamResampler(self.sample_rate, self.device_rate)
            data = float_to_int16(resampler.process(int16_to_float(data), last=True))
        self._queue.add(tag, data, len(audio))

    def progress(self, tag: Hashable) -> tuple[int, int]:
        """(samples played, total) of a segment, in the segment's own sample rate."""
        return self._queue.progress(tag)

    def done(self, tag: Hashable) -> bool:
        return self._queue.done(tag)

    def forget(self, tag: Hashable) -> None:
        self._queue.forget(tag)

    def drop(self, tags: set[Hashable]) -> bool:
        """Take segments that have not started out of the queue (all or none): what plays is
        not touched."""
        return self._queue.drop(tags)

    def set_gain(self, gain: float) -> None:
        """Scale what plays (1: as written): the robot ducks while someone speaks over it.
        Applied in the callback, so it takes the device's buffer (``latency``) to be heard."""
        self._queue.set_gain(gain)

    def stop(self, keep: Callable[[Hashable, bool], bool] | None = None) -> StopReport:
        """Silence now: the callback writes zeros from its next block, the stream is aborted
        (buffered audio dropped) and restarted, empty but for the segments not started that
        ``keep`` accepts (``_SegmentQueue.clear``)."""
        t0 = time.monotonic()
        self._halt = True
        dropped = self._queue.clear(keep)
        if self._stream is not None:
            self._stream.abort()
        t1 = time.monotonic()
        try:
            if self._stream is not None:
                self._stream.start()
        except Exception as exc:  # the device went away: ``lost()`` says so, the owner reopens
            self._broken = f"restarting the output failed: {exc}"
        finally:
            self._last_callback_t = time.monotonic()
            self._halt = False
        return StopReport(t1 - t0, max(0.0, self._last_audio_t - t0), dropped)

    def close(self) -> None:
        stream, self._stream = self._stream, None
        self._queue.clear()
        self._broken = ""
        if stream is not None:
            close_stream(stream)


class PacedSink:
    """Headless stand-in for a device: emits blocks through ``emit(int16 block)`` in real time
    from its own thread, with the same write/progress/stop interface as ``Player``. A block
    ``emit`` fails on is dropped and handed to ``on_error(exc)`` (the thread goes on).

    ``late_s`` is, while ``emit`` runs, how late (> 0) or early the block goes out against its
    slot on the stream's own clock, which runs on unbroken while audio flows. A publisher
    stamps the block with its slot (now - ``late_s``), so the stamps of a stream are as regular
    as a device's sample clock: an echo canceller lines them up with the microphone, and the
    emission's jitter (a write wakes the thread early; a busy machine wakes it late) stays out
    of them."""

    def __init__(
        self,
        emit: Callable[[np.ndarray], None],
        sample_rate: int,
        block_ms: int = 20,
        on_done: Callable[[Hashable], None] | None = None,
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        self._emit, self.sample_rate = emit, sample_rate
        self._on_error = on_error
        self._block = max(1, sample_rate * block_ms // 1000)
        self._queue = _SegmentQueue(on_done)
        self._wake = threading.Event()
        self._lock = threading.Lock()  # held while a block is emitted; stop() waits for it
        self._thread: threading.Thread | None = None
        self._running = False
        self._last_audio_t = 0.0
        self.late_s = 0.0

    def open(self, rescan: bool = False) -> None:
        self._running = True
        self._thread = threading.Thread(target=self._run, name="paced-sink", daemon=True)
        self._thread.start()

    @property
    def is_open(self) -> bool:
        return self._running

    def _run(self) -> None:
        period = self._block / self.sample_rate
        next_t = time.monotonic()
        while self._running:
            if self._queue.empty():
                self._wake.wait(0.5)
                self._wake.clear()
                next_t = time.monotonic()
                continue
            block = np.zeros(self._block, dtype=np.int16)
            with self._lock:
                if self._queue.fill(block):
                    self.late_s = time.monotonic() - next_t
                    self._emit_block(block)
                    self._last_audio_t = time.monotonic()
            next_t += period
            delay = next_t - time.monotonic()
            if delay > 0:
                self._wake.wait(delay)  # paced like a device clock; a write/stop wakes it early
                self._wake.clear()

    def _emit_block(self, block: np.ndarray) -> None:
        try:
            self._emit(block)
        except Exception as exc:
            if self._on_error is None:
                raise
            self._on_error(exc)

    def write(self, tag: Hashable, audio: np.ndarray) -> None:
        self._queue.add(tag, np.asarray(audio, dtype=np.int16), len(audio))
        self._wake.set()

    def progress(self, tag: Hashable) -> tuple[int, int]:
        return self._queue.progress(tag)

    def done(self, tag: Hashable) -> bool:
        return self._queue.done(tag)

    def forget(self, tag: Hashable) -> None:
        self._queue.forget(tag)

    def drop(self, tags: set[Hashable]) -> bool:
        return self._queue.drop(tags)

    def set_gain(self, gain: float) -> None:
        self._queue.set_gain(gain)

    def stop(self, keep: Callable[[Hashable, bool], bool] | None = None) -> StopReport:
        t0 = time.monotonic()
        with self._lock:
            dropped = self._queue.clear(keep)
        return StopReport(time.monotonic() - t0, max(0.0, self._last_audio_t - t0), dropped)

    def close(self) -> None:
        self._running = False
        self._queue.clear()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)

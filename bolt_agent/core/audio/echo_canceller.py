"""Acoustic echo cancellation: take the robot's own voice out of the microphone signal.

The canceller needs two streams on one time line: the *reference* (what the robot plays, the
far end) and the *microphone* (the near end, which holds the user plus the robot's voice as the
room returns it, 30-80 ms later and with a reflection tail). Both come with stamps, so the
reference is kept on a sample time line (``ReferenceTimeline``) and each microphone block is
matched with the reference of the same instants, whatever order or burst size the two topics
arrive in. Where no reference was played (the robot is quiet), the reference is silence and the
microphone passes almost unchanged.

The adaptive filter is SpeexDSP's multi-delay block frequency-domain filter (MDF) with its
residual-echo suppressor, through the ``pyaec`` binding (aec-rs; wheels for x86_64 and aarch64,
0.5 MB). Measured in the simulated room (``core.audio.room``; docs/speech.md) against WebRTC's
AEC3 (livekit's ``AudioProcessingModule``): AEC3 removes more echo (33-38 dB against 25-28 dB
once converged) but its suppressor also removed the user's words while both spoke ("Wait, stop,
I meant the blue one" came out "Wait, stop."), and this stage exists to hear those words; MDF
kept them whole. MDF converges within the robot's first sentence
(about 5 dB over it, 25-45 dB from the second on, docs/speech.md); until ``converged`` (the
last second of the robot's voice came out ``converge_db`` quieter) the listener keeps the
stricter barge-in thresholds and only a stop word interrupts, and the robot's own words in a
transcript are recognised as its echo (``core.asr.barge_in``).

``EchoCanceller`` is the small interface the listener uses; ``SpeexCanceller`` is the one
implementation, and tests may pass any object with the same two methods.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import threading
from abc import ABC, abstractmethod

import numpy as np

from bolt_agent.core.audio.audio_io import float_to_int16, int16_to_float

_INT16_P = ctypes.POINTER(ctypes.c_int16)
SAMPLE_RATE = 16000
FRAME = 160  # 10 ms: the canceller's block
LATENCY_S = FRAME / SAMPLE_RATE  # what ``SpeexCanceller.process`` adds to the microphone
_NS = 1_000_000_000


def sample_index(stamp_ns: int) -> int:
    """The 16 kHz sample at ``stamp_ns`` (rounded): the time line both streams share."""
    return (stamp_ns * SAMPLE_RATE + _NS // 2) // _NS


def _ratio_db(power: float, than: float) -> float:
    """``power`` over ``than`` in dB; 0 while either is not yet measured."""
    return 10.0 * math.log10(power / than) if power > 0.0 and than > 0.0 else 0.0


def sample_stamp(index: int) -> int:
    """The stamp in ns of 16 kHz sample ``index`` (``sample_index`` gives it back)."""
    return index * _NS // SAMPLE_RATE


class ReferenceTimeline:
    """What the robot played, by absolute sample index, for the last ``keep_s`` seconds.

    ``write`` may come from any thread and in any block size; ``read`` returns silence where
    nothing was written (the robot was quiet, or the reference is older than ``keep_s``).

    A block stamped before, or within ``snap`` samples after, where the previous one ended is
    placed right there: a player's blocks are one continuous stream (the resampler in front of
    the timeline holds some samples back, and stamps may jitter by a few ms); a later stamp is
    a pause. A block placed where an earlier one lies would overwrite samples another process
    may already have mixed or cancelled, and two such timelines (the simulated room's and the
    canceller's) would part for the rest of the sentence."""

    def __init__(self, keep_s: float = 3.0, snap: int = SAMPLE_RATE // 50) -> None:
        self._size = int(keep_s * SAMPLE_RATE)
        self._ring = np.zeros(self._size, np.float32)
        self._written = np.full(self._size, -1, np.int64)  # the sample index each slot holds
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)  # notified on every write
        self._snap = snap
        self.latest = -1  # the last sample index written (-1: none yet)

    def write(self, samples: np.ndarray, start: int) -> None:
        samples = np.asarray(samples, np.float32).reshape(-1)[-self._size :]
        if not len(samples):
            return
        if self.latest >= 0 and start <= self.latest + 1 + self._snap:
            # the same stream going on; a block stamped early never overwrites what came
            # before it: another process may already have mixed or cancelled those samples
            start = self.latest + 1
        idx = np.arange(start, start + len(samples), dtype=np.int64)
        slots = idx % self._size
        with self._lock:
            self._ring[slots] = samples
            self._written[slots] = idx
            self.latest = int(idx[-1])
            self._arrived.notify_all()

    def wait_for(self, index: int, timeout: float) -> bool:
        """Until the reference has been written up to sample ``index`` (False after ``timeout``
        seconds). The microphone's block may be processed before what the robot played at the
        same time has arrived (a busy executor delivered audio/output 0.2-0.4 s late in the
        DDS test); cancelled against silence, its echo would pass whole."""
        with self._arrived:
            return self._arrived.wait_for(lambda: self.latest >= index, timeout)

    def read(self, start: int, count: int) -> np.ndarray:
        idx = np.arange(start, start + count, dtype=np.int64)
        slots = idx % self._size
        with self._lock:
            out = self._ring[slots].copy()
            out[self._written[slots] != idx] = 0.0
        return out


class EchoCanceller(ABC):
    """Removes the reference's echo from the microphone, block by block."""

    @abstractmethod
    def reference(self, samples: np.ndarray, stamp_ns: int) -> None:
        """The robot played ``samples`` (16 kHz mono float32) from ``stamp_ns`` (any thread)."""

    @abstractmethod
    def process(self, mic: np.ndarray, stamp_ns: int) -> np.ndarray:
        """The microphone block captured from ``stamp_ns``, with the echo removed (same length)."""

    @property
    def erle_db(self) -> float:
        """Echo-return-loss enhancement so far, in dB, over blocks where the robot spoke."""
        return 0.0

    @property
    def converged(self) -> bool:
        """It has heard enough of the robot to have modelled the room (until then the
        listener keeps the stricter barge-in thresholds, and only stop words interrupt)."""
        return True


class SpeexCanceller(EchoCanceller):
    """SpeexDSP MDF + residual-echo suppression (``pyaec``), 10 ms frames at 16 kHz.

    ``filter_ms`` is the longest echo path it can model: the room's delay plus its tail, plus
    the playback/capture latency when the reference is stamped at the speaker's input rather
    than at the sound (devices: 250 ms or more; topics and the simulated room: 200 ms).
    """

    def __init__(
        self, filter_ms: int = 200, preprocess: bool = True, converge_db: float = 15.0
    ) -> None:
        if filter_ms < 10:
            raise ValueError(f"filter_ms must be at least 10, not {filter_ms}")
        try:
            import pyaec
        except ImportError as exc:  # the binding ships in the lock; a clear reason if it is not
            raise RuntimeError(
                "echo_mode 'aec' needs the pyaec package (pip install pyaec)"
            ) from exc
        lib = pyaec.lib
        if lib is None:
            raise RuntimeError("pyaec's shared library could not be loaded")
        self._lib = lib
        taps = int(filter_ms * SAMPLE_RATE / 1000)
        self._handle = lib.AecNew(FRAME, taps, SAMPLE_RATE, bool(preprocess))
        if not self._handle:
            raise RuntimeError("pyaec could not create an echo canceller")
        self.filter_ms = filter_ms
        self.converge_db = converge_db
        self.reference_s = 0.0  # of the robot's voice processed (its echo modelled from it)
        self._recent = [0.0, 0.0]  # mic and output power over the last ~1 s of robot voice
        self._converged = False
        self.timeline = ReferenceTimeline()
        self._pending = np.zeros(0, np.float32)  # mic samples short of a whole frame
        self._pending_start = 0  # the sample index of _pending[0]
        # cleaned samples not yet returned. It starts with one frame of silence, so every block
        # gets as many samples back as it brought, always 10 ms late (``LATENCY_S``): with
        # o + p = FRAME kept (o cleaned, p pending), o + whole >= len(block) for any block
        self._out = np.zeros(FRAME, np.float32)
        self._mic_power = self._out_power = 0.0  # over frames with reference (for ERLE)
        self._lock = threading.Lock()  # process() and close() from different threads

    def reference(self, samples: np.ndarray, stamp_ns: int) -> None:
        self.timeline.write(samples, sample_index(stamp_ns))

    def process(self, mic: np.ndarray, stamp_ns: int) -> np.ndarray:
        mic = np.asarray(mic, np.float32).reshape(-1)
        start = sample_index(stamp_ns)
        with self._lock:
            if self._handle is None:
                return mic
            if len(self._pending) and self._pending_start + len(self._pending) != start:
                # a gap or an overlap in the mic stream: the carried samples are returned as
                # they are rather than matched with the wrong reference
                self._out = np.concatenate([self._out, self._pending])
                self._pending = np.zeros(0, np.float32)
            if not len(self._pending):
                self._pending_start = start
            buf = np.concatenate([self._pending, mic])
            whole = len(buf) // FRAME * FRAME
            cleaned = [self._out]
            for i in range(0, whole, FRAME):
                # frame by frame: the reference of a block's last frames may still be arriving
                ref = self.timeline.read(self._pending_start + i, FRAME)
                cleaned.append(self._frame(buf[i : i + FRAME], ref))
            self._pending = buf[whole:]
            self._pending_start += whole
            out = np.concatenate(cleaned)
            self._out = out[len(mic) :]
            return out[: len(mic)]

    def _frame(self, mic: np.ndarray, ref: np.ndarray) -> np.ndarray:
        m, r = float_to_int16(mic), float_to_int16(ref)
        o = np.empty(FRAME, np.int16)
        m_p, r_p, o_p = (a.ctypes.data_as(_INT16_P) for a in (m, r, o))
        self._lib.AecCancelEcho(self._handle, m_p, r_p, o_p, FRAME)
        out = int16_to_float(o)
        if float(np.abs(ref).max()) > 1e-3:
            self.reference_s += FRAME / SAMPLE_RATE
            mic_power, out_power = float(np.dot(mic, mic)), float(np.dot(out, out))
            self._mic_power += mic_power
            self._out_power += out_power
            recent = self._recent
            recent[0] += (mic_power - recent[0]) / 100.0  # (100 frames: 1 s)
            recent[1] += (out_power - recent[1]) / 100.0
            if not self._converged and self.reference_s >= 1.0 and recent[0] > 0.0:
                # latched: the room does not change under the robot, and the user talking
                # over it would lower the figure without any loss of the model
                self._converged = recent[0] >= recent[1] * 10.0 ** (self.converge_db / 10.0)
        return out

    @property
    def converged(self) -> bool:
        return self._converged

    @property
    def recent_erle_db(self) -> float:
        """The ERLE over about the last second of the robot's voice (the user talking over it
        lowers it)."""
        return _ratio_db(*self._recent)

    @property
    def erle_db(self) -> float:
        return _ratio_db(self._mic_power, self._out_power)

    def close(self) -> None:
        with self._lock:
            if self._handle is not None:
                self._lib.AecDestroy(self._handle)
                self._handle = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: nothing left to free with
            self.close()

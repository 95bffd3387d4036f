"""Audio on its way to the ASR stage: received blocks checked, queued for the VAD thread with
a cap, and every sample lost on the way accounted for.

Blocks come from a PortAudio callback or an ``audio/input`` subscription and are consumed by one
VAD thread. Between them sits ``AudioIngest``: a queue of typed ``AudioBlock``s whose total audio
is capped (a flood is dropped and counted, never buffered without bound), with the samples lost
in front of each block carried on the next block taken, so the listener never joins the words
on both sides of a gap. ``StreamGaps`` finds audio missing by the stamps of a topic's blocks;
``audio_block_problem`` says why a block must be refused before any conversion. No ROS here:
``test/test_core_audio_ingest.py`` drives it synchronously.
"""

from __future__ import annotations

import math
import queue
import threading
from dataclasses import dataclass

import numpy as np

from bolt_agent.core.asr.vad_segmenter import SAMPLE_RATE

_NS = 1_000_000_000
#: sample rates a received block may have (0 = the listener's own rate)
MIN_RATE, MAX_RATE, MAX_CHANNELS = 8_000, 192_000, 16


def audio_block_problem(
    n_samples: int, channels: int, sample_rate: int, max_chunk_s: float
) -> str | None:
    """Why an interleaved int16 block cannot be taken, or None. Checked before any conversion:
    an odd sample count for two channels once ended the ASR node inside ``to_mono``."""
    rate = sample_rate or SAMPLE_RATE
    if not MIN_RATE <= rate <= MAX_RATE:
        return f"sample_rate {sample_rate} outside [{MIN_RATE}, {MAX_RATE}]"
    if not 1 <= channels <= MAX_CHANNELS:
        return f"channels {channels} outside [1, {MAX_CHANNELS}]"
    if n_samples % channels:
        return f"{n_samples} samples is not a whole number of {channels}-channel frames"
    seconds = n_samples / channels / rate
    if not math.isfinite(max_chunk_s) or seconds > max_chunk_s:
        return f"block of {seconds:.2f} s is longer than max_chunk_s {max_chunk_s} s"
    return None


class StreamGaps:
    """Finds audio missing from a stream of stamped blocks (a best-effort topic that lost a
    block, a publisher that skipped some): the time between where the previous block ended and
    where this one begins by its stamp. Unstamped blocks (0) and stamps that go back (a bag
    replayed again, a clock reset) start afresh; a gap up to ``tolerance_ns`` is stamping
    jitter (a publisher that stamps when it sends, late under load), not lost words; None
    finds none."""

    def __init__(self, tolerance_ns: int | None = _NS // 4) -> None:
        self.tolerance_ns = tolerance_ns
        self._next_ns: int | None = None

    def block(self, stamp_ns: int, duration_ns: int) -> int:
        """The ns missing before a block that starts at ``stamp_ns`` and lasts
        ``duration_ns`` (0: none, or it cannot be told)."""
        expected, self._next_ns = self._next_ns, stamp_ns + duration_ns if stamp_ns > 0 else None
        if expected is None or stamp_ns <= 0 or self.tolerance_ns is None:
            return 0
        missing = stamp_ns - expected
        return missing if missing > self.tolerance_ns else 0

    def reset(self) -> None:
        self._next_ns = None


@dataclass(frozen=True)
class AudioBlock:
    """One block for the VAD thread: 16 kHz mono float32, the stamp of its first sample, and
    the samples lost in front of it (dropped on overflow, or missing by the stamps)."""

    samples: np.ndarray
    stamp_ns: int
    lost: int = 0


@dataclass(frozen=True)
class IngestCounts:
    """What the ingest has lost and skipped so far, in samples (``/diagnostics``)."""

    queued: int  # waiting for the VAD thread
    depth: int  # blocks waiting
    dropped: int  # dropped on overflow
    gaps: int  # losses beyond the tolerance
    gap_samples: int  # samples in them
    skipped: int  # lost samples the VAD thread has stepped over


class AudioIngest:
    """The queue between audio callbacks (any thread) and the VAD thread (one).

    ``put`` is called from the producers, ``get`` from the consumer; ``close`` wakes the consumer
    with ``None``. Limits are passed per call, since they are runtime parameters."""

    def __init__(self) -> None:
        self._q: queue.Queue[AudioBlock | None] = queue.Queue()
        self._lock = threading.Lock()
        self._queued = 0  # samples in _q
        self._pending_lost = 0  # samples lost since the last block queued
        self._dropped = self._skipped = 0
        self._gap_count = self._gap_samples = 0
        #: audio/input blocks missing by their stamps, every ns of it (``lost_samples`` applies
        #: the tolerance, to the microphone's losses as well)
        self.stream_gaps = StreamGaps(tolerance_ns=0)

    def reset(self) -> None:
        """A fresh queue and stream (activation); the totals are kept."""
        with self._lock:
            self._q, self._queued, self._pending_lost = queue.Queue(), 0, 0
        self.stream_gaps.reset()

    def lost_samples(self, missing_ns: int, tolerance_ns: int) -> int:
        """Samples to skip for ``missing_ns`` of missing audio (0 up to ``tolerance_ns``; a
        tolerance of 0 never skips), counted as a gap."""
        if not tolerance_ns or missing_ns <= tolerance_ns:
            return 0
        lost = missing_ns * SAMPLE_RATE // _NS
        with self._lock:
            self._gap_count += 1
            self._gap_samples += lost
        return lost

    def put(self, samples: np.ndarray, stamp_ns: int, lost: int, max_queued: int) -> bool:
        """Queue a block with ``lost`` samples missing in front of it; False when the queue
        already holds ``max_queued`` samples: the block is dropped, and its samples are added
        to the loss the next queued block carries."""
        with self._lock:
            self._pending_lost += lost
            if self._queued + len(samples) > max_queued:
                self._pending_lost += len(samples)
                self._dropped += len(samples)
                return False
            self._queued += len(samples)
            lost, self._pending_lost = self._pending_lost, 0
        self._q.put(AudioBlock(samples, stamp_ns, lost))
        return True

    def get(self, timeout: float | None) -> tuple[AudioBlock | None, int]:
        """The next block (None after ``close``) and the samples still queued behind it; raises
        ``queue.Empty`` after ``timeout`` s without one."""
        block = self._q.get(timeout=timeout)
        with self._lock:
            if block is not None:
                self._queued -= len(block.samples)
            return block, self._queued

    def skipped(self, samples: int) -> None:
        """The consumer stepped over ``samples`` lost in front of a block."""
        with self._lock:
            self._skipped += samples

    def close(self) -> None:
        self._q.put(None)

    def counts(self) -> IngestCounts:
        with self._lock:
            return IngestCounts(
                self._queued,
                self._q.qsize(),
                self._dropped,
                self._gap_count,
                self._gap_samples,
                self._skipped,
            )

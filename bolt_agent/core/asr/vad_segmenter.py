"""Streaming voice-activity segmentation: push 16 kHz float32 chunks, get speech start/end events.

The probabilities come from the Silero VAD model that faster-whisper's wheel ships
(``assets/silero_vad_v6.onnx``, with faster-whisper's session settings), run window by window
with its recurrent state carried between calls, so pushing audio in any chunk size gives the
same result as one long call. Offsets are sample indices since the start of the stream
(``skip`` advances them over gaps).
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

SAMPLE_RATE = 16000
WINDOW = 512  # Silero's window at 16 kHz (32 ms)
CONTEXT = 64  # samples of the previous window the v5+/v6 model sees


@dataclass(frozen=True)
class VadConfig:
    threshold: float = 0.5
    min_silence_ms: int = 500
    speech_pad_ms: int = 80
    start_pad_ms: int | None = None  # audio kept before the detected onset (None: speech_pad_ms);
    # soft onsets ("How are you…") are detected a few windows late, so the start wants more
    min_speech_ms: int = 150
    max_speech_s: float = 20.0
    neg_threshold: float | None = None  # default: threshold - 0.15
    # reset the model's recurrent state after this much audio without speech (0 = never):
    # carried over long silences, Silero's state drifts and detects onsets late (the first words
    # of 2 of 8 utterances were cut in the acoustic benchmark; with resets, none)
    idle_reset_s: float = 2.0

    @property
    def negative(self) -> float:
        if self.neg_threshold is not None:
            return self.neg_threshold
        return max(self.threshold - 0.15, 0.01)


@dataclass(frozen=True)
class SpeechStart:
    offset: int  # first sample of the utterance (padded by start_pad_ms)
    onset: int = field(default=-1, compare=False)  # first window detected as speech (unpadded)


@dataclass(frozen=True)
class SpeechEnd:
    start: int
    end: int  # one past the last sample (padded)
    audio: np.ndarray = field(repr=False, compare=False)
    forced: bool = False  # cut at max_speech_s, not at a silence
    onset: int = field(default=-1, compare=False)  # the SpeechStart's onset


VadEvent = SpeechStart | SpeechEnd


class SpeechProbability(Protocol):
    """Speech probability per 512-sample window, state carried between calls."""

    def reset(self) -> None: ...

    def __call__(self, windows: np.ndarray) -> np.ndarray: ...


def silero_model_path() -> Path:
    """The Silero VAD model that the faster-whisper wheel ships, found without importing
    faster-whisper (its package imports PyAV and huggingface_hub: ~22 MiB the node never uses)."""
    spec = importlib.util.find_spec("faster_whisper")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("faster-whisper is not installed: its wheel carries Silero VAD")
    path = Path(next(iter(spec.submodule_search_locations))) / "assets" / "silero_vad_v6.onnx"
    if not path.exists():
        raise FileNotFoundError(f"Silero VAD model missing: {path}")
    return path


@functools.lru_cache(maxsize=1)
def _silero_session():
    """One onnxruntime session per process, shared by every stream (the recurrent state is an
    input, not held by the session), with faster-whisper's own settings for this model."""
    import onnxruntime

    opts = onnxruntime.SessionOptions()
    opts.inter_op_num_threads = 1
    opts.intra_op_num_threads = 1
    opts.enable_cpu_mem_arena = False
    opts.log_severity_level = 4
    return onnxruntime.InferenceSession(
        str(silero_model_path()), providers=["CPUExecutionProvider"], sess_options=opts
    )


class SileroStream:
    """faster-whisper's bundled Silero VAD, run incrementally (h/c state and context kept)."""

    def __init__(self) -> None:
        self._session = None
        self.reset()

    def load(self) -> SileroStream:
        self._session = _silero_session()
        return self

    def reset(self) -> None:
        self._h = np.zeros((1, 1, 128), dtype=np.float32)
        self._c = np.zeros((1, 1, 128), dtype=np.float32)
        self._context = np.zeros(CONTEXT, dtype=np.float32)

    def __call__(self, windows: np.ndarray) -> np.ndarray:
        if self._session is None:
            self.load()
        assert self._session is not None
        windows = np.asarray(windows, dtype=np.float32).reshape(-1, WINDOW)
        if len(windows) == 0:
            return np.zeros(0, dtype=np.float32)
        contexts = np.vstack([self._context[None, :], windows[:-1, -CONTEXT:]])
        batch = np.concatenate([contexts, windows], axis=1)
        probs, self._h, self._c = self._session.run(
            None, {"input": batch, "h": self._h, "c": self._c}
        )
        self._context = windows[-1, -CONTEXT:].copy()
        return np.asarray(probs, dtype=np.float32).reshape(-1)


class _AudioBuffer:
    """A growable float32 buffer addressed by absolute sample offsets."""

    def __init__(self) -> None:
        self._data = np.zeros(SAMPLE_RATE * 4, dtype=np.float32)
        self._n = 0
        self.start = 0

    @property
    def end(self) -> int:
        return self.start + self._n

    def append(self, x: np.ndarray) -> None:
        if self._n + len(x) > len(self._data):
            grown = np.zeros(max(2 * len(self._data), self._n + len(x)), dtype=np.float32)
            grown[: self._n] = self._data[: self._n]
            self._data = grown
        self._data[self._n : self._n + len(x)] = x
        self._n += len(x)

    def slice(self, a: int, b: int) -> np.ndarray:
        a, b = max(a, self.start), min(b, self.end)
        return self._data[a - self.start : b - self.start].copy()

    def drop_before(self, offset: int) -> None:
        k = min(max(0, offset - self.start), self._n)
        if k:
            self._data[: self._n - k] = self._data[k : self._n]
            self._n -= k
            self.start += k

    def reset(self, offset: int) -> None:
        self._n, self.start = 0, offset


class VadSegmenter:
    """Turns a 16 kHz stream into SpeechStart/SpeechEnd events (SpeechEnd carries the audio)."""

    def __init__(self, config: VadConfig | None = None, model: SpeechProbability | None = None):
        self.config = config or VadConfig()
        self.model: SpeechProbability = model if model is not None else SileroStream()
        self._threshold = self.config.threshold
        self._negative = self.config.negative
        self._min_speech = self._ms(self.config.min_speech_ms)
        start_pad = self.config.start_pad_ms
        self._start_pad = self._ms(self.config.speech_pad_ms if start_pad is None else start_pad)
        self._buf = _AudioBuffer()
        self._pending = np.zeros(0, dtype=np.float32)
        self._processed = 0  # offset of the first sample not yet given to the model
        self._idle = 0  # samples analysed since speech (or a speech candidate) was last seen
        self._reset_state()

    @staticmethod
    def _ms(ms: float) -> int:
        return int(ms * SAMPLE_RATE / 1000)

    def _reset_state(self) -> None:
        self._start: int | None = None  # utterance start (padded) while in speech
        self._onset = -1  # where speech was detected (unpadded) while in speech
        self._candidate: int | None = None  # first speech window before min_speech is reached
        self._speech_run = 0
        self._gap = 0
        self._temp_end: int | None = None

    # --- public ------------------------------------------------------------------------------
    @property
    def offset(self) -> int:
        """Samples received so far (the stream position)."""
        return self._buf.end

    @property
    def in_speech(self) -> bool:
        return self._start is not None

    @property
    def speech_start(self) -> int | None:
        """First sample of the open utterance's audio (padded), None when not in speech."""
        return self._start

    @property
    def speech_onset(self) -> int | None:
        """Where speech was detected in the open utterance (unpadded), None when not in speech."""
        return self._onset if self._start is not None else None

    @property
    def pending_end(self) -> int | None:
        """Where the utterance will end if the silence that has begun lasts ``min_silence_ms``
        (the end ``SpeechEnd`` would then carry), once that much audio is here; else None.

        Lets a caller transcribe early while the VAD waits out the silence: the
        ``SpeechEnd`` that follows has this ``end`` and exactly ``audio_between(start, end)``."""
        if self._start is None or self._temp_end is None:
            return None
        end = self._temp_end + self._ms(self.config.speech_pad_ms)
        return end if self._buf.end >= end else None

    @property
    def silence_samples(self) -> int:
        """Samples analysed since the silence in progress began (0 when none has begun)."""
        if self._start is None or self._temp_end is None:
            return 0
        return self._processed - self._temp_end

    def end_now(self) -> SpeechEnd | None:
        """End the open utterance at the silence in progress, before ``min_silence_ms`` (the
        caller decided from the words that the turn is over). The event is the one the VAD
        would have given had the silence lasted: same ``end``, same audio. None while no
        silence has begun or its padded end is not buffered yet (``pending_end``)."""
        end = self.pending_end
        if end is None:
            return None
        return self._end(end)

    def audio_between(self, start: int, end: int) -> np.ndarray:
        """Buffered audio in [start, end) (clipped to what is buffered)."""
        return self._buf.slice(start, end)

    def current_audio(self) -> np.ndarray:
        """The utterance so far (empty when not in speech)."""
        if self._start is None:
            return np.zeros(0, dtype=np.float32)
        return self._buf.slice(self._start, self._buf.end)

    def set_sensitivity(self, threshold: float, min_speech_ms: float) -> None:
        """Change the start threshold and minimum speech length at run time (barge-in)."""
        self._threshold = threshold
        self._negative = max(min(self.config.negative, threshold - 0.15), 0.01)
        self._min_speech = self._ms(min_speech_ms)

    def reset_sensitivity(self) -> None:
        self.set_sensitivity(self.config.threshold, self.config.min_speech_ms)
        self._negative = self.config.negative

    def push(self, chunk: np.ndarray, vad_input: np.ndarray | None = None) -> list[VadEvent]:
        """Add audio; returns the events it completed (in stream order). ``vad_input`` (as long
        as ``chunk``): what the speech model judges instead, while ``chunk`` is what is kept
        (the listener gates residual echo out of the decision, not out of the words)."""
        x = np.asarray(chunk, dtype=np.float32).reshape(-1)
        self._buf.append(x)
        if vad_input is not None:
            v = np.asarray(vad_input, dtype=np.float32).reshape(-1)
            if len(v) != len(x):
                raise ValueError(f"vad_input has {len(v)} samples, the chunk {len(x)}")
            x = v
        self._pending = np.concatenate([self._pending, x]) if len(self._pending) else x
        k = len(self._pending) // WINDOW
        events: list[VadEvent] = []
        if k:
            windows = self._pending[: k * WINDOW].reshape(k, WINDOW)
            self._pending = self._pending[k * WINDOW :].copy()
            reset_at = int(self.config.idle_reset_s * SAMPLE_RATE)
            for window in windows:  # one at a time: the state may be reset between two
                if reset_at and self._idle >= reset_at:
                    self.model.reset()
                    self._idle = 0
                events.extend(self._step(float(self.model(window[None])[0]), self._processed))
                self._processed += WINDOW
                idle = self._start is None and self._candidate is None
                self._idle = self._idle + WINDOW if idle else 0
        if self._start is None:  # keep only what a future start's padding may need
            first_needed = self._candidate if self._candidate is not None else self._processed
            self._buf.drop_before(first_needed - self._start_pad - WINDOW)
        return events

    def process(self, chunks: Iterable[np.ndarray], flush: bool = True) -> Iterator[VadEvent]:
        """Generator over a whole stream of chunks (tests, offline files)."""
        for chunk in chunks:
            yield from self.push(chunk)
        if flush:
            yield from self.flush()

    def flush(self) -> list[VadEvent]:
        """End of stream: close an open utterance."""
        events: list[VadEvent] = []
        if self._start is not None:
            end = SpeechEnd(self._start, self._buf.end, self.current_audio(), onset=self._onset)
            events.append(end)
        self._reset_state()
        return events

    def skip(self, samples: int) -> None:
        """Advance the stream position over audio that is not analysed (gated); drops an open
        utterance and the model state."""
        self.model.reset()
        self._reset_state()
        self._idle = 0
        end = self._buf.end + int(samples)
        self._buf.reset(end)
        self._pending = np.zeros(0, dtype=np.float32)
        self._processed = end

    # --- state machine -----------------------------------------------------------------------
    def _step(self, p: float, w_start: int) -> list[VadEvent]:
        cfg = self.config
        w_end = w_start + WINDOW
        pad = self._ms(cfg.speech_pad_ms)
        if self._start is None:
            if p >= self._threshold:
                if self._candidate is None:
                    self._candidate = w_start
                self._speech_run += WINDOW
                self._gap = 0
                if self._speech_run >= self._min_speech:
                    self._onset = self._candidate
                    self._start = max(self._buf.start, self._candidate - self._start_pad)
                    self._candidate, self._speech_run, self._temp_end = None, 0, None
                    return [SpeechStart(self._start, self._onset)]
            elif self._candidate is not None and p < self._negative:
                self._gap += WINDOW
                if self._gap >= min(self._ms(cfg.min_silence_ms), self._ms(100)):
                    self._candidate, self._speech_run, self._gap = None, 0, 0
            return []
        if p >= self._threshold:
            self._temp_end = None
        elif p < self._negative and self._temp_end is None:
            self._temp_end = w_start
        if self._temp_end is not None and w_end - self._temp_end >= self._ms(cfg.min_silence_ms):
            return [self._end(min(self._temp_end + pad, self._buf.end))]
        if w_end - self._start >= int(cfg.max_speech_s * SAMPLE_RATE):
            return [self._end(w_end, forced=True)]
        return []

    def _end(self, end: int, forced: bool = False) -> SpeechEnd:
        assert self._start is not None
        audio = self._buf.slice(self._start, end)
        event = SpeechEnd(self._start, end, audio, forced, self._onset)
        self._reset_state()
        return event

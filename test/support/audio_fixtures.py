"""Audio test fixtures: a private PulseAudio daemon with null sinks, and Piper-made speech.

Import the fixtures into a test module (``from support.audio_fixtures import pulse, speech_wav``).
The daemon runs under a private runtime directory (never the user's), is reached through
``env(sink=..., source=...)`` per process, and is stopped by its pid at the end of the session.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from bolt_agent.testing.pulse_server import PulseServer, wait_for  # noqa: F401 - re-exported for tests
from bolt_agent.testing.voices import wer  # noqa: F401 - re-exported for tests


@pytest.fixture(scope="session")
def pulse(tmp_path_factory) -> Iterator[PulseServer]:
    server = PulseServer.start(tmp_path_factory.mktemp("pulse"))
    try:
        yield server
    finally:
        server.stop()


class Recorder:
    """``parec`` of one PulseAudio source (a sink's monitor, a microphone), 16 kHz mono
    16-bit, into a raw file: what really reached that device, recorded beside the node.
    ``latency_ms``: ask parec for short fragments (None: its default)."""

    RATE = 16000

    def __init__(
        self, pulse: PulseServer, source: str, path: Path, latency_ms: int | None = None
    ) -> None:
        self.path = path
        args = ["parec", f"--device={source}", f"--rate={self.RATE}", "--channels=1"]
        args += ["--format=s16le", "--raw"]
        if latency_ms is not None:
            args.append(f"--latency-msec={latency_ms}")
        with path.open("wb") as out:  # (the child keeps its own handle)
            self._proc = subprocess.Popen(
                args, stdout=out, stderr=subprocess.DEVNULL, env={**os.environ, **pulse.env()}
            )

    def samples(self) -> np.ndarray:
        """What was recorded so far, int16."""
        return np.frombuffer(self.path.read_bytes(), dtype=np.int16)

    def loud_s(self, peak: int = 1000) -> float:
        """Seconds of 20 ms windows whose int16 peak exceeds ``peak`` (speech-loud; a null
        sink's monitor is exact zeros)."""
        x = self.samples()
        window = self.RATE // 50
        n = len(x) // window
        if n == 0:
            return 0.0
        peaks = np.abs(x[: n * window].reshape(n, window).astype(np.int32)).max(axis=1)
        return float((peaks > peak).sum() * 0.02)

    def stop(self) -> np.ndarray:
        """End the recording; what was recorded, float32 in [-1, 1)."""
        self._proc.terminate()
        self._proc.wait(timeout=10)
        return self.samples().astype(np.float32) / 32768


# --- speech made with the bundled Piper voice --------------------------------------------------

UTTERANCES = (
    "Hello there, let me check the back room for you.",
    "I have iron helmets and leather boots.",
)
LEAD_S, GAP_S, TAIL_S = 0.6, 1.5, 1.2


@dataclass(frozen=True)
class SpeechWav:
    audio: np.ndarray  # 16 kHz mono float32
    path: Path  # the same as a 16-bit WAV
    truth: list[tuple[int, int]]  # (first, last+1) non-silent sample of each utterance
    texts: tuple[str, ...]


def make_speech(out_dir: Path, texts: tuple[str, ...] = UTTERANCES) -> SpeechWav:
    """Utterances separated by known silences; truth = where each utterance's samples are
    non-silent (|x| > 0.01)."""
    import wave

    from bolt_agent.core.audio.audio_io import float_to_int16, int16_to_float, resample
    from bolt_agent.core.models import resolve_model
    from bolt_agent.core.tts.tts_engine import PiperEngine

    # seeded: the test audio (and with it every WER check on it) is the same in every run
    engine = PiperEngine(resolve_model("", kind="tts"), seed=7)
    engine.load()
    parts, truth, pos = [np.zeros(int(16000 * LEAD_S), np.float32)], [], int(16000 * LEAD_S)
    for i, text in enumerate(texts):
        pcm = np.concatenate([c.audio for c in engine.synthesize(text)])
        x = resample(int16_to_float(pcm), engine.sample_rate, 16000)
        loud = np.nonzero(np.abs(x) > 0.01)[0]
        truth.append((pos + int(loud[0]), pos + int(loud[-1]) + 1))
        gap = np.zeros(int(16000 * (GAP_S if i < len(texts) - 1 else TAIL_S)), np.float32)
        parts += [x, gap]
        pos += len(x) + len(gap)
    audio = np.concatenate(parts)
    path = out_dir / "speech.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(float_to_int16(audio).tobytes())
    return SpeechWav(audio, path, truth, texts)


@pytest.fixture(scope="session")
def speech_wav(tmp_path_factory) -> SpeechWav:
    return make_speech(tmp_path_factory.mktemp("speech"))


class ScriptedProbs:
    """Fake VAD probability model: the probabilities are given per window (0 after them)."""

    def __init__(self, probs: list[float]) -> None:
        self.probs, self.i = probs, 0

    def reset(self) -> None:
        pass

    def __call__(self, windows: np.ndarray) -> np.ndarray:
        out = self.probs[self.i : self.i + len(windows)]
        self.i += len(windows)
        return np.array(out + [0.0] * (len(windows) - len(out)), dtype=np.float32)

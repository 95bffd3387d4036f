"""Audio test fixtures: a private PulseAudio daemon with null sinks, and Piper-made speech.

Import the fixtures into a test module (``from support.audio_fixtures import pulse, speech_wav``).
The daemon runs under a private runtime directory (never the user's), is reached through
``env(sink=..., source=...)`` per process, and is stopped by its pid at the end of the session.
"""

from __future__ import annotations

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

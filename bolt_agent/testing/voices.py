"""Voices other than the robot's own, for tests and benchmarks: espeak-ng (Debian's package) in
several accents, sexes and rates, and the bundled Piper voice, all as 16 kHz mono float32.

espeak-ng's formant voices sound nothing like Piper's neural one, which is the point: thresholds
tuned on Piper's voice alone are measured here on voices they never heard.
"""

from __future__ import annotations

import functools
import io
import shutil
import subprocess
import wave
from dataclasses import dataclass

import numpy as np

from bolt_agent.core.audio.audio_io import int16_to_float, resample

RATE = 16000


@dataclass(frozen=True)
class Voice:
    name: str  # as reports show it
    engine: str  # espeak | piper
    voice: str = ""  # espeak-ng's -v (language+variant)
    words_per_min: int = 165  # espeak-ng's -s
    gain: float = 1.0


#: the benchmark's voices: Piper's joe, then espeak-ng male and female, US and British, a fast one
VOICES = (
    Voice("piper joe", "piper"),
    Voice("espeak en-us m", "espeak", "en-us"),
    Voice("espeak en-us f", "espeak", "en-us+f3"),
    # British English is espeak-ng's "en": after "en-gb" it drops the variant (the samples of
    # "en-gb+m3" and "en-gb+f4" were the plain "en-gb" voice's, so these two were one voice)
    Voice("espeak en-gb m", "espeak", "en+m3"),
    Voice("espeak en-gb f", "espeak", "en+f4"),
    Voice("espeak en-us fast", "espeak", "en-us+m2", words_per_min=220),
)


def espeak_available() -> bool:
    return shutil.which("espeak-ng") is not None


def espeak(text: str, voice: str = "en-us", words_per_min: int = 165) -> np.ndarray:
    """``text`` spoken by espeak-ng (16 kHz mono float32). RuntimeError names what is missing."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise RuntimeError("espeak-ng is not installed (apt install espeak-ng; make setup does)")
    out = subprocess.run(
        [exe, "-v", voice, "-s", str(words_per_min), "--stdout", text],
        capture_output=True,
        check=True,
        timeout=30,
    ).stdout
    with wave.open(io.BytesIO(out)) as w:
        rate = w.getframerate()
        pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16)
    return resample(int16_to_float(pcm), rate, RATE)


@functools.lru_cache(maxsize=1)
def _piper():
    from bolt_agent.core.models import resolve_model
    from bolt_agent.core.tts.tts_engine import PiperEngine

    engine = PiperEngine(resolve_model("", kind="tts"), seed=7)  # the same audio every run
    engine.load()
    return engine


def piper(text: str) -> np.ndarray:
    """``text`` in the bundled Piper voice, seeded (16 kHz mono float32)."""
    engine = _piper()
    pcm = np.concatenate([c.audio for c in engine.synthesize(text)])
    return resample(int16_to_float(pcm), engine.sample_rate, RATE)


def speak(voice: Voice, text: str) -> np.ndarray:
    if voice.engine == "piper":
        audio = piper(text)
    else:
        audio = espeak(text, voice.voice, voice.words_per_min)
    return (audio * voice.gain).astype(np.float32)


def trim(audio: np.ndarray, level: float = 0.01) -> np.ndarray:
    """``audio`` without the silence before its first and after its last sample above
    ``level``."""
    loud = np.nonzero(np.abs(audio) > level)[0]
    if not len(loud):
        return audio[:0]
    return audio[loud[0] : loud[-1] + 1]


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate after lower-casing and removing punctuation."""
    import jiwer

    norm = jiwer.Compose(
        [
            jiwer.ToLowerCase(),
            jiwer.RemovePunctuation(),
            jiwer.RemoveMultipleSpaces(),
            jiwer.Strip(),
            jiwer.ReduceToListOfListOfWords(),
        ]
    )
    return float(
        jiwer.wer(reference, hypothesis, reference_transform=norm, hypothesis_transform=norm)
    )

"""Audio test fixtures: a private PulseAudio daemon with null sinks, and Piper-made speech.

Import the fixtures into a test module (``from audio_fixtures import pulse, speech_wav``).
The daemon runs under a private runtime directory (never the user's), is reached through
``env(sink=..., source=...)`` per process, and is stopped by its pid at the end of the session.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

SINKS = ("robot_speaker", "user_mouth")


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.02)  # polling interval of a condition wait, not a fixed delay


@dataclass
class PulseServer:
    runtime_dir: Path
    pid: int = 0
    base_env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def start(cls, root: Path, sinks: tuple[str, ...] = SINKS) -> PulseServer:
        if shutil.which("pulseaudio") is None:
            raise RuntimeError("pulseaudio is not installed (Debian package 'pulseaudio')")
        runtime = root / "pulse-runtime"
        (runtime / "pulse").mkdir(parents=True, exist_ok=True)
        home = root / "pulse-home"
        home.mkdir(exist_ok=True)
        env = {
            "XDG_RUNTIME_DIR": str(runtime),
            "PULSE_RUNTIME_PATH": str(runtime / "pulse"),
            "PULSE_SERVER": f"unix:{runtime / 'pulse' / 'native'}",
        }
        args = [
            "pulseaudio",
            "-D",
            "-n",
            "--exit-idle-time=-1",
            "--use-pid-file=yes",
            "--load=module-native-protocol-unix auth-anonymous=1",
            *[f"--load=module-null-sink sink_name={s} rate=48000" for s in sinks],
        ]
        daemon_env = {**os.environ, **env, "HOME": str(home)}
        subprocess.run(args, env=daemon_env, check=True, capture_output=True, timeout=30)
        server = cls(runtime, base_env=env)
        pid_file = runtime / "pulse" / "pid"
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 10, "pulseaudio pid")
        server.pid = int(pid_file.read_text().strip())
        wait_for(server.ready, 10, "pulseaudio to answer")
        return server

    def env(self, sink: str | None = None, source: str | None = None) -> dict[str, str]:
        """Environment for a process whose default output/input should be these."""
        env = dict(self.base_env)
        if sink:
            env["PULSE_SINK"] = sink
        if source:
            env["PULSE_SOURCE"] = source
        return env

    def pactl(self, *args: str) -> str:
        out = subprocess.run(
            ["pactl", *args],
            env={**os.environ, **self.base_env},
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout

    def ready(self) -> bool:
        try:
            return "robot_speaker" in self.pactl("list", "short", "sinks")
        except subprocess.TimeoutExpired:
            return False

    def stop(self) -> None:
        if not self.pid:
            return
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            wait_for(lambda: not Path(f"/proc/{self.pid}").exists(), 10, "pulseaudio to exit")
        except AssertionError:
            os.kill(self.pid, signal.SIGKILL)


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

    from bolt_agent.core.audio_io import float_to_int16, int16_to_float, resample
    from bolt_agent.core.models import resolve_model
    from bolt_agent.core.tts_engine import PiperEngine

    engine = PiperEngine(resolve_model("", kind="tts"))
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

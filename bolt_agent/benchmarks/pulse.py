"""A private PulseAudio daemon with null sinks for the acoustic benchmark loop.

Adapted from ``test/audio_fixtures.PulseServer`` (private runtime dir, anonymous auth, stopped by
pid). Sinks: ``user_mouth`` (the player speaks into it; the ASR node records its monitor),
``robot_speaker`` (the TTS node plays into it) and ``bench_mix`` (stereo): two loopbacks copy
``user_mouth.monitor`` to its left channel and ``robot_speaker.monitor`` to its right one, so one
recorder sees both sides on one clock.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

SINKS = ("robot_speaker", "user_mouth")
MIX = "bench_mix"


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.02)  # polling interval of a condition wait


@dataclass
class PulseServer:
    runtime_dir: Path
    pid: int = 0
    base_env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def start(cls, root: Path, loopback_ms: int = 20) -> PulseServer:
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
        loop = f"latency_msec={loopback_ms}"
        args = [
            "pulseaudio",
            "-D",
            "-n",
            "--exit-idle-time=-1",
            "--use-pid-file=yes",
            "--load=module-native-protocol-unix auth-anonymous=1",
            *[f"--load=module-null-sink sink_name={s} rate=48000 channels=1" for s in SINKS],
            f"--load=module-null-sink sink_name={MIX} rate=48000 channels=2 "
            "channel_map=front-left,front-right",
            *[
                f"--load=module-remap-sink sink_name={MIX}_{side} master={MIX} channels=1 "
                f"master_channel_map=front-{side} channel_map=mono remix=no"
                for side in ("left", "right")
            ],
            f"--load=module-loopback source=user_mouth.monitor sink={MIX}_left {loop}",
            f"--load=module-loopback source=robot_speaker.monitor sink={MIX}_right {loop}",
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
            return MIX in self.pactl("list", "short", "sinks")
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
        except TimeoutError:
            os.kill(self.pid, signal.SIGKILL)

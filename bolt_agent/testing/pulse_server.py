"""A private PulseAudio daemon with null sinks: real PortAudio devices without a sound card.

Used by the audio tests and the acoustic benchmark. The daemon runs under a private runtime
directory (never the user's session), each process is routed with ``env(sink=..., source=...)``
(PULSE_SINK / PULSE_SOURCE), and it is stopped by its pid.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

SINKS = ("robot_speaker", "user_mouth")


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.02)  # polling interval of a condition wait, not a fixed delay


@dataclass
class PulseServer:
    runtime_dir: Path
    ready_sink: str = SINKS[0]
    pid: int = 0
    base_env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def start(
        cls,
        root: Path,
        sinks: Sequence[str] = SINKS,
        extra_modules: Sequence[str] = (),
        ready_sink: str | None = None,
        daemon_args: Sequence[str] = (),
    ) -> PulseServer:
        """Null sinks (48 kHz mono) plus any extra `--load=` module lines, then wait until up;
        ``daemon_args``: more of pulseaudio's own options."""
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
            "pulseaudio", "-D", "-n", "--exit-idle-time=-1", "--use-pid-file=yes", *daemon_args,
            "--load=module-native-protocol-unix auth-anonymous=1",
            *[f"--load=module-null-sink sink_name={s} rate=48000 channels=1" for s in sinks],
            *[f"--load={m}" for m in extra_modules],
        ]  # fmt: skip
        daemon_env = {**os.environ, **env, "HOME": str(home)}
        subprocess.run(args, env=daemon_env, check=True, capture_output=True, timeout=30)
        server = cls(runtime, ready_sink=ready_sink or sinks[0], base_env=env)
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
            ["pactl", *args], env={**os.environ, **self.base_env}, capture_output=True,
            text=True, timeout=10,
        )  # fmt: skip
        return out.stdout

    def ready(self) -> bool:
        try:
            return self.ready_sink in self.pactl("list", "short", "sinks")
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

"""Pollen's Reachy Mini daemon simulating the robot in MuJoCo, as a child process on loopback.

``ReachyDaemon`` starts ``reachy-mini-daemon --sim --headless --no-media`` (the robot's own MJCF,
the real robot's HTTP and websocket API) bound to 127.0.0.1, in a process group of its own, waits
until it answers, and stops the whole group with it: SIGINT first (the daemon's own clean stop),
SIGKILL if it lingers. The daemon runs from its own environment (``.venv-reachy``: its pins
differ from the stack's); ``$BOLT_REACHY_DAEMON`` names the executable, else ``reachy-mini-daemon``
on ``PATH``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from bolt_agent.core.processes import die_with_parent, stop_group


class DaemonError(RuntimeError):
    """The daemon cannot be found, would not start, or stopped answering; the message says why."""


def daemon_executable() -> str:
    """``$BOLT_REACHY_DAEMON``, else the checkout's ``.venv-reachy``, else ``reachy-mini-daemon``
    on ``PATH``."""
    checkout = Path(__file__).resolve().parents[3] / ".venv-reachy" / "bin" / "reachy-mini-daemon"
    exe = (
        os.environ.get("BOLT_REACHY_DAEMON", "")
        or (str(checkout) if checkout.is_file() else "")
        or shutil.which("reachy-mini-daemon")
        or ""
    )
    if not exe or not Path(exe).is_file():
        raise DaemonError(
            "Pollen's reachy-mini-daemon was not found: `make setup` installs it into "
            ".venv-reachy (set BOLT_REACHY_DAEMON to its path), or `pip install "
            "'reachy-mini[mujoco]'` in an environment of its own"
        )
    return exe


class ReachyDaemon:
    """One simulated Reachy Mini on ``127.0.0.1:port``."""

    def __init__(
        self,
        port: int = 8000,
        scene: str = "empty",
        log_path: Path | None = None,
        wake_up: bool = False,
    ) -> None:
        self.port, self.scene, self.log_path, self.wake_up = port, scene, log_path, wake_up
        self.proc: subprocess.Popen | None = None
        self._log: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            daemon_executable(),
            "--sim",
            "--headless",
            "--no-media",
            "--scene",
            self.scene,
            "--fastapi-host",
            "127.0.0.1",
            "--fastapi-port",
            str(self.port),
            "--wake-up-on-start" if self.wake_up else "--no-wake-up-on-start",
            "--no-goto-sleep-on-stop",
            "--no-preload-datasets",
        ]

    def start(self, timeout: float = 60.0) -> ReachyDaemon:
        """Start it and wait until it serves the robot's state."""
        if self.proc is not None and self.proc.poll() is None:
            return self
        env = {**os.environ, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "osmesa")}
        self._log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(
            self.command(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # its own group: stopped whole, never left behind
            preexec_fn=die_with_parent,  # and gone with its parent, however that ends
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stop()
                raise DaemonError(
                    f"reachy-mini-daemon exited with {self.proc.returncode}{self._tail()}"
                )
            if self.ready():
                return self
            time.sleep(0.2)  # polling another process's HTTP port: no event to wait on
        self.stop()
        raise DaemonError(f"reachy-mini-daemon did not answer within {timeout:.0f} s{self._tail()}")

    def _tail(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        lines = self.log_path.read_text(errors="replace").splitlines()[-8:]
        return ":\n" + "\n".join(lines)

    def ready(self) -> bool:
        try:
            return "head_pose" in self.state(timeout=1.0)
        except DaemonError:
            return False

    def state(self, timeout: float = 2.0) -> dict[str, Any]:
        """``GET /api/state/full``: head_pose (x, y, z, roll, pitch, yaw), antennas_position
        (the SDK's order: right, left), body_yaw; metres and radians."""
        try:
            with urllib.request.urlopen(f"{self.url}/api/state/full", timeout=timeout) as r:
                return json.load(r)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise DaemonError(f"no state from {self.url}: {exc}") from exc

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the daemon's group (a crash, as a test injects it)."""
        if self.running:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout: float = 10.0) -> None:
        """SIGINT the group (the daemon's clean stop), SIGKILL what is left after ``timeout``."""
        if self.proc is not None:
            stop_group(self.proc, timeout, first=signal.SIGINT)
        if self._log not in (None, subprocess.DEVNULL):
            self._log.close()
        self._log = None

    def __enter__(self) -> ReachyDaemon:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


class ReachyRecorder:
    """``reachy_recorder.py`` beside a simulated robot: samples it from ``start`` to ``finish``,
    then renders the GIF. It runs under the daemon's interpreter (SDK, MuJoCo, Pillow)."""

    def __init__(self, port: int, out: Path, fps: float = 8.0) -> None:
        self.port, self.out, self.fps = port, Path(out), fps
        self.proc: subprocess.Popen | None = None

    def start(self) -> ReachyRecorder:
        """Start it; returns once it samples the robot (it connects first)."""
        python = Path(daemon_executable()).with_name("python")
        if not python.exists():
            raise DaemonError(f"no Python beside the daemon ({python}) to record with")
        script = Path(__file__).with_name("reachy_recorder.py")
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [str(python), str(script), "--port", str(self.port), "--out", str(self.out),
             "--fps", str(self.fps)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )  # fmt: skip
        line = self.proc.stdout.readline()  # it has connected and samples from now on
        if not line.startswith("recording"):
            rest = self.proc.stdout.read() if self.proc.poll() is not None else ""
            stop_group(self.proc, 1.0)
            raise DaemonError(f"the recorder did not start: {line}{rest[-2000:]}")
        return self

    def finish(self, timeout: float = 300.0) -> str:
        """Stop sampling, wait for the GIF; what the recorder said."""
        proc = self.proc
        if proc is None:
            return ""
        try:
            out, _ = proc.communicate(input="", timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_group(proc, 1.0)
            raise DaemonError(f"rendering {self.out} took longer than {timeout:.0f} s") from None
        if proc.returncode != 0:
            raise DaemonError(f"recording {self.out} failed:\n{out[-2000:]}")
        return out.strip()

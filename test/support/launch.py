"""`ros2 launch` in its own process group, and the processes it started, read from /proc."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from support.ros_helpers import abort_for_stacks, default_signals


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name (state, ppid, …); None when gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None:
            children.setdefault(int(stat[1]), []).append(int(entry))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def running(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return []


class Launch:
    """`ros2 launch bolt_agent bolt_agent.launch.py ARGS` in its own process group."""

    def __init__(self, log_path: Path, *args: str):
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            ["ros2", "launch", "bolt_agent", "bolt_agent.launch.py", *args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=default_signals,
            # SIGABRT makes Python print every thread's stack (see stop()): where a hang is
            env={**os.environ, "PYTHONFAULTHANDLER": "1"},
        )
        self.seen: set[int] = set()  # every process the launch started (respawns too)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def children(self) -> set[int]:
        now = descendants(self.proc.pid)
        self.seen |= now
        return now

    def wait_for(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            self.children()
            if self.proc.poll() is not None and not predicate():
                raise AssertionError(f"ros2 launch exited before {what}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}:\n"
                                     f"{self.log()}")  # fmt: skip
            time.sleep(0.1)  # polling a log file / other processes: no event to wait on

    def node_pid(self, executable: str) -> int:
        """The pid of the running node process started for ``executable``."""
        for pid in self.children():
            if running(pid) and any(a.endswith(f"/{executable}") for a in cmdline(pid)[:2]):
                return pid
        raise AssertionError(f"no {executable} process under ros2 launch:\n{self.log()}")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGINT to the process group (as Ctrl-C does); SIGKILL and fail if it hangs.

        While a node is respawned every second or so, launch has twice lost the SIGINT in
        full-suite runs (no "user interrupted" line at all, respawns going on): when launch has
        not acknowledged it after 5 s, Ctrl-C is pressed once more, as a user would, and the
        exit must still be clean."""
        if self.proc.poll() is None:
            self.children()
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                if "user interrupted with ctrl-c" not in self.log():
                    os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._dump_stacks()
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                raise AssertionError(f"ros2 launch ignored SIGINT:\n{self.log()}") from None
        self._log.close()
        return self.proc.returncode

    def _dump_stacks(self) -> None:
        """Before the SIGKILL of a hung launch: launch's Python stacks into its log (faulthandler
        on SIGABRT), and which of its processes still run, so a rare hang says where it was."""
        left = {p: cmdline(p)[:4] for p in self.children() if running(p)}
        self._log.write(f"\n[test] still running after SIGINT: {left}\n".encode())
        self._log.flush()
        abort_for_stacks(self.proc)

    def kill(self) -> None:
        """Teardown after a failure: nothing may outlive the test."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for pid in self.seen:
            if running(pid):
                os.kill(pid, signal.SIGKILL)
        if not self._log.closed:
            self._log.close()


def assert_nothing_survives(launch: Launch) -> None:
    deadline = time.monotonic() + 10
    while (left := {p for p in launch.seen if running(p)}) and time.monotonic() < deadline:
        time.sleep(0.1)  # orphans would be reparented and keep running: give exits a moment
    assert not left, {p: cmdline(p) for p in left}

"""Helpers for tests that talk real DDS: private contexts, spin-until, node processes, and the
real `ros2` command line (commands, streaming echo, `ros2 launch` with a checked Ctrl-C)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil
import rclpy
from rclpy.context import Context
from rclpy.executors import (
    Executor,
    ExternalShutdownException,
    ShutdownException,
    SingleThreadedExecutor,
)
from rclpy.node import Node


def spin_until(
    executor: Executor,
    predicate: Callable[[], bool],
    timeout: float = 10.0,
    what: str | Callable[[], str] = "",
) -> None:
    """Spin `executor` until `predicate()` is true; fail with `what` after `timeout` seconds
    (a callable `what` is read at the failure: logs as they are then, not at the call)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            text = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout:.1f}s waiting for {text or predicate}")
        executor.spin_once(timeout_sec=0.02)


@contextmanager
def ros_node(name: str, namespace: str = "") -> Iterator[tuple[Node, SingleThreadedExecutor]]:
    """A node in a private context with its own executor, torn down on exit."""
    context = Context()
    rclpy.init(context=context)
    node = rclpy.create_node(name, namespace=namespace, context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    try:
        yield node, executor
    finally:
        executor.shutdown()
        destroy_waitables(node)
        node.destroy_node()
        rclpy.shutdown(context=context)


def destroy_waitables(node: Node) -> None:
    """Destroy the node's action clients and servers now. ``destroy_node`` leaves waitables to
    the garbage collector, which may then finalise one long after its node and context are gone,
    in another test: a full run once hung for good there (Fast DDS's reader teardown waiting on
    its event thread, which waited on a discovery lock), during an unrelated test's model load."""
    for waitable in list(node.waitables):
        destroy = getattr(waitable, "destroy", None)
        if callable(destroy):
            with contextlib.suppress(Exception):
                destroy()


def default_signals() -> None:
    """``preexec_fn`` for the processes tests start: SIGINT and SIGTERM at their default
    disposition and unblocked, as a shell starts a command. ``ros2 launch`` relies on that (its
    signal manager only watches Python's wakeup fd and never installs a handler): in three
    full-suite runs launch and its nodes ignored SIGINT (no "user interrupted" line at all) while
    every isolated run of the same tests stopped cleanly, which points at a disposition or mask
    the long-lived test process had picked up (rclpy installs and restores signal handlers per
    context) and handed down to its children."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


class NodeProcess:
    """A bolt_agent node (or any module) in a separate process; logs go to a file."""

    def __init__(self, args: list[str], log_path: Path, env: dict[str, str] | None = None):
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, *args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
            preexec_fn=default_signals,
        )

    def log(self) -> str:
        if not self._log.closed:  # (after stop(), the file holds everything)
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> int:
        """SIGINT (clean ROS shutdown), then SIGKILL if it does not exit in time."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


@contextmanager
def spinning_node(name: str, namespace: str = "") -> Iterator[Node]:
    """A node in a private context, spun by a background thread: its callbacks run while the
    test waits on subprocesses (collect into lists; poll them with ``wait_until``)."""
    with ros_node(name, namespace) as (node, executor):

        def spin() -> None:
            with contextlib.suppress(ExternalShutdownException, ShutdownException):
                executor.spin()

        thread = threading.Thread(target=spin, name=f"spin-{name}", daemon=True)
        thread.start()
        try:
            yield node
        finally:
            executor.shutdown()
            thread.join(timeout=5.0)


def wait_for_subscriber(
    executor: Executor, publisher, timeout: float = 10.0, count: int = 1
) -> None:
    """Until ``count`` subscriptions match ``publisher`` (a node may subscribe one topic twice:
    llm_node's latched and volatile ``teleop/mute``)."""
    spin_until(
        executor,
        lambda: publisher.get_subscription_count() >= count,
        timeout,
        f"{count} subscription(s)",
    )


def wait_for_publisher(executor: Executor, subscription, timeout: float = 10.0) -> None:
    spin_until(executor, lambda: subscription.get_publisher_count() > 0, timeout, "a publisher")


# --- the real `ros2` command line ----------------------------------------------------------------


def wait_until(
    predicate: Callable[[], object], timeout: float, what: str | Callable[[], str] = ""
) -> None:
    """Poll ``predicate`` (no executor: something else spins) until true, or fail after
    ``timeout`` seconds; ``what`` may be a callable, evaluated only for the failure message."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            detail = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout:.1f}s waiting for {detail}")
        time.sleep(0.05)


def ros2_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for `ros2` subprocesses: this venv's scripts first on PATH, the venv on
    AMENT_PREFIX_PATH (what `source .venv/bin/activate` sets), unbuffered output (so a running
    `ros2 topic echo` can be read line by line), plus ``extra``. ROS_DOMAIN_ID and discovery come
    from os.environ (conftest sets them)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(extra or {})}
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([venv_bin, env.get("PATH", "")])
    prefixes = [p for p in env.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    if sys.prefix not in prefixes:
        env["AMENT_PREFIX_PATH"] = os.pathsep.join([sys.prefix, *prefixes])
    return env


def ros2(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """Run ``ros2 ARGS`` to completion; stdout and stderr captured as text."""
    return subprocess.run(
        ["ros2", *args], capture_output=True, text=True, timeout=timeout, env=ros2_env()
    )


def stop_ros2_daemon(timeout: float = 30.0) -> tuple[bool, str]:
    """`ros2 daemon stop` for this domain: (whether it hung, what happened). The CLI waits on
    the daemon's socket with no timeout of its own, and the daemon answers only after its DDS
    participant is torn down, which can hang: past ``timeout`` the daemon process of this
    domain (its command line carries ``--ros-domain-id``) is killed. (Another checkout's run
    that drew the same random domain would share that daemon, as it shares the domain.)"""
    try:
        run = ros2("daemon", "stop", timeout=timeout)
        return False, (run.stdout + run.stderr).strip()
    except subprocess.TimeoutExpired:
        pass
    domain = str(int(os.environ.get("ROS_DOMAIN_ID", "0") or 0))
    flag, ours = "--ros-domain-id", []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        argv = proc.info["cmdline"] or []
        if "ros2-daemon" in argv and flag in argv and argv[argv.index(flag) + 1 :][:1] == [domain]:
            ours.append(proc)
    for proc in ours:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    gone, alive = psutil.wait_procs(ours, timeout=5)
    pids = sorted(p.pid for p in gone)
    return True, f"`ros2 daemon stop` hung for {timeout:.0f} s; killed daemon pid(s) {pids}" + (
        f", still alive: {sorted(p.pid for p in alive)}" if alive else ""
    )


def shell(line: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """Run one command line as an operator types it (bash: quotes, trailing `# comments`)."""
    return subprocess.run(
        ["bash", "-c", line], capture_output=True, text=True, timeout=timeout, env=ros2_env()
    )


class Streaming:
    """A long-running command line (e.g. ``ros2 topic echo``) in its own process group, its
    output collected by a thread; stopped with SIGINT to the group, as Ctrl-C would."""

    def __init__(self, line: str):
        self.line = line
        self._chunks: list[str] = []
        self.proc = subprocess.Popen(
            ["bash", "-c", line],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=ros2_env(),
            start_new_session=True,
            preexec_fn=default_signals,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._chunks.append(line)

    @property
    def output(self) -> str:
        return "".join(self._chunks)

    def wait_for(self, text: str, timeout: float) -> str:
        wait_until(
            lambda: text in self.output,
            timeout,
            lambda: f"{text!r} from `{self.line}`; it printed:\n{self.output[-2000:]}",
        )
        return self.output

    def stop(self, timeout: float = 10.0) -> str:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._reader.join(timeout=5.0)
        return self.output

    def __enter__(self) -> Streaming:
        return self

    def __exit__(self, *_exc) -> None:
        self.stop()


@dataclass
class LaunchStop:
    """How a `ros2 launch` ended: seconds from the signal until it and every process it had
    started were gone, its exit code, and the processes still alive at the deadline (killed)."""

    elapsed_s: float
    returncode: int | None
    leftovers: list[str]
    timeout_s: float

    def check(self) -> None:
        assert not self.leftovers, (
            f"still running {self.timeout_s:.0f}s after SIGINT (killed): {self.leftovers}"
        )
        assert self.elapsed_s <= self.timeout_s, f"stopped only after {self.elapsed_s:.1f}s"


def abort_for_stacks(proc: subprocess.Popen) -> None:
    """SIGABRT to a hung ``ros2 launch`` started with ``PYTHONFAULTHANDLER=1``: Python prints
    every thread's stack into its log (where the hang is), then it has 5 s to end."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGABRT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5.0)


class Ros2Launch:
    """``ros2 launch ARGS`` in its own process group (output to ``log_path``).

    ``wait_for_nodes`` / ``wait_active`` poll the real CLI (``ros2 node list``, ``ros2 lifecycle
    get``) with deadlines; ``stop`` sends SIGINT (to the launch process, or to its whole group as
    Ctrl-C in a terminal does), waits until the launch and every process it started are gone
    (psutil), kills what is left after the timeout, and reports. Leaving the ``with`` block
    stops it if a test has not, and fails if anything was left (unless the block already
    failed)."""

    def __init__(self, args: Sequence[str], log_path: Path):
        self.args = list(args)
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            ["ros2", "launch", *self.args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            # SIGABRT makes Python print every thread's stack (stop(): where a hang is)
            env=ros2_env({"PYTHONFAULTHANDLER": "1"}),
            start_new_session=True,
            preexec_fn=default_signals,
        )
        self.result: LaunchStop | None = None

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _check_alive(self, what: str) -> None:
        if not self.alive():
            code = self.proc.returncode
            raise AssertionError(f"`ros2 launch` exited ({code}) {what}:\n{self.log()[-4000:]}")

    def processes(self) -> list[psutil.Process]:
        """The launch process's descendants (the nodes it started)."""
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def wait_for_nodes(self, names: set[str], timeout: float) -> str:
        """Poll ``ros2 node list`` until every fully qualified name in ``names`` is listed;
        returns the last listing."""
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive("while its nodes were coming up")
            out = ros2("node", "list", "--no-daemon", "--spin-time", "2", timeout=30).stdout
            if names <= set(out.split()):
                return out
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"nodes {sorted(names - set(out.split()))} not listed after {timeout:.0f}s; "
                    f"`ros2 node list`:\n{out}\nlaunch log:\n{self.log()[-4000:]}"
                )
            time.sleep(0.5)

    def wait_active(self, names: set[str], timeout: float) -> dict[str, str]:
        """Poll ``ros2 lifecycle get NODE`` until each node in ``names`` is ``active``; returns
        each node's last answer. A node still configuring answers once it spins."""
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        for name in sorted(names):
            while True:
                self._check_alive(f"while {name} was coming up")
                left = max(deadline - time.monotonic(), 1.0)
                try:
                    run = ros2(
                        "lifecycle", "get", "--no-daemon", "--spin-time", "2", name, timeout=left
                    )
                    states[name] = (run.stdout + run.stderr).strip()
                except subprocess.TimeoutExpired:
                    states[name] = "(no answer)"
                if states[name].startswith("active"):
                    break
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"{name} not active after {timeout:.0f}s ({states[name]!r}); "
                        f"launch log:\n{self.log()[-4000:]}"
                    )
                time.sleep(0.5)
        return states

    def stop(self, timeout: float = 10.0, group: bool = False) -> LaunchStop:
        """SIGINT to `ros2 launch` (``group``: to its whole process group, like Ctrl-C); wait
        up to ``timeout`` s for it and every process it started to end; kill the rest."""
        if self.result is not None:
            return self.result
        started = self.processes()
        t0 = time.monotonic()
        if self.alive():
            if group:
                os.killpg(self.proc.pid, signal.SIGINT)
            else:
                self.proc.send_signal(signal.SIGINT)

        def gone(p: psutil.Process) -> bool:
            try:
                return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                return True

        deadline = t0 + timeout
        while time.monotonic() < deadline and (
            self.proc.poll() is None or not all(gone(p) for p in started)
        ):
            time.sleep(0.05)
        elapsed = time.monotonic() - t0
        leftovers = [p for p in started if not gone(p)]
        names = []
        for p in leftovers:
            with contextlib.suppress(psutil.NoSuchProcess):
                names.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
                p.kill()
        if self.proc.poll() is None:  # its stacks into the log first (a rare hang: where?)
            abort_for_stacks(self.proc)
            names.append(f"{self.proc.pid} ros2 launch; its log ends:\n{self.log()[-3000:]}")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._log.close()
        self.result = LaunchStop(elapsed, self.proc.returncode, names, timeout)
        return self.result

    def __enter__(self) -> Ros2Launch:
        return self

    def __exit__(self, exc_type, *_exc) -> None:
        if self.result is not None:  # a test stopped it (and checked how)
            return
        result = self.stop(group=True)
        if exc_type is None:
            result.check()

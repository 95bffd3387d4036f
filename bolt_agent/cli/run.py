"""`bolt-agent run`: every node in one process (multi-threaded executor), plus a demo user.

``--sim`` (the default here): audio in and out through topics, a scripted user speaks the
profile's demo lines through the real ASR path. ``--text``: type to the robot. ``--device``:
real microphone and speaker (PortAudio). Ctrl-C shuts everything down cleanly.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from pathlib import Path

import yaml
from rich.console import Console
from std_msgs.msg import String

from bolt_agent.core.llm.profile import profile_path
from bolt_agent.core.motion.reachy_daemon import ReachyDaemon, ReachyRecorder
from bolt_agent.nodes.console_monitor import ConsoleMonitor
from bolt_agent.nodes.qos import RELIABLE
from bolt_agent.nodes.scripted_user import ScriptedUser
from bolt_agent.stack import table
from bolt_agent.stack.session import StackSession
from bolt_agent.stack.spec import StackSpec


@contextlib.contextmanager
def robot_daemon(robot: str):
    """Pollen's simulated Reachy Mini for ``--robot reachy_mini_sim`` (stopped on exit, Ctrl-C
    too); None for the other robots."""
    if robot != "reachy_mini_sim":
        yield None
        return
    with ReachyDaemon(int(table.defaults()["reachy_port"])) as daemon:
        yield daemon


@contextlib.contextmanager
def recording(daemon: ReachyDaemon | None, record: str, console: Console):
    """With ``record``: the simulated robot sampled from here to the end, then rendered."""
    if daemon is None or not record:
        yield
        return
    recorder = ReachyRecorder(daemon.port, Path(record)).start()
    try:
        yield
    finally:
        console.print(f"[dim]rendering {record} with MuJoCo…[/]")
        console.print(f"[dim]{recorder.finish()}[/]")


def demo_lines(profile: str) -> list[str]:
    data = yaml.safe_load(profile_path(profile).read_text()) or {}
    return list(data.get("demo") or [])


def run_stack(args) -> int:
    console = Console(highlight=False)
    spec = StackSpec(profile=args.profile, sim=not args.device, args={"robot": args.robot})
    stop, rc = threading.Event(), 0
    if args.record and args.robot != "reachy_mini_sim":
        console.print("[red]--record needs --robot reachy_mini_sim[/] (it renders Pollen's model)")
        return 2
    with robot_daemon(args.robot) as daemon, StackSession(spec) as session:
        if daemon is not None:
            console.print(f"[dim]Reachy Mini simulated in MuJoCo at {daemon.url}[/]")
        try:
            with console.status("loading models…") as status:
                session.build()
                monitor = ConsoleMonitor(printer=console.print)
                user = ScriptedUser() if not args.text and not args.device else None
                session.add(monitor, *([user] if user else []))
                # bring up before spinning (see StackSession.bring_up)
                failed = session.bring_up(progress=lambda m: status.update(m + "…"))
                session.start()
                if user:
                    status.update("loading the demo user's voice…")
                    user.load()
                if not failed:  # the first answer is then as quick as the others
                    status.update("prefilling the system prompt…")
                    late = session.wait_ready()
                    if late:
                        console.print(f"[yellow]still busy starting up:[/] {', '.join(late)}")
            if failed:
                console.print(f"[red]failed to start: {', '.join(failed)}[/] (see the log above)")
                return 1
            console.print(
                f"[bold]bolt_agent running[/] profile={spec.profile} "
                f"{'sim' if spec.sim else 'devices'} — Ctrl-C to stop"
            )
            with recording(daemon, args.record, console):  # the conversation, not the loading
                if args.text:
                    rc = _repl(monitor, monitor, console, stop)
                elif user:
                    rc = _demo(user, demo_lines(spec.profile)[: args.turns or None], console, stop)
                else:
                    threading.Event().wait()  # devices: run until Ctrl-C
        except KeyboardInterrupt:
            console.print("\n[dim]stopping…[/]")
        finally:
            stop.set()
    return rc


def _demo(user: ScriptedUser, lines: list[str], console: Console, stop: threading.Event) -> int:
    failures = 0
    for line in lines:
        console.print(f"[dim]user speaks:[/] “{line}”")
        turn = user.say(line, stop)
        if not turn.ok:
            failures += 1
            console.print(f"[red]turn failed:[/] {turn.error}")
    console.print(f"[bold]demo finished:[/] {len(lines) - failures}/{len(lines)} turns")
    return 1 if failures else 0


def _repl(node, monitor: ConsoleMonitor, console: Console, stop: threading.Event) -> int:
    """Each typed line is a user utterance (teleop/prompt); waits for the robot's answer."""
    pub = node.create_publisher(String, "teleop/prompt", RELIABLE)
    deadline = time.monotonic() + 10
    while pub.get_subscription_count() == 0 and time.monotonic() < deadline:
        stop.wait(0.05)  # the LLM's subscription must match before the first line is sent
    console.print("type to the robot (empty line or Ctrl-D to quit)")
    for line in sys.stdin:
        if not line.strip() or stop.is_set():
            break
        done_before = sum("turn_end" in r.stamps for r in list(monitor.records.values()))
        pub.publish(String(data=line.strip()))
        deadline = time.monotonic() + 120
        while not stop.is_set() and time.monotonic() < deadline:
            if sum("turn_end" in r.stamps for r in list(monitor.records.values())) > done_before:
                break
            stop.wait(0.05)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="run the whole stack in one process (demo conversation)")
    p.add_argument("--profile", default="reachy_mini", help="reachy_mini | blacksmith_npc")
    p.add_argument("--sim", action="store_true", help="simulated devices and user (default)")
    p.add_argument("--text", action="store_true", help="type to the robot instead")
    p.add_argument("--device", action="store_true", help="real microphone and speaker")
    p.add_argument("--turns", type=int, default=0, help="demo turns to run (0 = all)")
    p.add_argument(
        "--robot",
        default="sim",
        choices=table.ROBOTS,
        help="sim (an ideal robot) | reachy_mini (a running daemon) | reachy_mini_sim (starts "
        "Pollen's daemon in MuJoCo on loopback)",
    )
    p.add_argument(
        "--record",
        default="",
        metavar="FILE.gif",
        help="with --robot reachy_mini_sim: a GIF of the simulated robot through the run",
    )
    p.set_defaults(func=run_stack)

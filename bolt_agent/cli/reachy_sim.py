"""`bolt-agent reachy-sim`: Pollen's Reachy Mini daemon simulating the robot in MuJoCo, headless,
on 127.0.0.1, until Ctrl-C (or SIGTERM); the daemon's whole process group stops with it.
``ros2 launch ... robot:=reachy_mini_sim`` runs this beside the nodes."""

from __future__ import annotations

import signal
import sys
import threading

from bolt_agent.core.motion.reachy_daemon import DaemonError, ReachyDaemon


def run(args) -> int:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    daemon = ReachyDaemon(args.port, scene=args.scene, wake_up=args.wake_up)
    try:
        daemon.start(timeout=args.timeout)
    except DaemonError as exc:
        print(f"reachy-sim: {exc}", file=sys.stderr)
        return 1
    print(f"reachy-sim: Reachy Mini simulated at {daemon.url} (MuJoCo, headless)", flush=True)
    try:
        while not stop.wait(1.0):
            if not daemon.running:
                print("reachy-sim: the daemon exited", file=sys.stderr)
                return 1
    finally:
        daemon.stop()
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("reachy-sim", help="run Pollen's Reachy Mini daemon in MuJoCo (loopback)")
    p.add_argument("--port", type=int, default=8000, help="HTTP/websocket port (127.0.0.1)")
    p.add_argument("--scene", default="empty", help="MuJoCo scene: empty | minimal")
    p.add_argument("--wake-up", action="store_true", help="the wake-up motion at start")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for it")
    p.set_defaults(func=run)

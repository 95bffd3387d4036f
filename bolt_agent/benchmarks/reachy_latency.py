"""Reachy Mini's control path against Pollen's simulated robot: command → measured-pose latency
at the control rate, and the control loop's CPU share.

The loop is animation_node's without ROS: ``AnimationController`` steps at ``rate_hz``, its
commands go through ``RobotLink`` to ``ReachyMiniRobot`` (Pollen's SDK) and the measured pose is
read back every period, against ``reachy-mini-daemon --sim`` (MuJoCo) on loopback. The operator
pose alternates the head's yaw between 0 and ``step_rad`` every ``hold_s``; the controller's
velocity limit makes each step a ramp. Latency is the time from the command crossing the middle
of a step to the measured yaw crossing it, per step; the CPU share is the loop thread's CPU time
over the wall time (the daemon's own CPU share beside it, from /proc).

``python -m bolt_agent.benchmarks.reachy_latency --out F.json [--seconds 20] [--rate 50]``
prints a table and writes JSON; ``bolt-agent bench`` runs it too (key ``reachy_mini``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import socket
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from bolt_agent.core.motion.animation import JOINTS, AnimationLibrary
from bolt_agent.core.motion.animation_control import AnimationController
from bolt_agent.core.motion.reachy_daemon import DaemonError, ReachyDaemon, daemon_executable
from bolt_agent.core.motion.reachy_mini import ReachyMiniRobot, pose_problem
from bolt_agent.core.motion.robot_link import RobotLink

YAW = JOINTS.index("head_yaw")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (and its reaped children) from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(x) for x in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def _crossings(samples: list[tuple[float, float]], level: float) -> list[tuple[float, bool]]:
    """(time, rising) where the series crosses ``level``, interpolated between samples."""
    out = []
    for (t0, a), (t1, b) in itertools.pairwise(samples):
        if (a - level) * (b - level) < 0:
            out.append((t0 + (t1 - t0) * (level - a) / (b - a), b > a))
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def control_loop(
    link: RobotLink, rate_hz: float, seconds: float, step_rad: float, hold_s: float
) -> dict[str, Any]:
    """Run the loop; the commanded and measured yaw series and the loop's CPU time."""
    ctl = AnimationController(AnimationLibrary.load(), rate_hz=rate_hz, problem=pose_problem)
    period, commanded, measured = 1.0 / rate_hz, [], []
    cpu0, start = time.thread_time(), time.monotonic()
    next_t, target, flip = start, 0.0, start
    while (now := time.monotonic()) - start < seconds:
        if now >= flip:
            target = step_rad if target == 0.0 else 0.0
            ctl.teleop_pose({"head_yaw": target})
            flip += hold_s
        result = ctl.step()
        if result.command is not None:
            if link.send(result.command.positions) is not None:
                raise RuntimeError(f"robot lost: {link.reason}")
            commanded.append((time.monotonic(), result.command.positions[YAW]))
        pose, lost = link.read_state()
        if lost is not None:
            raise RuntimeError(f"robot lost: {link.reason}")
        measured.append((time.monotonic(), pose[YAW]))
        next_t += period
        time.sleep(max(0.0, next_t - time.monotonic()))
    return {
        "commanded": commanded,
        "measured": measured,
        "loop_cpu_s": time.thread_time() - cpu0,
        "wall_s": time.monotonic() - start,
    }


def run(
    seconds: float = 20.0, rate_hz: float = 50.0, step_rad: float = 0.3, hold_s: float = 1.0
) -> dict[str, Any]:
    """Start a simulated Reachy Mini, run the loop against it, and the figures."""
    try:
        daemon_executable()
    except DaemonError as exc:
        return {"skipped": str(exc)}
    port = _free_port()
    with ReachyDaemon(port) as daemon:
        robot = ReachyMiniRobot("127.0.0.1", port)
        link = RobotLink(robot)
        if link.connect().lost:
            return {"skipped": f"no connection: {link.reason}"}
        try:
            daemon_cpu0, box = _cpu_s(daemon.proc.pid), {}
            thread = threading.Thread(
                target=lambda: box.update(control_loop(link, rate_hz, seconds, step_rad, hold_s))
            )
            thread.start()
            thread.join()
            daemon_cpu = _cpu_s(daemon.proc.pid) - daemon_cpu0
        finally:
            robot.close()
    if not box:
        raise RuntimeError("the control loop did not finish")
    mid = step_rad / 2
    cmd, got = _crossings(box["commanded"], mid), _crossings(box["measured"], mid)
    latencies = []
    for t_cmd, rising in cmd:
        later = [t for t, r in got if r == rising and t >= t_cmd]
        if later and later[0] - t_cmd < 1.0:
            latencies.append(later[0] - t_cmd)
    wall = box["wall_s"]
    return {
        "rate_hz": rate_hz,
        "seconds": round(wall, 2),
        "steps": len(cmd),
        "steps_measured": len(latencies),
        "latency_p50_s": percentile(latencies, 0.5) if latencies else None,
        "latency_p90_s": percentile(latencies, 0.9) if latencies else None,
        "latency_mean_s": statistics.fmean(latencies) if latencies else None,
        "loop_cpu_share": box["loop_cpu_s"] / wall,
        "daemon_cpu_share": daemon_cpu / wall,
        "periods": len(box["measured"]),
        "periods_expected": round(wall * rate_hz),
    }


def table(result: dict[str, Any]) -> str:
    if "skipped" in result:
        return f"Reachy Mini control path: skipped ({result['skipped']})"
    rows = [
        ("command → measured yaw, p50 / p90", f"{result['latency_p50_s'] * 1e3:.0f} / "
         f"{result['latency_p90_s'] * 1e3:.0f} ms ({result['steps_measured']} steps)"),
        ("control loop CPU (one core = 100 %)", f"{result['loop_cpu_share'] * 100:.1f} %"),
        ("Pollen's daemon CPU (MuJoCo, beside it)", f"{result['daemon_cpu_share'] * 100:.1f} %"),
        ("periods run / expected", f"{result['periods']} / {result['periods_expected']} "
         f"at {result['rate_hz']:.0f} Hz"),
    ]  # fmt: skip
    lines = ["| Reachy Mini control path (simulated robot) | |", "|---|---|"]
    return "\n".join(lines + [f"| {a} | {b} |" for a, b in rows])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="reachy_latency.json")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rate", type=float, default=50.0)
    args = ap.parse_args(argv)
    result = run(args.seconds, args.rate)
    print(table(result))
    Path(args.out).write_text(json.dumps(result, indent=2))
    return 0 if "skipped" not in result else 1


if __name__ == "__main__":
    raise SystemExit(main())

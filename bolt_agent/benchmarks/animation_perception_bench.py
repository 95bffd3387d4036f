#!/usr/bin/env python3
"""Benchmark: animation control-loop period jitter and perception frame cost at 640x480.

    python -m bolt_agent.benchmarks.animation_perception_bench [--seconds 5] [--out bench.json]

Control loop: a real ``animation_node`` (sim backend, idle breathing looping so commands flow
continuously; its own control thread, a MultiThreadedExecutor for its callbacks); the period is
measured from the node's command stamps (taken at the start of each tick) and the delivery
latency from a subscriber in the same process. Perception: the classical backend on 640x480
frames (the test scenario video upscaled, plus the astronaut): per-frame ``observe`` (motion),
full ``describe`` (faces + HOG people + colours + changes), and the paced ``SceneMonitor.push``
at 10 fps.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import threading
import time
from pathlib import Path

import numpy as np

# a private DDS domain and namespace: other stacks on this machine must not mix in
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ["ROS_DOMAIN_ID"] = str(random.SystemRandom().randint(150, 200))
NS = f"/bench_{os.getpid()}"
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "test"))  # the scenario generator


def percentiles(values: list[float], scale: float = 1e3) -> dict[str, float]:
    arr = np.asarray(values) * scale
    return {
        "n": len(values),
        "mean": float(arr.mean()),
        "p50": float(np.percentile(arr, 50)),
        "p99": float(np.percentile(arr, 99)),
        "max": float(arr.max()),
    }


def bench_control_loop(rate_hz: float, seconds: float) -> dict:
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import MultiThreadedExecutor
    from rclpy.parameter import Parameter

    from bolt_agent.nodes import qos
    from bolt_agent.nodes.animation_node import AnimationNode
    from bolt_agent_interfaces.msg import JointCommand

    context = Context()
    rclpy.init(context=context)
    overrides = [Parameter("rate_hz", value=rate_hz), Parameter("idle_after_s", value=0.0)]
    node = AnimationNode(context=context, parameter_overrides=overrides, namespace=NS)
    node.trigger_configure()
    node.trigger_activate()
    probe = rclpy.create_node("bench_probe", context=context)
    stamps, latencies = [], []

    def on_cmd(msg: JointCommand) -> None:
        now = time.time()
        t = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        stamps.append(t)
        latencies.append(now - t)

    probe.create_subscription(JointCommand, f"{NS}/robot/joint_commands", on_cmd, qos.RELIABLE)
    executor = MultiThreadedExecutor(num_threads=4, context=context)
    executor.add_node(node)
    executor.add_node(probe)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    deadline = time.monotonic() + seconds + 1.0
    while time.monotonic() < deadline:
        time.sleep(0.1)  # the benchmark's measuring window
    executor.shutdown()
    spinner.join(timeout=5.0)
    node.destroy_node()
    probe.destroy_node()
    rclpy.shutdown(context=context)
    stamps = stamps[int(rate_hz) :]  # drop the first second (discovery, warm-up)
    periods = np.diff(stamps).tolist()
    return {
        "rate_hz": rate_hz,
        "period_ms": percentiles(periods),
        "jitter_ms": percentiles([abs(p - 1 / rate_hz) for p in periods]),
        "latency_ms": percentiles(latencies[int(rate_hz) :]),
    }


def bench_perception(repeats: int) -> dict:
    import cv2

    from bolt_agent.core.vision.perception import ClassicalBackend, SceneMonitor
    from support.perception_videos import astronaut_bgr, scenario_frames

    frames = [cv2.resize(f, (640, 480)) for f in scenario_frames()]
    frames.append(cv2.resize(astronaut_bgr(), (640, 480)))
    out = {}
    for use_hog in (True, False):
        backend = ClassicalBackend(use_hog=use_hog)
        backend.load()
        observe, describe = [], []
        for _ in range(repeats):
            for f in frames:
                t0 = time.perf_counter()
                backend.observe(f)
                observe.append(time.perf_counter() - t0)
            for f in frames[::10]:
                t0 = time.perf_counter()
                backend.describe(f, None)
                describe.append(time.perf_counter() - t0)
        key = "hog+haar" if use_hog else "haar"
        out[f"observe_ms[{key}]"] = percentiles(observe)
        out[f"describe_ms[{key}]"] = percentiles(describe)
        monitor, push = SceneMonitor(backend, check_period_s=0.5), []
        for i, f in enumerate(frames * repeats):
            t0 = time.perf_counter()
            monitor.push(f, i / 10.0)
            push.append(time.perf_counter() - t0)
        out[f"monitor_push_ms@10fps[{key}]"] = percentiles(push)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per control-rate run")
    parser.add_argument("--repeats", type=int, default=3, help="passes over the test frames")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args()
    results = {
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "control_loop": [bench_control_loop(r, args.seconds) for r in (50.0, 100.0)],
        "perception_640x480": bench_perception(args.repeats),
    }
    print(f"\n{'control loop':<34}{'p50':>9}{'p99':>9}{'max':>9}  (ms)")
    for run in results["control_loop"]:
        for key in ("period_ms", "jitter_ms", "latency_ms"):
            s = run[key]
            name = f"{run['rate_hz']:.0f} Hz {key[:-3]}"
            print(f"{name:<34}{s['p50']:>9.2f}{s['p99']:>9.2f}{s['max']:>9.2f}")
    print(f"\n{'perception 640x480':<34}{'p50':>9}{'p99':>9}{'max':>9}  (ms)")
    for key, s in results["perception_640x480"].items():
        print(f"{key:<34}{s['p50']:>9.2f}{s['p99']:>9.2f}{s['max']:>9.2f}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The embedded stack in its own process, for the benchmark (``bolt-agent run --device`` without
the console, with parameter overrides and RSS reporting).

    python -m bolt_agent.benchmarks.stack_host '{"profile": "reachy_mini", "overrides": {...}}'

Prints one JSON line per event on stdout: ``{"event": "ready", "rss": {...}}`` once every node is
active (RSS after each node's configure+activate, i.e. per node), then answers ``rss`` lines on
stdin with ``{"event": "rss", ...}``; ``quit`` (or EOF) shuts it down cleanly.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path


def rss_mb(pid: int | str = "self") -> dict[str, float]:
    """VmRSS / VmHWM / RssFile / RssAnon of a process in MB (from /proc)."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            out[key] = int(value.split()[0]) / 1024
    return out


def main(argv: list[str]) -> int:
    import rclpy
    from rclpy.executors import MultiThreadedExecutor

    from bolt_agent.stack import StackSpec, build_stack, make_node  # noqa: F401

    cfg = json.loads(argv[0]) if argv else {}
    if cfg.get("switch_interval"):  # experiment: the GIL hand-over period (default 5 ms)
        sys.setswitchinterval(float(cfg["switch_interval"]))
    spec = StackSpec(
        profile=cfg.get("profile", "reachy_mini"),
        sim=False,
        overrides=cfg.get("overrides", {}),
        nodes=cfg.get("nodes", []),
    )
    rclpy.init()
    base = rss_mb()
    executor = MultiThreadedExecutor(num_threads=8)
    nodes = build_stack(spec)
    built = rss_mb()
    for node in nodes:
        executor.add_node(node)
    spin = threading.Thread(target=executor.spin, daemon=True)
    spin.start()
    from rclpy.parameter import Parameter

    from bolt_agent.nodes import runtime

    per_node, failed, prev = {}, [], built["VmRSS"]
    for node in nodes:
        if node.has_parameter("autostart"):
            node.set_parameters([Parameter("autostart", value=True)])
            if not runtime.bring_up(node):
                failed.append(node.get_name())
        now = rss_mb()["VmRSS"]
        per_node[node.get_name()] = now - prev
        prev = now
    event = {
        "event": "ready" if not failed else "failed",
        "failed": failed,
        "rss": {
            "python_rclpy_mb": base["VmRSS"],
            "after_construct_mb": built["VmRSS"],
            "per_node_mb": per_node,
            "total": rss_mb(),
        },
    }
    print(json.dumps(event), flush=True)
    try:
        for line in sys.stdin:
            if line.strip() == "rss":
                print(json.dumps({"event": "rss", "rss": rss_mb()}), flush=True)
            elif line.strip() == "quit":
                break
    finally:
        executor.shutdown()
        for node in reversed(nodes):
            node.destroy_node()
        rclpy.try_shutdown()
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

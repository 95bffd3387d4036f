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
    from bolt_agent.stack.session import StackSession
    from bolt_agent.stack.spec import StackSpec

    cfg = json.loads(argv[0]) if argv else {}
    if cfg.get("switch_interval"):  # experiment: the GIL hand-over period (default 5 ms)
        sys.setswitchinterval(float(cfg["switch_interval"]))
    spec = StackSpec(
        profile=cfg.get("profile", "reachy_mini"),
        sim=False,
        overrides=cfg.get("overrides", {}),
        nodes=cfg.get("nodes", []),
    )
    with StackSession(spec) as session:  # rclpy up; torn down (lifecycle shutdown too) on exit
        base = rss_mb()
        session.build()
        built = rss_mb()
        per_node, prev = {}, built["VmRSS"]

        def measure(node) -> None:  # RSS growth during the node's configure + activate
            nonlocal prev
            now = rss_mb()["VmRSS"]
            per_node[node.get_name()] = now - prev
            prev = now

        failed = session.bring_up(after_each=measure)  # no progress lines: stdout is JSON
        session.start()  # after the bring-up (see StackSession.bring_up)
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
        for line in sys.stdin:
            if line.strip() == "rss":
                print(json.dumps({"event": "rss", "rss": rss_mb()}), flush=True)
            elif line.strip() == "quit":
                break
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""`bolt-agent metrics`: a live table of per-turn latencies from ``bolt/turn_metrics``.

Nodes publish partial stamps for the same turn (``source`` asr / llm / tts); they are merged per
turn by ``bolt_agent.core.turn_metrics``. ``--once N`` exits after N complete turns, ``--json``
writes the turns and a summary when it exits.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from bolt_agent.core.turn_metrics import (
    COUNTERS,
    DEFAULT_SOURCES,
    LATENCY_STAGES,
    STAGES,
    PartialMetrics,
    TurnTable,
    summarize,
)

_HEADERS = {
    "asr_final": "speech_end→asr_final",
    "llm_first_token": "→llm_first_token",
    "first_speech": "→first_speech",
    "first_audio": "→first_audio",
    "first_tool_goal": "→first_tool_goal",
}


def partial_from_msg(msg) -> PartialMetrics:
    """A TurnMetrics message → the core's plain record (stamps in ns, 0 when absent)."""
    stamps = {s: getattr(msg, s).sec * 10**9 + getattr(msg, s).nanosec for s in STAGES}
    counters = {c: getattr(msg, c) for c in COUNTERS}
    return PartialMetrics(msg.turn_id, msg.source, stamps, counters, msg.outcome)


def render(table: TurnTable) -> Table:
    out = Table(title="bolt-agent turn metrics (ms from end of speech)")
    for header in ("turn", *(_HEADERS[s] for s in LATENCY_STAGES), "tokens", "tok/s", "sources"):
        out.add_column(header, justify="left" if header in ("turn", "sources") else "right")
    for record in table.turns.values():
        cells = [f"{v:.0f}" if v is not None else "-" for v in record.latencies_ms().values()]
        done = record.turn_id in table.completed
        out.add_row(
            record.turn_id + ("" if done else " …"),
            *cells,
            str(record.tokens or "-"),
            f"{record.tok_s:.1f}" if record.tok_s else "-",
            ",".join(record.sources),
        )
    return out


def dump_json(table: TurnTable, path: Path) -> None:
    turns = table.complete_turns()
    data = {"turns": [t.to_dict() for t in turns], "summary": summarize(turns)}
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False))


def run_metrics(args: argparse.Namespace) -> int:
    import rclpy
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor

    from bolt_agent.nodes.qos import RELIABLE
    from bolt_agent_interfaces.msg import TurnMetrics

    sources = [s for s in args.sources.split(",") if s] or list(DEFAULT_SOURCES)
    table = TurnTable(sources, args.settle)
    rclpy.init()
    node = rclpy.create_node("bolt_metrics")
    node.create_subscription(
        TurnMetrics, args.topic, lambda m: table.add(partial_from_msg(m), time.monotonic()),
        RELIABLE,
    )  # fmt: skip
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    console = Console()
    console.print(f"listening on {node.resolve_topic_name(args.topic)} (Ctrl-C to stop)")
    try:
        with Live(render(table), console=console, refresh_per_second=4) as live:
            while not args.once or len(table.completed) < args.once:
                executor.spin_once(timeout_sec=0.1)
                table.update(time.monotonic())
                live.update(render(table))
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if not console.is_terminal:
            console.line()  # the final table ends without a newline off a terminal
        if args.json:
            dump_json(table, Path(args.json))
            console.print(f"wrote {len(table.completed)} turns to {args.json}")
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("metrics", help="live per-turn latency table from bolt/turn_metrics")
    p.add_argument("--topic", default="bolt/turn_metrics", help="TurnMetrics topic")
    p.add_argument("--once", type=int, default=0, metavar="N", help="exit after N complete turns")
    p.add_argument("--json", metavar="FILE", help="write complete turns + summary on exit")
    p.add_argument("--settle", type=float, default=2.0, metavar="S",
                   help="a turn with turn_end is complete after S s without news")  # fmt: skip
    p.add_argument("--sources", default=",".join(DEFAULT_SOURCES),
                   help="sources that complete a turn at once (comma-separated)")  # fmt: skip
    p.set_defaults(func=run_metrics)

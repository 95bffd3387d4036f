"""Memory soak: N text turns through the whole embedded stack, RSS sampled after every turn.

    python -m bolt_agent.benchmarks.soak --turns 100 --out /tmp/soak.json \
        [--nodes animation_node,llm_node] [--set llm_node.max_new_tokens=48] [--trace]

(`bolt-agent bench --soak-turns N [--soak-only]` runs the same and puts the figures in the bench
JSON.) Processes: a private PulseAudio daemon (null sinks: ASR records ``user_mouth.monitor``,
which stays silent, TTS plays into ``robot_speaker``), the stack (``stack_host``, exactly as the
voice loop runs it, ``sim=False``) and this one, which drives the turns over DDS: one
``teleop/prompt`` (std_msgs/String) per turn, the voice benchmark's user lines in turn. A turn is
over when the LLM's ``bolt/turn_metrics`` with ``turn_end`` arrived and the TTS reported the turn
spoken (``tts/state`` speaking=false after it; or nothing was said); then the stack host answers a
``sample`` (RSS, glibc ``mallinfo2``, threads) after a 0.5 s pause.

Failed turn: no ``turn_end`` within 90 s, an outcome other than ``ok``, or the TTS not done
within 60 s after ``turn_end``. Growth: VmRSS after turn N (the last) minus VmRSS after turn N/4
(so the warm-up, the history growing up to the context window and the first faults of the compute
buffer stay out), in MB (10^6 bytes). At turn N/4 and at the end the host also reports live
Python objects by type and the sizes of the nodes' containers (``stack_host`` ``objects`` /
``containers``): what grew between the two is in ``object_growth`` / ``container_growth``.
The host also reports the cyclic garbage waiting for a collection at the end (``cycles_end``).
``--trace`` starts tracemalloc at turn N/4 and reports the top allocation growth by line at the
end (it costs memory and time itself: diagnosis only, not for the growth figure). After the last
sample a ``malloc_trim(0)`` shows how much of the RSS was free heap (``trim``).

Per node: one process holds every node, so RSS per node comes from (a) the RSS growth during
each node's configure + activate at start (``rss_ready.per_node_mb``), (b) soaks with a subset of
the nodes (``--nodes``; without tts_node the turn ends at ``turn_end``), (c) the containers and
tracemalloc lines, which name the node and the file. docs/benchmarks.md has the results.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from bolt_agent.benchmarks.page_cache import evict_stack_files
from bolt_agent.benchmarks.voice_loop import UTTERANCES, Listener, _Proc

MB_PER_MIB = 1.048576
TURN_END_TIMEOUT_S = 90.0
SPOKEN_TIMEOUT_S = 60.0
PAUSE_S = 0.5
#: a short generation per step unless the caller says otherwise (the soak is about memory)
DEFAULT_MAX_NEW_TOKENS = 48


class SoakListener(Listener):
    """The voice loop's DDS listener plus each turn's outcome and a ``teleop/prompt`` publisher."""

    def __init__(self) -> None:
        self.outcome: dict[str, str] = {}
        super().__init__()
        from std_msgs.msg import String

        from bolt_agent.nodes.qos import RELIABLE

        self.prompt_pub = self.node.create_publisher(String, "teleop/prompt", RELIABLE)

    def _on_metrics(self, msg) -> None:
        if msg.outcome:
            with self.lock:
                self.outcome[msg.turn_id] = msg.outcome
        super()._on_metrics(msg)

    def prompt(self, text: str) -> None:
        from std_msgs.msg import String

        self.prompt_pub.publish(String(data=text))

    def wait_connected(self, with_tts: bool, timeout: float = 30.0) -> bool:
        """The llm_node hears our prompts and we hear its (and the TTS's) reports."""
        deadline = time.monotonic() + timeout
        want_metrics = 2 if with_tts else 1
        while time.monotonic() < deadline:
            n = self.node
            if (
                self.prompt_pub.get_subscription_count() >= 1
                and n.count_publishers("bolt/turn_metrics") >= want_metrics
                and (not with_tts or n.count_publishers("tts/state") >= 1)
            ):
                time.sleep(1.0)  # discovery done; let the matching settle on both sides
                return True
            time.sleep(0.1)
        return False


def _new_turn(lis: SoakListener, known: set[str]) -> str | None:
    """A teleop turn whose turn_end arrived and that is not one of ``known``."""
    return next((t for t in lis.turn_end if t.startswith("teleop-") and t not in known), None)


def drive_turn(i: int, text: str, lis: SoakListener, with_tts: bool) -> dict[str, Any]:
    row: dict[str, Any] = {"turn": i + 1, "text": text, "turn_id": "", "error": ""}
    with lis.lock:
        known = set(lis.turn_end)
    t0, wall0 = time.monotonic(), time.time()
    lis.prompt(text)
    uid = lis.wait(lambda: _new_turn(lis, known), TURN_END_TIMEOUT_S)
    if uid is None:
        row["error"] = f"no turn_end within {TURN_END_TIMEOUT_S:.0f} s"
        row["turn_s"] = time.monotonic() - t0
        return row
    row["turn_id"] = uid
    row["llm_s"] = lis.turn_end[uid] - wall0  # prompt → turn_end (arrival)

    if with_tts and lis.wait(lambda: lis.spoken(uid), SPOKEN_TIMEOUT_S) is None:
        row["error"] = f"TTS not done within {SPOKEN_TIMEOUT_S:.0f} s after turn_end"
    row["turn_s"] = time.monotonic() - t0
    with lis.lock:
        row["outcome"] = lis.outcome.get(uid, "")
        counters = lis.metrics.get(uid, {}).get("counters", {})
        row["prompt_tokens"] = int(counters.get("prompt_tokens", 0))
        row["completion_tokens"] = int(counters.get("completion_tokens", 0))
        row["spoken"] = uid in lis.first_sentence
    if not row["error"] and row["outcome"] != "ok":
        row["error"] = f"outcome {row['outcome'] or '(none)'}"
    return row


def _growth(before: dict[str, int], after: dict[str, int], top: int = 25) -> dict[str, int]:
    diff = {k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after)}
    grown = sorted(((v, k) for k, v in diff.items() if v > 0), reverse=True)[:top]
    return {k: v for v, k in grown}


def summarize(rows: list[dict[str, Any]], turns: int) -> dict[str, Any]:
    """The bench fields from the per-turn rows (RSS in MiB in the rows, MB in the fields)."""
    series = [r.get("VmRSS") for r in rows]
    first = max(1, turns // 4)  # "from turn N/4": after turn N/4 (1-based)
    growth = None
    if len(series) >= turns and series[first - 1] is not None and series[-1] is not None:
        growth = (series[-1] - series[first - 1]) * MB_PER_MIB
    failed = sum(1 for r in rows if r.get("error")) + max(0, turns - len(rows))
    out: dict[str, Any] = {
        "soak_turns": turns,
        "soak_rss_growth_mb": growth,
        "soak_failed_turns": failed,
        "soak_rss_series_mb": [None if v is None else round(v * MB_PER_MIB, 2) for v in series],
        "soak_growth_from_turn": first,
    }
    tail = [(k + 1, v) for k, v in enumerate(series) if k >= first - 1 and v is not None]
    if len(tail) >= 3:  # least-squares slope from turn N/4 on: less sensitive to one sample
        mx = sum(x for x, _ in tail) / len(tail)
        my = sum(y for _, y in tail) / len(tail)
        sxx = sum((x - mx) ** 2 for x, _ in tail)
        slope = sum((x - mx) * (y - my) for x, y in tail) / sxx
        out["soak_rss_slope_mb_per_100_turns"] = slope * 100 * MB_PER_MIB
    for key, name in (("RssAnon", "anon"), ("malloc_in_use", "malloc_in_use")):
        a, b = (rows[first - 1].get(key), rows[-1].get(key)) if len(rows) >= turns else (None,) * 2
        out[f"soak_{name}_growth_mb"] = (b - a) * MB_PER_MIB if a is not None and b else None
    return out


def run_soak(
    work: Path,
    turns: int,
    overrides: dict | None = None,
    profile: str = "reachy_mini",
    nodes: list[str] | None = None,
    trace: bool = False,
    log=print,
    host: dict | None = None,
) -> dict[str, Any]:
    """Run the soak; returns the bench fields (``soak_*``) plus ``soak`` (details)."""
    from bolt_agent.testing.pulse_server import PulseServer

    if turns < 1:
        raise ValueError("the soak needs at least 1 turn")
    overrides = {k: dict(v) for k, v in (overrides or {}).items()}
    overrides.setdefault("llm_node", {}).setdefault("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
    with_tts = not nodes or "tts_node" in nodes
    work.mkdir(parents=True, exist_ok=True)
    page_cache = evict_stack_files(log)  # before any process of the run maps them
    pulse = PulseServer.start(work)
    stack = None
    lis = None
    rows: list[dict[str, Any]] = []
    details: dict[str, Any] = {
        "overrides": overrides,
        "nodes": nodes or "all",
        "trace": trace,
        "page_cache": page_cache,
    }
    t_start = time.monotonic()
    try:
        cfg = {
            "profile": profile,
            "overrides": overrides,
            "nodes": nodes or [],
            **(host or {}),
        }
        stack = _Proc(
            ["-m", "bolt_agent.benchmarks.stack_host", json.dumps(cfg)],
            pulse.env(sink="robot_speaker", source="user_mouth.monitor"),
            work / "soak_stack.log",
        )
        log("soak: loading the stack…")
        ready = json.loads(stack.read(240))
        if ready["event"] != "ready":
            raise RuntimeError(f"stack failed to start: {ready['failed']} (see {work})")
        details["rss_ready"] = ready["rss"]

        ask = stack.ask
        # the start-up work the first turn no longer overlaps (llm_node's prompt prefill)
        details["startup_work_s"] = ready["startup_work_s"]
        details["not_ready"] = ready["not_ready"]
        details["diagnostics_ready"] = ask("diagnostics")["diagnostics"]
        details["smaps_ready"] = ask("smaps")["smaps"]
        details["threads_ready"] = ask("threads")["threads"]
        details["modules_ready"] = ask("modules")["modules"]
        lis = SoakListener()
        if not lis.wait_connected(with_tts):
            raise RuntimeError("the stack's llm_node did not appear on DDS within 30 s")
        first = max(1, turns // 4)
        for i in range(turns):
            row = drive_turn(i, UTTERANCES[i % len(UTTERANCES)], lis, with_tts)
            time.sleep(PAUSE_S)  # the per-turn trims run after the turn: sample after them
            row.update(ask("sample")["sample"])
            rows.append(row)
            log(
                f"soak turn {i + 1}/{turns}: {row['turn_s']:.1f} s, "
                f"{row.get('completion_tokens', 0)} tok (prompt {row.get('prompt_tokens', 0)}), "
                f"RSS {row['VmRSS']:.1f} MiB (anon {row['RssAnon']:.1f}, malloc in use "
                f"{row.get('malloc_in_use', 0):.1f}, "
                f"free held {row.get('malloc_free_held', 0):.1f})"
                + (f" FAILED: {row['error']}" if row["error"] else "")
            )
            if i + 1 == first:
                details["objects_at_from"] = ask("objects")["objects"]
                details["containers_at_from"] = ask("containers")["containers"]
                if trace:
                    ask("trace start 1")
        objects = ask("objects")["objects"]
        containers = ask("containers")["containers"]
        details["object_growth"] = _growth(details.pop("objects_at_from", {}), objects)
        details["container_growth"] = _growth(details.pop("containers_at_from", {}), containers)
        details["containers_end"] = {k: v for k, v in containers.items() if v >= 20}
        details["smaps_end"] = ask("smaps")["smaps"]
        details["threads_end"] = ask("threads")["threads"]
        details["cycles_end"] = ask("cycles")["cycles"]
        if trace:
            details["trace"] = ask("trace snap", 120)
        details["trim"] = ask("trim")
    finally:
        if lis is not None:
            lis.close()
        if stack is not None:
            stack.stop()
        pulse.stop()
    details["turns"] = rows
    details["wall_s"] = time.monotonic() - t_start
    return {**summarize(rows, turns), "soak": details}


def finite(result: dict[str, Any]) -> bool:
    v = result.get("soak_rss_growth_mb")
    return v is not None and math.isfinite(v)


def main(argv: list[str] | None = None) -> int:
    from bolt_agent.benchmarks.report import soak_lines
    from bolt_agent.benchmarks.run_inputs import model_bytes, parse_overrides

    ap = argparse.ArgumentParser(prog="python -m bolt_agent.benchmarks.soak")
    ap.add_argument("--turns", type=int, default=40)
    ap.add_argument("--out", default="")
    ap.add_argument("--nodes", default="", help="comma-separated subset of the stack's nodes")
    ap.add_argument("--set", action="append", default=[], metavar="NODE.PARAM=VALUE")
    ap.add_argument("--trace", action="store_true", help="tracemalloc from turn N/4 (diagnosis)")
    ap.add_argument("--profile", default="reachy_mini")
    args = ap.parse_args(argv)
    # a domain of our own, as `bolt-agent bench`: the venv's activate exports one shared
    # ROS_DOMAIN_ID, and another stack on it would answer (and cancel) our turns
    os.environ["ROS_DOMAIN_ID"] = os.environ.get("BOLT_BENCH_DOMAIN_ID") or str(
        random.SystemRandom().randint(102, 200)
    )
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    work = Path(tempfile.mkdtemp(prefix="bolt-soak-"))
    result = run_soak(
        work,
        args.turns,
        overrides=parse_overrides(args.set),
        profile=args.profile,
        nodes=[n for n in args.nodes.split(",") if n] or None,
        trace=args.trace,
        log=lambda m: print(m, flush=True),
    )
    result["soak"]["work_dir"] = str(work)
    result["soak"]["model_bytes"] = model_bytes()
    print("\n".join(soak_lines(result)))
    print(json.dumps({k: result["soak"][k] for k in ("object_growth", "container_growth")}))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1, default=str))
    return 0 if result["soak_failed_turns"] == 0 and finite(result) else 1


if __name__ == "__main__":
    raise SystemExit(main())

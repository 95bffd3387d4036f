"""Memory of each node in a process of its own (as ``ros2 launch`` runs them), and what llama.cpp's
CPU repacking costs and gives.

    python -m bolt_agent.benchmarks.node_memory --out /tmp/node_memory.json
        [--nodes asr_node,tts_node,llm_node] [--rounds 8] [--skip-nodes] [--skip-repack]

Nodes: each node alone in a ``stack_host`` process (the benchmark's PulseAudio null sinks for
the audio nodes), RSS once it is active, then what a ``malloc_trim`` would still give back (free
heap that glibc keeps: the node's own trims should leave almost nothing).

Repack: two engines on the bundled model in one process, ``cpu_repack`` off and on, each
loaded after a first engine has paid the one-time costs: the anonymous memory each load adds,
then prefill (300 tokens) and decode (24 tokens) speed, interleaved A, B, B, A… over
``--rounds``. Prints a table of each and writes JSON; the speeds are reported as ratios (this
machine is shared and noisy).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bolt_agent.benchmarks.page_cache import evict_stack_files
from bolt_agent.benchmarks.report import write_json
from bolt_agent.benchmarks.stack_host import rss_mb

NODES = ("asr_node", "tts_node", "llm_node")
_TEXT = b"The robot looked around the room and saw a table, two chairs and a window. " * 12


def node_processes(nodes: list[str], log=print) -> dict[str, Any]:
    """Each node alone in a ``stack_host`` process: RSS when ready and what a trim returns."""
    from bolt_agent.benchmarks.voice_loop import _Proc
    from bolt_agent.testing.pulse_server import PulseServer

    work = Path(tempfile.mkdtemp(prefix="bolt-node-memory-"))
    pulse = PulseServer.start(work)
    out: dict[str, Any] = {}
    try:
        for node in nodes:
            cfg = {"profile": "reachy_mini", "overrides": {}, "nodes": [node]}
            page_cache = evict_stack_files(log)
            proc = _Proc(
                ["-m", "bolt_agent.benchmarks.stack_host", json.dumps(cfg)],
                pulse.env(sink="robot_speaker", source="user_mouth.monitor"),
                work / f"{node}.log",
            )
            try:
                ready = json.loads(proc.read(240))
                if ready.get("event") != "ready":
                    raise RuntimeError(f"{node} did not start: {ready} (see {work})")
                proc.send("trim")
                trim = json.loads(proc.read(60))
            finally:
                proc.send("quit")
                proc.proc.wait(30)
            before, after = trim["before"], trim["after"]
            out[node] = {
                "rss_ready_mib": before["VmRSS"],
                "anon_ready_mib": before["RssAnon"],
                "trim_returns_mib": before["VmRSS"] - after["VmRSS"],
                "page_cache": page_cache,
            }
            log(
                f"{node}: RSS {before['VmRSS']:.1f} MiB, a trim returns "
                f"{out[node]['trim_returns_mib']:.1f} MiB"
            )
    finally:
        pulse.stop()
    return out


def repack(rounds: int, log=print) -> dict[str, Any]:
    """``cpu_repack`` off vs on: anonymous memory per load, prefill and decode tok/s."""
    from bolt_agent.core.llm.llama.engine import LlamaConfig, LlamaEngine
    from bolt_agent.core.models import resolve_model

    path = str(resolve_model("", kind="llm"))

    def load(on: bool) -> LlamaEngine:
        config = LlamaConfig(path, n_ctx=2048, n_threads=1, n_threads_batch=2, cpu_repack=on)
        return LlamaEngine(config).load()

    keep = [load(False)]  # one-time costs (backend, tokenizer tables) paid before measuring
    engines, anon = {}, {}
    for on in (False, True):
        before = rss_mb()["RssAnon"]
        engines[on] = load(on)
        anon[on] = rss_mb()["RssAnon"] - before
    speed: dict[bool, dict[str, list[float]]] = {on: {"prefill": [], "decode": []} for on in anon}
    for r in range(rounds):
        for on in (False, True) if r % 2 == 0 else (True, False):
            llm = engines[on].llm
            tokens = llm.tokenize(_TEXT)[:300]
            llm.reset()
            llm._ctx.kv_cache_clear()
            t0 = time.perf_counter()
            llm.eval(tokens)
            speed[on]["prefill"].append(len(tokens) / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            for i in range(24):
                llm.eval([1000 + i])
            speed[on]["decode"].append(24 / (time.perf_counter() - t0))
    del keep
    med = {on: {k: statistics.median(v) for k, v in speed[on].items()} for on in speed}
    result = {
        "anon_per_load_mib": {"off": anon[False], "on": anon[True]},
        "repacked_copy_mib": anon[True] - anon[False],
        "use_extra_bufts": {
            ("on" if on else "off"): e.model_params().get("use_extra_bufts")
            for on, e in engines.items()
        },
        "tok_s": {"off": med[False], "on": med[True]},
        "prefill_off_vs_on": med[False]["prefill"] / med[True]["prefill"],
        "decode_off_vs_on": med[False]["decode"] / med[True]["decode"],
        "rounds": rounds,
    }
    log(f"repack: +{result['repacked_copy_mib']:.1f} MiB anonymous")
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bolt_agent.benchmarks.node_memory", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--out", default="node_memory.json")
    ap.add_argument("--nodes", default=",".join(NODES))
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--skip-nodes", action="store_true")
    ap.add_argument("--skip-repack", action="store_true")
    args = ap.parse_args(argv)
    result: dict[str, Any] = {}
    if not args.skip_nodes:
        result["nodes"] = node_processes([n for n in args.nodes.split(",") if n])
        print("\n| node (own process) | RSS when active | a trim would return |\n|---|---|---|")
        for node, row in result["nodes"].items():
            print(
                f"| {node} | {row['rss_ready_mib']:.1f} MiB | {row['trim_returns_mib']:.1f} MiB |"
            )
    if not args.skip_repack:
        rp = result["repack"] = repack(args.rounds)
        print("\n| cpu_repack | anonymous per load | prefill tok/s | decode tok/s |")
        print("|---|---|---|---|")
        for key in ("off", "on"):
            tok = rp["tok_s"][key]
            print(
                f"| {key} | {rp['anon_per_load_mib'][key]:.1f} MiB | {tok['prefill']:.0f} | "
                f"{tok['decode']:.1f} |"
            )
        print(
            f"\noff ÷ on: prefill {rp['prefill_off_vs_on']:.3f}, decode "
            f"{rp['decode_off_vs_on']:.3f} ({args.rounds} interleaved rounds)"
        )
    write_json(Path(args.out), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

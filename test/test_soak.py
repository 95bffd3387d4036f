"""`bolt-agent bench --soak-turns N --soak-only`: a short real memory soak through the whole stack
(PulseAudio null sinks, every node, text turns over ``teleop/prompt``). Checks the JSON fields and
that every turn finished; the memory threshold is the benchmark's business, not this test's."""

from __future__ import annotations

import gc
import json
import math
import os
import subprocess
import sys

import pytest

from bolt_agent.benchmarks.report import markdown
from bolt_agent.benchmarks.soak import summarize
from bolt_agent.core.llm.llama.engine import _Chain
from bolt_agent.core.llm.profile import load_profile
from bolt_agent.core.llm.types import SamplingParams
from bolt_agent.core.tools.registry import ToolRegistry
from bolt_agent.nodes.tool_dispatcher import ToolDispatcher
from support.animation_dds import start_animation_node
from support.ros_helpers import spinning_node

TURNS = 5


def test_tool_dispatcher_keeps_nothing_per_finished_turn(node_process, unique_ns):
    """The soak found one empty list left per turn in ``ToolDispatcher._goals`` (+74 over 75
    turns): a turn's entry now goes with its last goal. Real animation server, real goals."""
    tool = load_profile("reachy_mini").registry.get("trigger_reachy_animation")
    start_animation_node(node_process, unique_ns, rate_hz=50.0)
    with spinning_node("tool_client", unique_ns.strip("/")) as node:
        tools = ToolDispatcher(node, ToolRegistry([tool]), server_wait_s=60.0)
        for turn in ("t1", "t2", "t3"):
            outcome = tools.dispatch(turn, tool.name, {"animation_name": "happy_nod"})
            assert outcome.result(timeout=60).ok
        assert tools._goals == {}  # nothing left for three finished turns


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_sampler_chain_is_freed_when_dropped(temperature):
    """The soak's leak: llama-cpp-python's LlamaSampler is a reference cycle, so a dropped
    chain's native memory waited for a gen-2 collection. Dropping our _Chain frees it at once."""
    enabled = gc.isenabled()
    gc.disable()  # no collection may do it for us
    try:
        chains = [_Chain(262_144, SamplingParams(temperature=temperature)) for _ in range(4)]
        owners = [c._owner for c in chains]
        assert all(o.sampler is not None for o in owners)
        del chains
        assert all(o.sampler is None for o in owners)  # llama_sampler_free ran
    finally:
        if enabled:
            gc.enable()


def test_summarize_growth_from_quarter_to_end():
    rows = [{"VmRSS": 100.0 + i, "RssAnon": 50.0 + i, "error": ""} for i in range(8)]
    rows[3]["error"] = "outcome failed: x"
    out = summarize(rows, 8)
    assert out["soak_growth_from_turn"] == 2  # after turn 8/4 = 2 (1-based) …
    assert out["soak_rss_growth_mb"] == pytest.approx((107 - 101) * 1.048576)  # … to turn 8
    assert out["soak_failed_turns"] == 1 and len(out["soak_rss_series_mb"]) == 8
    short = summarize(rows[:5], 8)  # a soak cut short: no growth figure, missing turns failed
    assert short["soak_rss_growth_mb"] is None and short["soak_failed_turns"] == 4


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_bench_soak(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bolt_agent.cli",
            "bench",
            "--soak-turns",
            str(TURNS),
            "--soak-only",
            "--set",
            "llm_node.max_new_tokens=24",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=400,
        env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["soak_turns"] == TURNS
    assert data["soak_failed_turns"] == 0, [t["error"] for t in data["soak"]["turns"]]
    assert math.isfinite(data["soak_rss_growth_mb"])
    series = data["soak_rss_series_mb"]
    assert len(series) == TURNS and all(math.isfinite(v) and v > 100 for v in series)
    assert data["soak"]["overrides"]["llm_node"]["max_new_tokens"] == 24
    turns = data["soak"]["turns"]
    assert [t["turn"] for t in turns] == list(range(1, TURNS + 1))
    assert all(t["outcome"] == "ok" and t["turn_id"].startswith("teleop-") for t in turns)
    assert set(data["soak"]["rss_ready"]["per_node_mb"]) >= {"tts_node", "asr_node", "llm_node"}
    # "ready" came after llm_node's start-up prefill: the prompt was in its cache by then
    llm_ready = data["soak"]["diagnostics_ready"]["llm_node"]
    assert llm_ready["startup_prefill_done"] is True and llm_ready["cached_tokens"] > 1000
    assert data["soak"]["not_ready"] == [] and data["soak"]["startup_work_s"] > 0
    assert math.isfinite(data["soak_rss_end_beyond_weights_mb"])
    # what the 100-turn soak found growing is gone: no native sampler chain waits for the cyclic
    # collector, no per-turn entry is left in the tool dispatcher (when the turns called tools)
    assert not [k for k in data["soak"]["cycles_end"] if "LlamaSampler" in k]
    assert "llm_node.tools._goals" not in data["soak"]["container_growth"]
    md = out.with_suffix(".md").read_text()
    assert "soak RSS growth, turn N/4 → N" in md and "| memory soak | value |" in md
    assert md == markdown(data)

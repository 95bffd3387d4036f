"""End to end with the real models, in simulation: scenarios pass, bags replay, the demo runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bolt_agent.core.sim.scenario import ScenarioError, load_scenario

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "config" / "scenarios"


def bolt_agent(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bolt_agent.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.fixture(scope="module")
def reachy_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("reachy")
    run = bolt_agent("sim", str(SCENARIOS / "reachy_three_turns.yaml"), "--out", str(out))
    return run, out


def test_reachy_scenario_passes_with_speech_before_every_tool(reachy_run):
    run, out = reachy_run
    report = json.loads((out / "report.json").read_text())
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert report["passed"]
    turns = report["turns"]
    assert len(turns) == 3 and all(t["completed"] for t in turns)
    tool_turns = [t for t in turns if t["tools"]]
    assert tool_turns, "the robot never moved"
    for t in tool_turns:
        assert t["stamps"]["first_speech"] < t["stamps"]["first_tool_goal"]


def test_the_run_bag_replays_to_the_same_transcripts(reachy_run):
    _, out = reachy_run
    replay = bolt_agent("sim", "--replay", str(out / "bag"))
    result = json.loads(replay.stdout[replay.stdout.index("{") :])
    assert replay.returncode == 0, result
    assert len(result["recorded"]) == 3 and result["same"], (result, replay.stderr[-3000:])


def test_blacksmith_scenario_passes(tmp_path):
    run = bolt_agent("sim", str(SCENARIOS / "blacksmith_three_turns.yaml"), "--out", str(tmp_path))
    report = json.loads((tmp_path / "report.json").read_text())
    assert run.returncode == 0 and report["passed"], run.stdout[-3000:] + run.stderr[-3000:]
    calls = [c for t in report["turns"] for c in t["tools"]]
    assert calls and {c["tool"] for c in calls} <= {
        "check_shop_inventory",
        "sell_to_player",
        "buy_from_player",
        "play_character_animation",
    }
    inventory = [c for c in calls if c["tool"] == "check_shop_inventory"]
    assert inventory and inventory[0]["ok"] and inventory[0]["result"]  # game state answered


def test_demo_runner_exits_zero():
    run = bolt_agent("run", "--sim", "--turns", "1")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "demo finished: 1/1 turns" in run.stdout


def test_invalid_scenarios_are_clear_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("turns: []\n")
    with pytest.raises(ScenarioError, match="no turns"):
        load_scenario(bad)
    bad.write_text("turns: [hi]\nexpect: [{fly: true}]\n")
    with pytest.raises(ScenarioError, match="expectation 1"):
        load_scenario(bad)
    run = bolt_agent("sim", str(bad))
    assert run.returncode == 2 and "expectation 1" in run.stdout

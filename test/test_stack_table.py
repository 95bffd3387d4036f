"""The embedded runner (``stack.spec``) and `ros2 launch` (``stack.launch_plan``) start the same
nodes with the same routing for the same arguments; the node table matches the node files.

Synchronous: nothing is constructed or spun (node modules are read, not imported)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from bolt_agent.stack import table
from bolt_agent.stack.launch_plan import ARGUMENTS, PLAN, resolve
from bolt_agent.stack.spec import NODE_CLASSES, StackSpec, effective_params, sim_overrides

ROOT = Path(__file__).resolve().parents[1]
DEFAULTS = {k: v for k, (v, _) in ARGUMENTS.items()}
ALL = {"llm_node", "asr_node", "tts_node", "perception_node", "animation_node", "game_state_node"}
ROUTING = {("asr_node", "audio_source"), ("tts_node", "audio_sink"), ("perception_node", "camera")}

CASES = {
    "defaults": {},
    "sim": {"sim": "true"},
    "bag": {"bag": "/tmp/run/bag"},
    "blacksmith_sim": {"sim": "true", "profile": "blacksmith_npc"},
    "blacksmith_no_game_state": {"profile": "blacksmith_npc", "game_state": "false"},
    "game_state_forced": {"game_state": "true"},
    "mic_and_camera_off": {"use_mic": "false", "use_camera": "false"},
    "switches_off": {"llm": "false", "perception": "false", "animation": "false"},
    "sim_speech_only": {"sim": "true", "llm": "false", "animation": "false", "perception": "0"},
    "models": {"llm_model": "bolt-e4b-q4km", "n_gpu_layers": "-1", "asr_model": "tiny.en"},
    "everything_off": {k: "false" for k in ("llm", "asr", "tts", "animation", "perception")},
}


@pytest.mark.parametrize("extra", CASES.values(), ids=CASES.keys())
def test_runner_and_launch_plan_agree(extra):
    args = {**DEFAULTS, **extra}
    planned = {plan.name: params for plan, params in resolve(args)}
    spec = StackSpec.from_args(args)
    assert set(spec.node_names()) == set(planned)
    assert len(spec.node_names()) == len(set(spec.node_names()))
    for name, params in planned.items():
        given = effective_params(spec, name)
        # what the launch file passes on top of the params file, the runner passes too
        assert {k: given.get(k) for k in params} == params, name


def test_the_cases_cover_what_they_claim():
    """Guards the table above: each case really changes the node set or the routing."""
    started = {k: {p.name for p, _ in resolve({**DEFAULTS, **v})} for k, v in CASES.items()}
    assert started["defaults"] == ALL - {"game_state_node"}
    assert "game_state_node" in started["blacksmith_sim"]
    assert "game_state_node" not in started["blacksmith_no_game_state"]
    assert "game_state_node" in started["game_state_forced"]
    assert started["switches_off"] == {"asr_node", "tts_node"}
    assert started["sim_speech_only"] == {"asr_node", "tts_node"}
    assert started["everything_off"] == set()


@pytest.mark.parametrize("sim", [True, False], ids=["sim", "devices"])
def test_routing_is_the_same_in_both(sim):
    args = {**DEFAULTS, "sim": str(sim).lower(), "perception": "true"}
    planned = {p.name: v for p, v in resolve(args)}
    spec = StackSpec.from_args(args)
    for node, param in ROUTING:
        runner = effective_params(spec, node)[param]
        assert (planned[node].get(param) == "topic") is sim, (node, param)
        assert (runner == "topic") is sim, (node, param, runner)


def test_device_switches_route_single_inputs_in_both():
    args = {**DEFAULTS, "use_mic": "false"}
    planned = {p.name: v for p, v in resolve(args)}
    spec = StackSpec.from_args(args)
    assert planned["asr_node"]["audio_source"] == "topic"
    assert effective_params(spec, "asr_node")["audio_source"] == "topic"
    assert "audio_sink" not in planned["tts_node"]
    assert effective_params(spec, "tts_node")["audio_sink"] == "device"  # the params file's


def test_runner_defaults_differ_from_launch_only_by_the_camera():
    """`bolt-agent run` / `sim` / the benchmark: the launch set minus perception (no camera)."""
    for sim in (True, False):
        for profile in ("reachy_mini", "blacksmith_npc"):
            spec = StackSpec(profile=profile, sim=sim)
            launch = {p.name for p, _ in resolve({**DEFAULTS, "profile": profile})}
            assert set(spec.node_names()) == launch - {"perception_node"}
    assert StackSpec(sim=False).node_names() == [
        "animation_node",
        "tts_node",
        "asr_node",
        "llm_node",
    ]
    blacksmith = StackSpec(profile="blacksmith_npc").node_names()
    assert blacksmith[:2] == ["animation_node", "game_state_node"] and blacksmith[-1] == "llm_node"
    # sim routing and the caller's overrides on top (a scenario's video beats camera=topic)
    spec = StackSpec(sim=True, nodes=["perception_node"], overrides={"perception_node": {}})
    assert effective_params(spec, "perception_node")["camera"] == "topic"
    spec.overrides["perception_node"]["camera"] = "clip.mp4"
    assert effective_params(spec, "perception_node")["camera"] == "clip.mp4"
    assert StackSpec(sim=True, args={"perception": "true"}).node_names()[1] == "perception_node"


def test_explicit_nodes_and_bad_names():
    assert StackSpec(nodes=["asr_node"]).node_names() == ["asr_node"]
    with pytest.raises(ValueError, match="nope_node"):
        StackSpec(nodes=["nope_node"]).node_names()
    with pytest.raises(ValueError, match="lmm"):
        StackSpec(args={"lmm": "false"}).node_names()
    with pytest.raises(ValueError, match="nope_node"):
        resolve(DEFAULTS, only=["nope_node"])


def test_in_process_tuning_stays_out_of_the_launch_files():
    planned = {p.name: v for p, v in resolve(DEFAULTS)}
    tuned = sim_overrides(StackSpec(sim=False))
    assert tuned["llm_node"]["n_threads"] == 1 and "n_threads" not in planned["llm_node"]
    assert tuned["llm_node"]["profile"] == planned["llm_node"]["profile"] == "reachy_mini"


def _classes(path: Path) -> dict[str, list[str]]:
    """class name → base names, read from the source (other modules are not imported)."""
    tree = ast.parse(path.read_text())
    return {
        c.name: [ast.unparse(b) for b in c.bases] for c in tree.body if isinstance(c, ast.ClassDef)
    }


def test_table_matches_node_files_scripts_and_params():
    setup = (ROOT / "setup.py").read_text()
    scripts = set(ast.literal_eval(re.search(r"NODES = (\[.*?\])", setup, re.S).group(1)))
    assert {e.name for e in table.NODES} == ALL == set(NODE_CLASSES) == {p.name for p in PLAN}
    assert list(NODE_CLASSES) == [e.name for e in table.NODES]  # one order: bring-up
    assert [e.name for e in table.NODES][-1] == "llm_node"  # the longest load goes last
    for entry in table.NODES:
        assert entry.executable in scripts
        assert (ROOT / "config" / entry.params_file).is_file(), entry.params_file
        path = ROOT / Path(*entry.module.split(".")).with_suffix(".py")
        bases = _classes(path).get(entry.cls)
        assert bases is not None, f"{entry.cls} not in {path.name}"
        assert any("Lifecycle" in b for b in bases) == entry.lifecycle, (entry.name, bases)
        for param, _, device_arg in entry.sim_params:
            assert f"{param}:" in (ROOT / "config" / entry.params_file).read_text(), param
            assert device_arg == "" or device_arg in ARGUMENTS

"""The Jetson memory plan: goals, that its choices are parameters the engine honours, the CLI."""

from __future__ import annotations

import json
from dataclasses import fields

import yaml

from bolt_agent.benchmarks import jetson_memory as jm
from bolt_agent.benchmarks.jetson_plan import build_plan, engine_settings


def test_plan_meets_the_goals_and_names_every_term():
    plan = build_plan()
    assert plan["llm_side_gb_4k"] <= 5.0 and plan["robot_total_gb_4k"] <= 6.5
    assert plan["llm_side_gb_4k"] < plan["llm_side_gb_36k"]
    for comp in plan["components"].values():
        assert comp["bytes"] > 0 and comp["derivation"]
    c = plan["components"]
    # only the four full-attention cache layers grow with the context: q8_0 = 34 B per 32 values
    growth = c["kv_36k"]["bytes"] - c["kv_4k"]["bytes"]
    assert growth == 4 * 2 * 1024 * 2 * (36864 - 4096) * 34 // 64
    # the embedding tables are bounded by the tokens seen, not their size
    assert c["embeddings_per_layer_host"]["bytes"] < c["embeddings_per_layer_host"]["table_bytes"]
    # the same plan with llama.cpp's default pinned copies and f16 cache does not fit
    profile = jm.load_profile()
    profile["llm_node"].update(embeddings="auto", cache_type_k="f16", cache_type_v="f16")
    assert build_plan(profile)["llm_side_gb_4k"] > 5.0


def test_more_distinct_tokens_cost_more_until_the_table_is_resident():
    small, large = build_plan(distinct=512), build_plan(distinct=10**6)
    assert small["llm_side_gb_4k"] < large["llm_side_gb_4k"]
    ple = large["components"]["embeddings_per_layer_host"]
    assert ple["bytes"] == ple["table_bytes"]


def test_profile_choices_are_llm_node_parameters_the_engine_passes():
    from bolt_agent.nodes.llm_params import LlmParams

    profile = jm.load_profile()
    names = {f.name for f in fields(LlmParams)}
    assert set(profile["llm_node"]) <= names
    kw = engine_settings(profile)
    from llama_cpp import llama_cpp as capi

    assert kw["type_k"] == kw["type_v"] == capi.GGML_TYPE_Q8_0
    assert kw["n_ubatch"] == 64 and kw["use_mmap"] is True and kw["flash_attn"] is True
    assert kw["model_params"] == {
        "use_extra_bufts": False,  # cpu_repack's default: no anonymous copy of host weights
        "no_host": True,
        "lazy_mode": capi.LLAMA_LAZY_MODE_ON,
    }
    rt = profile["runtime"]  # what bench's prediction uses is the same
    assert (rt["n_ubatch"], rt["cache_type"]) == (64, "Q8_0")


def test_cli_json_and_params_file(tmp_path, capsys):
    from bolt_agent.cli.main import main

    out = tmp_path / "llm_jetson.yaml"
    assert main(["jetson-plan", "--json", "--params-file", str(out)]) == 0
    plan = json.loads(capsys.readouterr().out)
    for key in ("llm_side_gb_4k", "llm_side_gb_36k", "robot_total_gb_4k", "robot_total_gb_36k"):
        assert isinstance(plan[key], float)
    assert plan["kv_4k_gb"] > 0 and plan["drafter_weights_gb"] > 0
    params = yaml.safe_load(out.read_text())["/**/llm_node"]["ros__parameters"]
    assert params["cache_type_k"] == "q8_0" and params["embeddings"] == "mmap"


def test_gpu_check_script_parses_and_passes_shellcheck():
    """bench/gpu_check.sh cannot run here (no GPU): its syntax and lint are what can be checked."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "bench" / "gpu_check.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    run = subprocess.run([shellcheck, str(script)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout
    text = script.read_text()
    assert "-DGGML_CUDA=on" in text and "CMAKE_CUDA_ARCHITECTURES=$ARCH" in text

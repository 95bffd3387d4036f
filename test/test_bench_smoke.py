"""`bolt-agent bench --turns 2 --quick`: the whole benchmark end to end on real devices: our loop
(a finished and a pause utterance), the pipecat peer on the same utterances, the offline parts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bolt_agent.core.models import resolve_model
from bolt_agent.stack.spec import StackSpec, effective_params

KEYS = (
    "voice_to_voice_p50_s",
    "voice_to_voice_p90_s",
    "overhead_ratio",
    "llm_tok_s_ratio",
    "prefix_reuse_ttft_ratio",
    "stack_rss_overhead_mb",
    "jetson_predicted_gb_4k",
    "jetson_predicted_gb_36k",
    "jetson_plan_llm_side_gb_4k",
    "jetson_plan_robot_total_gb_4k",
    "stage_median_s",
    "endpoint_delay_p50_s",
    "false_endpoint_rate",
    "peer_voice_to_voice_all_p50_s",
    "preemptive_wasted",
)
#: present, but None when the turns they need were split (a 2-turn run has 1 of each kind)
MAYBE_NONE = ("voice_to_voice_vs_peer", "peer_voice_to_voice_p50_s")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_bench_quick(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bolt_agent.cli",
            "bench",
            "--turns",
            "2",
            "--quick",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=580,
        env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    for key in KEYS:
        assert data[key] is not None, key
    assert data["turns_ok"] == 2
    assert 0 < data["voice_to_voice_p50_s"] < 60
    assert set(data["stage_median_s"]) >= {"vad_end", "asr_final", "first_audio", "audible"}
    assert out.with_suffix(".md").exists() and (tmp_path / "bench_stages.png").exists()
    assert all(key in data for key in MAYBE_NONE)
    assert [t["kind"] for t in data["turns"]] == ["finished", "pause"]
    assert data["pause_turns"] == 1 and 0 <= data["false_endpoint_rate"] <= 1
    # the nodes' /diagnostics at the end of the loop: device xruns are counted, not guessed
    diag = data["stack_diagnostics"]
    assert {"asr_node", "tts_node", "llm_node"} <= set(diag)
    assert {"phrase_hits", "output_underflows"} <= set(diag["tts_node"])
    assert data["output_underflows"] == diag["tts_node"]["output_underflows"] >= 0
    assert data["input_errors"] == diag["asr_node"]["input_errors"] >= 0

    # the peer: same utterances, measured the same way, after our loop
    peer = data["peer"]
    assert [t["text"] for t in peer["turns"]] == [t["text"] for t in data["turns"]]
    assert data["peer_turns_ok"] >= 1 and 0 < data["peer_voice_to_voice_all_p50_s"] < 60
    # our three models and the stack's thread budget, as read back from the peer process
    spec = StackSpec(sim=False, overrides=data["overrides"])
    llm, asr, tts = (effective_params(spec, n) for n in ("llm_node", "asr_node", "tts_node"))
    applied = peer["applied"]
    cmd = applied["llm_cmdline"]
    arg = dict(zip(cmd[2::2], cmd[3::2], strict=False))  # -m llama_cpp.server --flag value …
    assert cmd[:2] == ["-m", "llama_cpp.server"]
    assert arg["--model"] == str(resolve_model("", kind="llm"))
    assert arg["--host"] == "127.0.0.1" and arg["--chat_format"] == "gemma"
    assert int(arg["--n_threads"]) == llm["n_threads"]
    assert int(arg["--n_threads_batch"]) == (llm["n_threads_batch"] or llm["n_threads"])
    assert applied["asr_model"] == str(resolve_model("", kind="asr"))
    assert applied["asr_cpu_threads"] == asr["cpu_threads"]
    assert applied["tts_model"] == str(resolve_model("", kind="tts"))
    assert applied["tts_intra_op_threads"] == tts["cpu_threads"]
    assert peer["settings"]["max_tokens"] == 48 and peer["settings"]["peer"]
    md = out.with_suffix(".md").read_text()
    assert "| turn-taking | ours | pipecat |" in md and "ours ÷ pipecat" in md
    # Reachy Mini's control path against Pollen's simulated robot (5 s in --quick)
    robot = data["reachy_mini"]
    assert "skipped" not in robot, robot
    assert robot["steps_measured"] >= 3 and 0 < robot["latency_p50_s"] <= robot["latency_p90_s"] < 1
    assert 0 < robot["loop_cpu_share"] < 1 and robot["periods"] >= 0.8 * robot["periods_expected"]
    # the end of turn across voices (--quick: Piper's joe and one espeak-ng voice, 3 requests
    # and 3 paused sentences each)
    voices = data["voices"]["per_voice"]
    assert list(voices) == ["piper joe", "espeak en-us m"]
    for splits in voices.values():
        assert list(splits) == ["dev", "test"]  # the held-out split beside the tuned one
        for v in splits.values():
            assert v["utterances"] == 6 and v["paused"] == 3 and 0 <= v["paused_kept_whole"] <= 1
            assert 0 < v["end_of_turn_p50_s"] < 5 and 0 <= v["wer"] <= 1
            assert v["false_endpoints"] >= 0
    assert data["voices"]["test"]["utterances"] == 12
    assert data["voices_wer_vs_raw_whisper"] is not None
    assert "| voice | split | paused sentences kept whole |" in md
    assert "paused sentences kept whole, across voices" in md  # its goal row


def test_answer_path_runs_the_variants_interleaved_and_reports_ratios(tmp_path):
    """benchmarks/answer_path with the real model and voice: one line per round, two variants,
    every stage stamped, ratios against the first; a mistyped parameter is refused."""
    from bolt_agent.benchmarks import answer_path

    out = tmp_path / "answer.json"
    assert (
        answer_path.main(
            [
                "--rounds",
                "2",
                "--out",
                str(out),
                "--variant",
                "full:few_shot_nearest_short=false,few_shot_nearest_min_score=0.0",
                "--variant",
                "now:few_shot_nearest_short=true",
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    full, now = result["variants"]["full"], result["variants"]["now"]
    assert len(full["rows"]) == len(now["rows"]) == 2
    assert full["ratio_to_first"]["words_to_audio_s"] == 1.0
    for row in full["rows"] + now["rows"]:
        assert row["probe_s"] > 0 and row["first_token_s"] > 0 and row["sentence"]
    with pytest.raises(ValueError, match="not an llm_node parameter"):
        answer_path.parse_variant("x:few_shot_nearest_shrt=0")


def test_node_memory_measures_a_node_process(tmp_path):
    """benchmarks/node_memory, run as a user runs it: a node alone in its process (real
    PulseAudio sink) leaves nothing for a trim to return; its table and JSON. (The repack part:
    test_memory_settings.)"""
    out = tmp_path / "node_memory.json"
    cmd = [sys.executable, "-m", "bolt_agent.benchmarks.node_memory", "--skip-repack"]
    cmd += ["--nodes", "tts_node", "--out", str(out)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "| tts_node |" in run.stdout, run.stdout
    tts = json.loads(out.read_text())["nodes"]["tts_node"]
    assert tts["rss_ready_mib"] > 100 and tts["trim_returns_mib"] < 4, tts


def test_first_window_compares_the_shorter_window_with_the_full_one(tmp_path):
    """benchmarks/first_window, run as a user runs it, on three Piper lines: its table, and
    JSON with both variants' times, ratios and word errors."""
    out = tmp_path / "first_window.json"
    cmd = [sys.executable, "-m", "bolt_agent.benchmarks.first_window", "--seeds", "11"]
    run = subprocess.run(
        [*cmd, "--limit", "3", "--out", str(out)], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "| 6 s |" in run.stdout and "| none (full window only) |" in run.stdout, run.stdout
    result = json.loads(out.read_text())
    assert result["utterances"] == 3 and result["words"] > 10
    for variant in ("0.0", "6.0"):
        s = result["summary"][variant]
        assert s["median_s"] > 0 and s["wer"] < 0.5, s
    # the first window took part (kept or redone) on every line, and never in the full variant
    first = result["summary"]["6.0"]
    assert first["first_window_kept"] + sum(first["redone"].values()) == 3, first
    assert result["summary"]["0.0"]["first_window_kept"] == 0

"""`bolt-agent bench --turns 2 --quick`: the whole benchmark end to end on real devices."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

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
)


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

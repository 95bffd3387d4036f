"""The report writer with a small synthetic result: JSON keys, markdown verdicts, PNG plots."""

from __future__ import annotations

import json

from bolt_agent.benchmarks.report import markdown, write_report


def _result() -> dict:
    turns = [
        {
            "v2v_s": 0.8 + 0.1 * i,
            "stages_s": {"vad_end": 0.5, "asr_final": 0.2 + 0.1 * i, "first_audio": 0.1},
        }
        for i in range(4)
    ] + [{"v2v_s": None, "stages_s": {}}]
    return {
        "turns": turns,
        "voice_to_voice_p50_s": 0.95,
        "voice_to_voice_p90_s": 1.1,
        "overhead_ratio": 1.3,
        "llm_tok_s_ratio": 0.99,
        "prefix_reuse_ttft_ratio": 1.1,
        "stack_rss_overhead_mb": 350.0,
        "jetson_predicted_gb_4k": 5.1,
        "jetson_predicted_gb_36k": 5.6,
        "stage_median_s": {"vad_end": 0.5, "asr_final": 0.35},
    }


def test_markdown_verdicts():
    md = markdown(_result())
    assert "| end of speech → first audio p50 | 0.95 s | <= 0.8 s | MISSED |" in md
    assert "| end of speech → first audio p90 | 1.1 s | <= 1 s | MISSED |" in md
    assert "| stack ÷ raw libraries | 1.3 | <= 1.1 | MISSED |" in md
    assert "| stack RSS beyond model weights | 350 MB | <= 250 MB | MISSED |" in md
    assert "`jetson_predicted_gb_36k`" in md and "→ ASR final" in md


def test_write_report(tmp_path):
    files = write_report(_result(), tmp_path / "out" / "bench.json")
    data = json.loads(files["json"].read_text())
    assert data["voice_to_voice_p50_s"] == 0.95 and len(data["files"]["plots"]) == 2
    for key in ("stages", "cdf"):
        assert files[key].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert files["markdown"].read_text().startswith("| goal |")

"""The audio-latency benchmark: onsets found in a recording, the table, and a short real run
through PulseAudio null sinks with the stack's Player and MicCapture."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from bolt_agent.benchmarks.audio_latency import burst_onsets, summary, table


def test_burst_onsets_map_recorded_frames_to_wall_time():
    audio = np.zeros(16000 * 2, np.float32)
    audio[4000:5280] = 0.3  # a burst at 0.25 s
    audio[20000:21280] = -0.3  # and one at 1.25 s
    clock = np.array([[0, 100.0], [32000, 102.0]])  # frames_so_far, wall
    assert np.allclose(burst_onsets(audio, clock), [100.25, 101.25])
    assert len(burst_onsets(np.zeros(100, np.float32), clock)) == 0


def test_table_names_every_block_and_what_was_not_heard():
    result = {
        "output": {"10": summary([0.05, 0.06, 0.04], 3), "5": summary([], 3)},
        "input": {"32": summary([0.058], 1)},
    }
    text = table(result)
    assert "| Player write → heard | 10 ms | 50 ms | 40 ms | 60 ms | 3 of 3 |" in text
    assert "| Player write → heard | 5 ms | – | – | – | 0 of 3 |" in text
    assert "| burst → MicCapture | 32 ms | 58 ms |" in text


def test_a_short_run_hears_every_burst(tmp_path):
    out = tmp_path / "lat.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bolt_agent.benchmarks.audio_latency", "--bursts", "3",
         "--output-blocks", "10", "--input-blocks", "10", "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(out.read_text())
    for path in ("output", "input"):
        s = data[path]["10"]
        assert s["n"] == 3, data
        assert 0 < s["min_s"] <= s["median_s"] <= s["max_s"] < 0.4

"""The ALSA plugins PortAudio's device scan loads are unloaded once the stack's streams are open.

A child process on the test's PulseAudio daemon (through ALSA's pulse plugin, as on the robot)
lists the devices, opens a ``MicCapture`` and a ``Player``, and reports which ALSA plugin modules
are mapped at each step, and whether a tone the player plays is heard by the microphone (on the
sink's monitor) after the release and after a close and reopen.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support.audio_fixtures import pulse  # noqa: F401 - fixture

CHILD = r"""
import json, time
import numpy as np
from bolt_agent.core.audio.audio_io import MicCapture, list_devices
from bolt_agent.core.audio.playback import Player

def plugins():
    return sorted({line.split()[-1].rsplit("/", 1)[-1] for line in open("/proc/self/maps")
                   if "libasound_module_pcm_" in line})

blocks = []
def on_audio(chunk, stamp_ns, lost_ns):
    blocks.append(float(np.abs(chunk).max()) if len(chunk) else 0.0)

def heard(player, tag):
    # 0.3 s of a tone played on the sink the microphone records: (played to its end, loudest block)
    n = len(blocks)
    t = np.arange(int(0.3 * 22050)) / 22050
    player.write(tag, (np.sin(2 * np.pi * 440 * t) * 16000).astype(np.int16))
    end = time.monotonic() + 3
    while not player.done(tag) and time.monotonic() < end:
        time.sleep(0.02)
    time.sleep(0.3)
    return player.done(tag), max(blocks[n:], default=0.0), len(blocks) - n

out = {}
list_devices()
out["scanned"] = plugins()
mic, player = MicCapture("default", on_audio, block_ms=32), Player("default", 22050)
player.open()  # (the embedded stack's order: tts_node is activated before asr_node)
mic.open()
out["open"] = plugins()
out["after_release"] = heard(player, "a")
mic.close()
player.close()
player.open(rescan=True)
mic.open(rescan=True)
out["reopened"] = plugins()
out["after_reopen"] = heard(player, "b")
mic.close()
player.close()
print(json.dumps(out))
"""


def test_the_scan_s_plugins_are_unloaded_once_the_streams_are_open(pulse):  # noqa: F811
    env = {**os.environ, **pulse.env(sink="robot_speaker", source="robot_speaker.monitor")}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    pulse_only = ["libasound_module_pcm_pulse.so"]
    assert "libasound_module_pcm_pulse.so" in out["scanned"], out
    if out["scanned"] == pulse_only:
        pytest.skip("this machine's ALSA configuration defines no plugin PCM but pulse")
    # with the streams open, only the plugin they play through is left (the scan loaded a52,
    # jack, oss, … here)
    assert out["open"] == pulse_only, out
    assert out["reopened"] == pulse_only, out
    # both streams work after the release and after a reopen: the tone the player played to its
    # end is in the microphone's blocks (~0.49 peak), which keep coming
    for played, loudest, n_blocks in (out["after_release"], out["after_reopen"]):
        assert played and loudest > 0.2 and n_blocks >= 10, out

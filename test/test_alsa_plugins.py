"""The ALSA plugins PortAudio's device scan loads are unloaded once the stack's streams are open.

A child process on the test's PulseAudio daemon (through ALSA's pulse plugin, as on the robot)
lists the devices, opens a ``MicCapture`` and a ``Player``, and reports which ALSA plugin modules
are mapped at each step, and that the microphone's blocks still come after the release and after
a close and reopen.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from audio_fixtures import pulse  # noqa: F401 - fixture

CHILD = r"""
import json, threading, time
from bolt_agent.core.speech.audio_io import MicCapture, list_devices
from bolt_agent.core.speech.playback import Player

def plugins():
    return sorted({line.split()[-1].rsplit("/", 1)[-1] for line in open("/proc/self/maps")
                   if "libasound_module_pcm_" in line})

blocks = []
def on_audio(chunk, stamp_ns, lost_ns):
    blocks.append(len(chunk))

def blocks_for(seconds):
    n = len(blocks)
    time.sleep(seconds)
    return len(blocks) - n

out = {}
list_devices()
out["scanned"] = plugins()
mic, player = MicCapture("default", on_audio, block_ms=32), Player("default", 22050)
mic.open()
player.open()
out["open"] = plugins()
out["blocks_after_release"] = blocks_for(0.5)
mic.close()
player.close()
mic.open(rescan=True)
player.open(rescan=True)
out["reopened"] = plugins()
out["blocks_after_reopen"] = blocks_for(0.5)
mic.close()
player.close()
print(json.dumps(out))
"""


def test_the_scan_s_plugins_are_unloaded_once_the_streams_are_open(pulse):  # noqa: F811
    env = {**os.environ, **pulse.env(sink="robot_speaker", source="user_mouth.monitor")}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    pulse_only = ["libasound_module_pcm_pulse.so"]
    # the scan opened every PCM of this machine's ALSA configuration (a52, jack, oss, …)
    assert "libasound_module_pcm_pulse.so" in out["scanned"]
    assert len(out["scanned"]) > 1, out
    # with the streams open, only the plugin they play through is left
    assert out["open"] == pulse_only, out
    assert out["reopened"] == pulse_only, out
    # 32 ms blocks: ~15 in half a second; the streams work after the release and a reopen
    assert out["blocks_after_release"] >= 8, out
    assert out["blocks_after_reopen"] >= 8, out

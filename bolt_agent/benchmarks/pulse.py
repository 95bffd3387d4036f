"""The benchmark's PulseAudio set-up (on the shared ``bolt_agent.testing.pulse_server``).

Sinks: ``user_mouth`` (the player speaks into it; the ASR node records its monitor),
``robot_speaker`` (the TTS node plays into it) and ``bench_mix`` (stereo): two loopbacks copy
``user_mouth.monitor`` to its left channel and ``robot_speaker.monitor`` to its right one, so one
recorder sees both sides on one clock.
"""

from __future__ import annotations

from pathlib import Path

from bolt_agent.testing.pulse_server import SINKS, PulseServer

MIX = "bench_mix"


def start_bench_pulse(root: Path, loopback_ms: int = 20) -> PulseServer:
    loop = f"latency_msec={loopback_ms}"
    mix = [
        f"module-null-sink sink_name={MIX} rate=48000 channels=2 "
        "channel_map=front-left,front-right",
        *[
            f"module-remap-sink sink_name={MIX}_{side} master={MIX} channels=1 "
            f"master_channel_map=front-{side} channel_map=mono remix=no"
            for side in ("left", "right")
        ],
        f"module-loopback source=user_mouth.monitor sink={MIX}_left {loop}",
        f"module-loopback source=robot_speaker.monitor sink={MIX}_right {loop}",
    ]
    return PulseServer.start(root, SINKS, extra_modules=mix, ready_sink=MIX)

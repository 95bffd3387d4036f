"""A room made of PulseAudio devices, where the robot's speaker reaches its own microphone.

The simulated room of ``core/audio/room.py`` works on topics; this one works on real PortAudio
devices, so what is tested is the path a robot with a sound card has:

* ``robot_speaker`` (a null sink) is the loudspeaker, and ``room`` (another null sink) is the
  air: whatever is played on it reaches the microphone, which is ``room.monitor``;
* each echo path is a ``module-loopback`` from ``robot_speaker.monitor`` to ``room`` with its
  own latency and gain (the direct path, then a weaker, later reflection);
* the user speaks by playing on ``room``;
* with ``canceller`` true, PulseAudio's WebRTC canceller (``module-echo-cancel``) sits between
  them, as ``docs/echo.md`` sets it up on a robot: the stack plays on its sink ``ec_speaker``
  (forwarded to ``robot_speaker``, which is its reference) and records its source ``ec_mic``
  (``room.monitor`` with the robot's voice taken out).

The canceller's automatic gain control is off: it would raise the residual echo between the
robot's words to speech level, and the stack has its own level handling (the VAD).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bolt_agent.testing.pulse_server import PulseServer


@dataclass(frozen=True)
class EchoPath:
    """The robot's voice arriving at the microphone ``latency_ms`` late at ``gain_db``."""

    latency_ms: int
    gain_db: float


#: the direct path (issue 42's room: 30-80 ms, -6 to -12 dB), then one reflection 10+ dB under it
ROOM_PATHS = (EchoPath(50, -9.0), EchoPath(120, -21.0))
SPEAKER, AIR = "robot_speaker", "room"
MIC = f"{AIR}.monitor"
EC_SPEAKER, EC_MIC = "ec_speaker", "ec_mic"
EC_ARGS = "analog_gain_control=0 digital_gain_control=0"


@dataclass
class PulseRoom:
    server: PulseServer
    canceller: bool

    @property
    def speaker(self) -> str:
        """The sink the robot plays on."""
        return EC_SPEAKER if self.canceller else SPEAKER

    @property
    def microphone(self) -> str:
        """The source the robot records."""
        return EC_MIC if self.canceller else MIC

    def stop(self) -> None:
        self.server.stop()


def start_pulse_room(
    root: Path, paths: Sequence[EchoPath] = ROOM_PATHS, canceller: bool = True
) -> PulseRoom:
    """A private PulseAudio daemon holding the room; ``stop()`` ends it."""
    # as a desktop or robot session runs it (rtkit): ahead of the models on the cores, or its
    # canceller's timing slips and the echo it leaves grows (ERLE 17 dB with a busy core)
    server = PulseServer.start(
        root, sinks=(SPEAKER, AIR), daemon_args=("--high-priority=yes", "--realtime=yes")
    )
    try:
        for path in paths:
            module = server.pactl(
                "load-module", "module-loopback", f"source={SPEAKER}.monitor", f"sink={AIR}",
                f"latency_msec={path.latency_ms}", "source_dont_move=1", "sink_dont_move=1",
                "adjust_time=0",
            ).strip()  # fmt: skip
            if not module.isdigit():
                raise RuntimeError(f"module-loopback did not load for {path}")
            _set_gain(server, module, path.gain_db)
        if canceller:
            module = server.pactl(
                "load-module", "module-echo-cancel", "aec_method=webrtc", f'aec_args="{EC_ARGS}"',
                f"source_master={MIC}", f"sink_master={SPEAKER}",
                f"source_name={EC_MIC}", f"sink_name={EC_SPEAKER}",
            ).strip()  # fmt: skip
            if not module.isdigit():
                raise RuntimeError(
                    "module-echo-cancel did not load (Debian's pulseaudio links it to "
                    "libwebrtc-audio-processing1)"
                )
    except BaseException:
        server.stop()
        raise
    return PulseRoom(server, canceller)


def _set_gain(server: PulseServer, module: str, gain_db: float) -> None:
    out = server.pactl("-f", "json", "list", "sink-inputs")
    inputs = [i for i in json.loads(out or "[]") if str(i.get("owner_module")) == module]
    if len(inputs) != 1:
        raise RuntimeError(f"module {module}'s loopback stream not found: {out!r}")
    server.pactl("set-sink-input-volume", str(inputs[0]["index"]), f"{gain_db}dB")

"""Fault injection: the TTS output device disappears mid-sentence and comes back.

tts_node runs in its own process on a PulseAudio null sink of its own (real PortAudio through
ALSA's pulse plugin); the sink's module is unloaded while a sentence plays and loaded back
with the same name. PulseAudio moves the stream to another sink when its sink goes (PortAudio
sees no error), so the node must notice through its output watch. Prints the measured figures
(``FIGURE name=value``; docs/reliability.md has them)."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid

import numpy as np

from bolt_agent.core.audio.playback import Player
from bolt_agent.core.audio.pulse_route import PulseRoute
from bolt_agent.nodes import qos
from bolt_agent.testing.pulse_server import wait_for
from bolt_agent_interfaces.msg import SpokenText, TtsState
from support.audio_fixtures import Recorder, pulse  # noqa: F401 - fixture
from support.diagnostics import Diagnostics, History
from support.ros_helpers import ros_node, spin_until, wait_for_subscriber

LONG = (
    "Hello there, let me check the back room for you. "
    "I have iron helmets, leather boots and a fine steel breastplate. "
    "Come back tomorrow and I will have even more."
)
RATE = 16000


def figure(name: str, value: float, unit: str = " s") -> None:
    print(f"FIGURE {name}={value:.3f}{unit}")


def node_streams(pulse, pid: int) -> list[int]:  # noqa: F811
    """Sink indices of the playback streams of process ``pid``."""
    inputs = json.loads(pulse.pactl("-f", "json", "list", "sink-inputs") or "[]")
    return [
        int(s["sink"])
        for s in inputs
        if s.get("properties", {}).get("application.process.id") == str(pid)
    ]


def load_sink(pulse, name: str) -> str:  # noqa: F811
    module = pulse.pactl(
        "load-module", "module-null-sink", f"sink_name={name}", "rate=48000", "channels=1"
    ).strip()
    assert module.isdigit(), f"could not load sink {name}: {module!r}"
    return module


def test_tts_device_vanishing_mid_sentence_is_reported_and_speech_resumes_on_it(
    node_process,
    unique_ns,
    pulse,  # noqa: F811
    tmp_path,
):
    sink = f"tts_fault_{uuid.uuid4().hex[:6]}"
    module = load_sink(pulse, sink)
    recorders: list[Recorder] = []
    try:
        args = ["-m", "bolt_agent.nodes.tts_node", "--ros-args", "-r", f"__ns:={unique_ns}"]
        args += ["-p", "retry_s:=1.0"]
        proc = node_process(*args, env=pulse.env(sink=sink), name="tts")
        with ros_node("tts_fault_probe") as (node, ex):
            statuses = History(node, unique_ns, "tts_node")
            states: list[TtsState] = []
            node.create_subscription(TtsState, f"{unique_ns}/tts/state", states.append, qos.LATCHED)
            diag = Diagnostics(node, unique_ns)
            say = node.create_publisher(SpokenText, f"{unique_ns}/speech/say", qos.RELIABLE)

            def status_after(i: int, text: str, level: str = "") -> bool:
                return any(
                    text in s.get("message", "") and s.get("level", "").startswith(level)
                    for s in statuses[i:]
                )

            spin_until(ex, lambda: status_after(0, "open on device"), 60, proc.log)
            assert status_after(0, f"PulseAudio sink {sink!r}"), statuses
            wait_for_subscriber(ex, say)

            # 1. a long sentence really plays on the sink; unload the sink mid-sentence
            before = Recorder(pulse, f"{sink}.monitor", tmp_path / "before.raw", 20)
            recorders.append(before)
            say.publish(SpokenText(turn_id="t1", seq=0, text=LONG, is_last_in_turn=True))
            spin_until(ex, lambda: before.loud_s() >= 0.5, 30, "speech on the sink")
            n_status = len(statuses)
            pulse.pactl("unload-module", module)
            t_unload = time.monotonic()
            module = ""

            # 2. detected and reported: /diagnostics ERROR with the reason and the counter
            lost = "audio output lost"
            spin_until(ex, lambda: status_after(n_status, lost, "ERROR"), 20, proc.log)
            detection_s = time.monotonic() - t_unload
            report = next(s for s in statuses[n_status:] if s["level"] == "ERROR")
            assert lost in report["message"] and sink in report["message"], report
            level, _, values = diag.wait(
                ex,
                "tts_node",
                lambda lv, m, v: lv == "ERROR" and int(v.get("failures.output_lost", 0)) >= 1,
                10,
            )
            assert level == "ERROR", (level, values)
            assert lost in proc.log()

            # the current sentence is dropped: interrupted, what was played before is reported
            def t1_cut() -> list[TtsState]:
                return [m for m in states if m.turn_id == "t1" and m.interrupted]

            spin_until(ex, t1_cut, 10, "t1 interrupted")
            cut = t1_cut()[-1]
            assert not cut.speaking
            assert LONG.startswith(cut.spoken_text) and len(cut.spoken_text) < len(LONG)
            # and nothing keeps playing on the sink PulseAudio moved the stream to
            assert node_streams(pulse, proc.proc.pid) == [], pulse.pactl("list", "sink-inputs")

            # 3. while it is gone, a sentence is dropped and counted, not queued for later
            say.publish(
                SpokenText(turn_id="t2", seq=0, text="Nobody hears me.", is_last_in_turn=True)
            )
            diag.wait(ex, "tts_node", lambda lv, m, v: int(v.get("failures.no_output", 0)) >= 1, 30)
            assert proc.alive(), proc.log()

            # 4. the sink comes back under the same name: reopened there, speech resumes on it
            n_status = len(statuses)
            module = load_sink(pulse, sink)
            t_back = time.monotonic()
            after = Recorder(pulse, f"{sink}.monitor", tmp_path / "after.raw", 20)
            recorders.append(after)
            spin_until(ex, lambda: status_after(n_status, "open on device"), 30, proc.log)
            reopen_s = time.monotonic() - t_back
            back = "I am back on my own speaker."
            say.publish(SpokenText(turn_id="t3", seq=0, text=back, is_last_in_turn=True))
            spin_until(ex, lambda: after.loud_s() >= 0.3, 30, "speech on the returned sink")
            resumed_s = time.monotonic() - t_back
            spin_until(
                ex,
                lambda: any(m.turn_id == "t3" and m.spoken_text == back for m in states),
                30,
                "t3 spoken",
            )
            assert not any(m.interrupted for m in states if m.turn_id == "t3")
            diag.wait(ex, "tts_node", lambda lv, m, v: lv == "OK" or "recent failure" in m, 10)
            figure("tts_device_loss_detected", detection_s)
            figure("tts_device_reopened", reopen_s)
            figure("tts_device_resumed_audio", resumed_s)
            assert detection_s < 10 and resumed_s < 30  # generous: figures are in the docs
        assert proc.alive(), proc.log()
    finally:
        for recorder in recorders:
            recorder.stop()
        if module:
            pulse.pactl("unload-module", module)


def test_the_sink_watch_asks_pulseaudio_only_after_a_sink_event(pulse, monkeypatch):  # noqa: F811
    """The periodic watch is nearly free: ``pactl subscribe`` events decide when PulseAudio is
    asked again; a vanished sink is still seen at the next check."""
    for key, value in pulse.base_env.items():
        monkeypatch.setenv(key, value)
    name = f"watch_{uuid.uuid4().hex[:6]}"
    module = load_sink(pulse, name)
    route = PulseRoute(name, full_check_s=3600.0)
    other = ""
    try:
        assert route.check(force=False) is None and route.full_checks == 1  # first: asks
        other = load_sink(pulse, name + "_b")  # an event proves the subscription is live
        wait_for(lambda: route.check(force=False) is None and route.full_checks == 2, 10, "event")
        for _ in range(20):  # quiet: no pactl query at all
            assert route.check(force=False) is None
        assert route.full_checks == 2
        pulse.pactl("unload-module", module)
        wait_for(lambda: route.check(force=False) is not None, 10, "the loss")
        assert "is gone" in (route.check(force=False) or "")  # still wrong: asked again
    finally:
        route.close()
        for m in (module, other):
            if m:
                pulse.pactl("unload-module", m)


def test_the_player_plays_on_its_routed_sink_also_after_a_stop(pulse, monkeypatch):  # noqa: F811
    """PortAudio cannot name a PulseAudio sink, and tts_node no longer sets ``PULSE_SINK`` for
    the whole process: the player opens its stream on its route's sink (here not the default
    one), keeps it there when a stop restarts it (the ALSA plugin then makes a new PulseAudio
    stream), and leaves the process's environment as it was."""
    for key, value in pulse.base_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("PULSE_SINK", raising=False)
    name = f"route_{uuid.uuid4().hex[:6]}"
    module = load_sink(pulse, name)
    default = subprocess.run(
        ["pactl", "get-default-sink"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert default and default != name
    player = Player("", RATE, route=PulseRoute(name))
    try:
        player.open()
        assert "PULSE_SINK" not in os.environ
        assert player.route.stream_sinks() == [name]
        player.write("tone", (np.sin(np.arange(RATE // 2) / 5.0) * 8000).astype(np.int16))
        player.stop()
        assert player.route.stream_sinks() == [name]
        assert player.lost() is None
    finally:
        player.close()
        player.route.close()
        pulse.pactl("unload-module", module)

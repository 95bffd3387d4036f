"""Closed loop over real audio: the TTS node plays into the `robot_speaker` null sink, the ASR
node (another process) records `robot_speaker.monitor` and must hear what was said."""

from __future__ import annotations

import json

import pytest
from std_msgs.msg import String

from audio_fixtures import pulse, wer  # noqa: F401 - fixture
from bolt_agent.nodes import qos
from bolt_agent_interfaces.msg import SpokenText, Transcript, TtsState, TurnMetrics
from ros_helpers import ros_node, spin_until, wait_for_subscriber

SENTENCE = "Hello there, let me check the back room for you."


@pytest.mark.slow
def test_tts_to_asr_through_pulseaudio(node_process, unique_ns, pulse):  # noqa: F811
    ros = ["--ros-args", "-r", f"__ns:={unique_ns}"]
    tts = node_process(
        "-m", "bolt_agent.nodes.tts_node", *ros, env=pulse.env(sink="robot_speaker"), name="tts"
    )
    asr = node_process(
        "-m",
        "bolt_agent.nodes.asr_node",
        *ros,
        "-p",
        "echo_mode:=off",
        env=pulse.env(source="robot_speaker.monitor"),
        name="asr",
    )
    with ros_node("loop_probe") as (node, ex):
        status: dict[str, dict] = {}

        def on_status(msg: String) -> None:
            data = json.loads(msg.data)
            status[data["node"]] = data

        for name in ("tts_node", "asr_node"):
            node.create_subscription(String, f"{unique_ns}/{name}/status", on_status, qos.LATCHED)
        finals: list[Transcript] = []
        node.create_subscription(
            Transcript,
            f"{unique_ns}/asr/transcript",
            lambda m: finals.append(m) if m.is_final else None,
            50,
        )
        states: list[TtsState] = []
        node.create_subscription(TtsState, f"{unique_ns}/tts/state", states.append, qos.LATCHED)
        metrics: list[TurnMetrics] = []
        node.create_subscription(TurnMetrics, f"{unique_ns}/bolt/turn_metrics", metrics.append, 50)
        say = node.create_publisher(SpokenText, f"{unique_ns}/speech/say", qos.RELIABLE)

        def ready() -> bool:
            return all(status.get(n, {}).get("level") == "OK" for n in ("tts_node", "asr_node"))

        try:
            spin_until(ex, ready, 60, "both nodes' devices")
            wait_for_subscriber(ex, say)
            say.publish(SpokenText(turn_id="loop", seq=0, text=SENTENCE, is_last_in_turn=True))
            spin_until(ex, lambda: bool(finals), 45, "a final transcript")
            spin_until(ex, lambda: states and states[-1].spoken_text == SENTENCE, 10, "tts done")
            spin_until(ex, lambda: {m.source for m in metrics} == {"tts", "asr"}, 5, "metrics")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{status}\n{tts.log()}\n{asr.log()}") from None

    assert wer(SENTENCE, finals[0].text) <= 0.1, finals[0].text
    assert not states[-1].speaking and not states[-1].interrupted
    tts_m = next(m for m in metrics if m.source == "tts")
    asr_m = next(m for m in metrics if m.source == "asr")
    assert tts_m.turn_id == "loop" and asr_m.turn_id == finals[0].utterance_id
    # the ASR heard the speech after the TTS started it
    assert (asr_m.speech_end.sec, asr_m.speech_end.nanosec) > (
        tts_m.first_audio.sec,
        tts_m.first_audio.nanosec,
    )
    assert tts.alive() and asr.alive()

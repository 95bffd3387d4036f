"""The robot hears itself, over DDS with three node processes: tts_node plays on `audio/output`,
room_node returns that voice to the microphone (50 ms, -9 dB, a reflection tail, noise) with a
user on `room/say`, and asr_node listens on `audio/input` with `echo_mode: aec`.

* the robot speaking into its own microphone (its first sentences: the canceller starts cold)
  never stops itself;
* the user saying "Wait, stop ..." over it stops it (a barge-in, the TTS interrupted);
* the user saying "Yeah, I see." over it does not: the robot finishes, and the words come out on
  `asr/backchannel`, not as a turn on `asr/transcript`.
"""

from __future__ import annotations

import time

import pytest

from bolt_agent.nodes import qos
from bolt_agent_interfaces.msg import Transcript, TtsState, VoiceActivity
from support.asr import start_asr
from support.diagnostics import ActiveStatus, Diagnostics
from support.ros_helpers import ros_node, spin_until, wait_for_subscriber

LONG = (
    "Let me tell you about the lighthouse on the hill. It was built a long time ago by the "
    "people of the village, and every night its light turns slowly over the sea."
)

pytestmark = pytest.mark.slow


def test_echo_backchannel_and_interruption_over_dds(node_process, unique_ns):
    from std_msgs.msg import Header, String

    ros = ["--ros-args", "-r", f"__ns:={unique_ns}"]
    # 40 ms blocks on audio/output: a quarter of the messages of 10 ms ones, which asr_node's
    # executor (sharing 2 cores with whisper, Piper and the room) delivered up to 0.4 s late
    tts_params = ("-p", "audio_sink:=topic", "-p", "block_ms:=40")
    tts = node_process("-m", "bolt_agent.nodes.tts_node", *ros, *tts_params, name="tts")
    room_params = ("-p", "user_voice:=en-us")
    room = node_process("-m", "bolt_agent.nodes.room_node", *ros, *room_params, name="room")
    asr = start_asr(node_process, unique_ns, "audio_source:=topic", "echo_mode:=aec")

    with ros_node("echo_probe") as (node, ex):
        status = ActiveStatus(node, unique_ns, ("tts_node", "asr_node"))
        diagnostics = Diagnostics(node, unique_ns)

        def logs() -> str:
            said = [(s.turn_id, s.speaking, s.interrupted) for s in states]
            return f"{diagnostics.get('asr_node')}\n{said}\n{tts.log()}\n{room.log()}\n{asr.log()}"

        states: list[TtsState] = []
        voice: list[VoiceActivity] = []
        finals: list[Transcript] = []
        backchannels: list[Transcript] = []
        onsets: list[Header] = []
        ns = unique_ns
        node.create_subscription(TtsState, f"{ns}/tts/state", states.append, qos.LATCHED)
        node.create_subscription(VoiceActivity, f"{ns}/asr/voice_activity", voice.append, 50)
        node.create_subscription(
            Transcript, f"{ns}/asr/transcript", lambda m: m.is_final and finals.append(m), 50
        )
        node.create_subscription(Transcript, f"{ns}/asr/backchannel", backchannels.append, 50)
        node.create_subscription(Header, f"{ns}/room/user_onset", onsets.append, 10)
        say = node.create_publisher(String, f"{ns}/teleop/say", qos.RELIABLE)
        user = node.create_publisher(String, f"{ns}/room/say", 10)

        def turn(user_text: str | None, at_s: float = 1.2) -> TtsState:
            """The robot says LONG; the user says ``user_text`` ``at_s`` into it. The TTS's
            state once it has stopped speaking."""
            n = len(states)
            say.publish(String(data=LONG))
            spin_until(ex, lambda: any(s.speaking for s in states[n:]), 30, "the robot speaking")
            if user_text is not None:
                deadline = time.monotonic() + at_s
                spin_until(ex, lambda: time.monotonic() >= deadline, at_s + 1, "")
                user.publish(String(data=user_text))
            spin_until(
                ex,
                lambda: states and not states[-1].speaking and len(states) > n + 1,
                40,
                "the robot done",
            )
            return states[-1]

        try:
            spin_until(ex, lambda: len(status) == 2, 90, "tts_node and asr_node active")
            wait_for_subscriber(ex, say, count=2)  # tts_node speaks it, asr_node notes its words
            wait_for_subscriber(ex, user)

            # 1. the robot alone, twice: the canceller converges on the first
            for _ in range(2):
                done = turn(None)
                assert not done.interrupted, logs()
            assert not any(v.barge_in for v in voice), [v for v in voice]
            assert not finals, [f.text for f in finals]

            # 2. a backchannel: the robot goes on
            done = turn("Yeah, I see.")
            spin_until(ex, lambda: bool(backchannels), 15, "the backchannel's transcript")
            assert not done.interrupted, logs()
            assert not any(v.barge_in for v in voice)
            assert backchannels[-1].is_final and backchannels[-1].text, backchannels[-1]
            assert not finals, [f.text for f in finals]

            # 3. an interruption: the robot stops
            done = turn("Wait, stop, I have a question.")
            assert done.interrupted, logs()
            # (tts/state may reach this probe before the VoiceActivity that stopped the TTS)
            spin_until(ex, lambda: any(v.barge_in for v in voice), 5, "the barge-in")
            barge = [v for v in voice if v.barge_in]
            assert len(barge) == 1, barge
            # the listener's reason, through the core's logging bridged to ROS logging
            assert "over the robot: interrupt, from" in asr.log()
            # the user's words come as a turn, the utterance that stopped the robot (whisper
            # on espeak over the robot: the words vary from run to run, "Wade, Starp, ..." on
            # a loaded machine; their accuracy is the echo benchmark's WER)
            uid = barge[0].utterance_id
            spin_until(
                ex, lambda: any(f.utterance_id == uid for f in finals), 15, "the user's transcript"
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{logs()}") from None

    assert tts.alive() and room.alive() and asr.alive()

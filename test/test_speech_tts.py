"""TTS node in its own process: device playback into a PulseAudio null sink, barge-in,
headless topic output, the Speak action, teleop, and a missing device."""

from __future__ import annotations

import time

import pytest
from rclpy.action import ActionClient
from std_msgs.msg import String

from bolt_agent.nodes import qos
from bolt_agent_interfaces.action import Speak
from bolt_agent_interfaces.msg import AudioChunk, SpokenText, TtsState, TurnMetrics, VoiceActivity
from support.audio_fixtures import pulse, wait_for  # noqa: F401 - fixture
from support.diagnostics import History
from support.ros_helpers import ros_node, spin_until, wait_for_publisher, wait_for_subscriber

LONG = (
    "Hello there, let me check the back room for you. "
    "I have iron helmets, leather boots and a fine steel breastplate. "
    "Come back tomorrow and I will have even more."
)
STOP_TARGET_MS = 50.0


class Inbox:
    """Messages received on one topic."""

    def __init__(self, node, msg_type, topic: str, profile=qos.RELIABLE) -> None:
        self.items: list = []
        self.sub = node.create_subscription(msg_type, topic, self.items.append, profile)

    def last(self):
        return self.items[-1] if self.items else None


def start_tts(node_process, ns: str, *params: str, env: dict[str, str] | None = None):
    args = ["-m", "bolt_agent.nodes.tts_node", "--ros-args", "-r", f"__ns:={ns}"]
    for p in params:
        args += ["-p", p]
    return node_process(*args, env=env, name="tts")


def status_of(history: History) -> dict:
    return history.last()


@pytest.mark.slow
def test_barge_in_stops_device_playback_within_target(node_process, unique_ns, pulse):  # noqa: F811
    proc = start_tts(node_process, unique_ns, env=pulse.env(sink="robot_speaker"))
    with ros_node("tts_probe") as (node, ex):
        status = History(node, unique_ns, "tts_node")
        state = Inbox(node, TtsState, f"{unique_ns}/tts/state", qos.LATCHED)
        metrics = Inbox(node, TurnMetrics, f"{unique_ns}/bolt/turn_metrics")
        say = node.create_publisher(SpokenText, f"{unique_ns}/speech/say", qos.RELIABLE)
        barge = node.create_publisher(
            VoiceActivity, f"{unique_ns}/asr/voice_activity", qos.RELIABLE
        )
        spin_until(
            ex,
            lambda: "open on device" in status_of(status).get("message", ""),
            30,
            lambda: f"the output device to open: {status.last()} / {proc.log()}",
        )
        wait_for_subscriber(ex, say)
        wait_for_subscriber(ex, barge)
        say.publish(SpokenText(turn_id="t1", seq=0, text=LONG, is_last_in_turn=True))
        first = "Hello there, let me check the back room for you."
        spin_until(
            ex,
            lambda: any(s.spoken_text == first for s in state.items),
            30,
            "the first sentence to be played",
        )
        barge.publish(VoiceActivity(utterance_id="u1", speaking=True, barge_in=True))
        spin_until(ex, lambda: state.last().interrupted, 5, "an interrupted state")
        final = state.last()
        assert final.turn_id == "t1" and not final.speaking
        assert final.spoken_text.startswith(first) and len(final.spoken_text) < len(LONG)
        assert LONG.startswith(final.spoken_text)  # a prefix of what was asked, word aligned
        spin_until(ex, lambda: "stop.reason" in status_of(status), 5, "the stop report")
        stop = {k[5:]: v for k, v in status_of(status).items() if k.startswith("stop.")}
        print("stop report", stop)
        assert stop["reason"] == "barge-in" and stop["spoken"] == final.spoken_text
        assert float(stop["stop_ms"]) <= STOP_TARGET_MS, stop
        assert float(stop["last_audio_ms"]) <= STOP_TARGET_MS, stop
        assert [m.source for m in metrics.items] == ["tts"] and metrics.items[0].turn_id == "t1"
        assert metrics.items[0].first_audio.sec > 0
    assert proc.alive(), proc.log()


@pytest.mark.slow
def test_headless_speak_action_teleop_and_stop(node_process, unique_ns):
    proc = start_tts(node_process, unique_ns, "audio_sink:=topic")
    with ros_node("tts_probe") as (node, ex):
        state = Inbox(node, TtsState, f"{unique_ns}/tts/state", qos.LATCHED)
        audio = Inbox(node, AudioChunk, f"{unique_ns}/audio/output", qos.AUDIO)
        teleop = node.create_publisher(String, f"{unique_ns}/teleop/say", qos.RELIABLE)
        stop = node.create_publisher(String, f"{unique_ns}/tts/stop", qos.RELIABLE)
        client = ActionClient(node, Speak, f"{unique_ns}/tts/speak")
        spin_until(
            ex, lambda: client.server_is_ready(), 30, lambda: f"the Speak server: {proc.log()}"
        )
        wait_for_publisher(ex, audio.sub)

        def speak(text: str, interrupt: bool = False):
            future = client.send_goal_async(Speak.Goal(text=text, interrupt=interrupt))
            spin_until(ex, future.done, 10, "goal acceptance")
            return future.result().get_result_async()

        result = speak("Hi there.")
        spin_until(ex, result.done, 20, "the Speak result")
        assert result.result().result.completed
        assert result.result().result.spoken_text == "Hi there."
        samples = sum(len(m.samples) for m in audio.items)
        assert audio.items[0].sample_rate == 22050 and samples > 0.3 * 22050
        # said again: the phrase cache plays the very same audio (Piper itself draws new noise
        # each time: tests/test_core_speaker checks the cache, this the node's wiring of it)
        again = speak("Hi there.")
        spin_until(ex, again.done, 20, "the second Speak result")

        def said_twice() -> bool:
            # the stream is one utterance twice, byte for byte: compared as a whole, since the
            # last chunks can arrive after the action's result (another topic)
            data = b"".join(bytes(m.samples) for m in audio.items)
            return len(data) % 4 == 0 and data[: len(data) // 2] == data[len(data) // 2 :]

        spin_until(ex, said_twice, 10, lambda: f"the same audio twice ({len(audio.items)} chunks)")

        wait_for_subscriber(ex, teleop)
        before = len(audio.items)
        long_goal = speak(LONG)
        # interrupt 1.2 s into the first sentence (2.7 s long), timed by the audio itself
        spin_until(
            ex,
            lambda: sum(len(m.samples) for m in audio.items[before:]) >= 1.2 * 22050,
            20,
            "audio of the long goal",
        )
        teleop.publish(String(data="Stop right there."))
        spin_until(ex, long_goal.done, 10, "the interrupted goal")
        cut = long_goal.result().result
        first = "Hello there, let me check the back room for you."
        assert not cut.completed and cut.spoken_text and first.startswith(cut.spoken_text)
        assert 2 <= len(cut.spoken_text.split()) < len(first.split())  # proportional to samples
        spin_until(
            ex,
            lambda: state.last().turn_id.startswith("teleop") and state.last().speaking,
            20,
            "the teleop turn",
        )
        wait_for_subscriber(ex, stop)
        stop.publish(String(data=""))
        spin_until(ex, lambda: state.last().interrupted, 5, "tts/stop to interrupt teleop")
        assert state.last().turn_id.startswith("teleop")

        # two clients' goals: cancelling the one that waits leaves the one that plays whole
        first_goal = speak("Good morning to you. The forge is hot today.")
        spin_until(ex, lambda: state.last().speaking, 20, "the first goal to play")
        send = client.send_goal_async(Speak.Goal(text="Come back later."))
        spin_until(ex, send.done, 10, "the second goal's acceptance")
        waiting = send.result()
        cancel = waiting.cancel_goal_async()
        spin_until(ex, cancel.done, 10, "the cancel response")
        second = waiting.get_result_async()
        spin_until(ex, second.done, 10, "the cancelled goal's result")
        assert not second.result().result.completed and second.result().result.spoken_text == ""
        spin_until(ex, first_goal.done, 20, "the first goal's result")
        assert first_goal.result().result.completed, first_goal.result().result
        assert first_goal.result().result.spoken_text == (
            "Good morning to you. The forge is hot today."
        )
    assert proc.alive(), proc.log()


@pytest.mark.slow
def test_a_voice_over_the_robot_ducks_its_audio_until_the_voice_ends(node_process, unique_ns):
    import numpy as np

    text = "I have iron helmets, leather boots and a fine steel breastplate."
    # the phrase cache plays the line the same twice: the second, ducked, is compared with
    # the first sample by sample
    params = ("audio_sink:=topic", "duck_db:=-12.0", "phrase_cache_chars:=200")
    proc = start_tts(node_process, unique_ns, *params)
    with ros_node("tts_probe") as (node, ex):
        status = History(node, unique_ns, "tts_node")
        audio = Inbox(node, AudioChunk, f"{unique_ns}/audio/output", qos.AUDIO)
        voice = node.create_publisher(
            VoiceActivity, f"{unique_ns}/asr/voice_activity", qos.RELIABLE
        )
        client = ActionClient(node, Speak, f"{unique_ns}/tts/speak")
        spin_until(
            ex, lambda: client.server_is_ready(), 30, lambda: f"the Speak server: {proc.log()}"
        )
        wait_for_publisher(ex, audio.sub)
        wait_for_subscriber(ex, voice)
        rate = 22050

        def samples(since: int) -> np.ndarray:
            return np.concatenate(
                [np.asarray(m.samples, np.int16) for m in audio.items[since:]] or [np.zeros(0)]
            ).astype(np.float64)

        def say(expected: int = 0, during=()) -> np.ndarray:
            """The line's audio; ``during``: (s of its audio, a voice starts or ends)."""
            before = len(audio.items)
            future = client.send_goal_async(Speak.Goal(text=text))
            spin_until(ex, future.done, 10, "goal acceptance")
            result = future.result().get_result_async()
            for at_s, speaking in during:
                n = int(at_s * rate)
                spin_until(ex, lambda n=n: len(samples(before)) >= n, 20, f"{at_s} s of audio")
                voice.publish(VoiceActivity(utterance_id="u1", speaking=speaking))
            spin_until(ex, result.done, 20, "the Speak result")
            assert result.result().result.completed
            spin_until(ex, lambda: len(samples(before)) >= expected, 5, "the last chunks")
            return samples(before)

        first = say()
        ducked = say(len(first), [(0.8, True), (1.8, False)])
        assert len(ducked) == len(first)
        win = rate // 10
        ratios = []
        for k in range(len(first) // win):
            a, b = first[k * win : (k + 1) * win], ducked[k * win : (k + 1) * win]
            if np.sqrt(np.mean(a**2)) > 300:  # (speech, not the pauses)
                ratios.append((k / 10, 20 * np.log10(np.sqrt(np.mean(b**2) / np.mean(a**2)))))
        print("ducked - first, dB, per 0.1 s:", [(t, round(float(r), 1)) for t, r in ratios])
        before = [r for t, r in ratios if t < 0.7]
        during = [r for t, r in ratios if 1.2 <= t < 1.7]
        after = [r for t, r in ratios if t >= 2.6]
        assert before and during and after, ratios
        assert all(abs(r) < 0.5 for r in before + after), ratios  # the same audio, full level
        assert all(-13.0 < r < -11.0 for r in during), ratios  # 12 dB down while judged
        spin_until(ex, lambda: status.last().get("ducks") == "1", 5, "the duck counted")

        # a Speak goal cancelled while a voice ducks it (the voice has not ended): the next
        # line is at full level at once, not after duck_max_s
        before = len(audio.items)
        future = client.send_goal_async(Speak.Goal(text=text))
        spin_until(ex, future.done, 10, "goal acceptance")
        handle = future.result()
        spin_until(ex, lambda: len(samples(before)) >= int(0.8 * rate), 20, "0.8 s of audio")
        voice.publish(VoiceActivity(utterance_id="u2", speaking=True))
        spin_until(ex, lambda: status.last().get("ducks") == "2", 5, "the second duck")
        spin_until(ex, handle.cancel_goal_async().done, 10, "the cancel")
        result = handle.get_result_async()
        spin_until(ex, result.done, 10, "the cancelled result")
        assert not result.result().result.completed
        quiet_since = [time.monotonic(), len(audio.items)]

        def quiet() -> bool:  # no chunk of the cancelled line for 0.3 s
            if len(audio.items) != quiet_since[1]:
                quiet_since[:] = [time.monotonic(), len(audio.items)]
            return time.monotonic() - quiet_since[0] >= 0.3

        spin_until(ex, quiet, 5, "the cancelled line's last chunk")
        again = say(len(first))
        levels = [
            20 * np.log10(np.sqrt(np.mean(b**2) / np.mean(a**2)))
            for k in range(len(first) // win)
            if np.sqrt(np.mean((a := first[k * win : (k + 1) * win]) ** 2)) > 300
            for b in [again[k * win : (k + 1) * win]]
        ]
        assert levels and all(abs(r) < 0.5 for r in levels), levels
    assert proc.alive(), proc.log()


def test_missing_output_device_keeps_node_up_and_reports(node_process, unique_ns, pulse):  # noqa: F811
    proc = start_tts(
        node_process, unique_ns, "device:=no_such_device", "retry_s:=0.5", env=pulse.env()
    )
    with ros_node("tts_probe") as (node, ex):
        status = History(node, unique_ns, "tts_node")
        state = Inbox(node, TtsState, f"{unique_ns}/tts/state", qos.LATCHED)
        spin_until(ex, lambda: status_of(status).get("level") == "ERROR", 30, proc.log)
        message = status_of(status)["message"]
        assert "no_such_device" in message and "available output devices" in message
        assert "default" in message
        spin_until(ex, lambda: state.items, 5, "the idle state")
        assert not state.last().speaking
        spin_until(ex, lambda: proc.log().count("no_such_device") >= 2, 10, "a retry")
    assert proc.alive(), proc.log()


def test_missing_voice_fails_configure_with_the_file_named(node_process, unique_ns):
    proc = start_tts(node_process, unique_ns, "model:=/nonexistent/voice.onnx")
    wait_for(lambda: "configure failed" in proc.log(), 30, "the configure failure")
    log = proc.log()
    assert "TTS model missing" in log and "/nonexistent/voice.onnx" in log, log
    assert proc.alive(), log

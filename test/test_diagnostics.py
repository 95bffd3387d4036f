"""/diagnostics from real node processes: one DiagnosticStatus per node (its fully qualified
name, a level from the lifecycle state and the last status, the node's values), a missing camera
and a failed configure reported as ERROR with the reason, a deactivated node's state, and the ASR
node hearing a best-effort (sensor-data QoS) audio/input publisher."""

from __future__ import annotations

import time

import pytest
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState
from rclpy.qos import QoSProfile, ReliabilityPolicy

from bolt_agent.core.audio.audio_io import float_to_int16
from bolt_agent.nodes import qos
from bolt_agent_interfaces.msg import AudioChunk, Transcript, VoiceActivity
from support.audio_fixtures import make_speech, wer
from support.diagnostics import Diagnostics, start
from support.ros_helpers import ros_node, spin_until


def change_state(node, ex, ns: str, name: str, transition: int) -> None:
    client = node.create_client(ChangeState, f"{ns}/{name}/change_state")
    spin_until(ex, client.service_is_ready, 20, f"{name}/change_state")
    future = client.call_async(ChangeState.Request(transition=Transition(id=transition)))
    spin_until(ex, future.done, 20, f"transition {transition} of {name}")
    assert future.result().success, f"transition {transition} of {name} failed"


BASE_KEYS = {"last_error", "failures"}


def test_each_node_publishes_its_status(node_process, unique_ns):
    procs = [
        start(node_process, "game_state_node", unique_ns),
        start(node_process, "animation_node", unique_ns),
        start(node_process, "perception_node", unique_ns, "camera:=topic"),
    ]
    with ros_node("diag_probe") as (node, ex):
        diag = Diagnostics(node, unique_ns)
        for name in ("game_state_node", "animation_node", "perception_node"):
            diag.wait(ex, name, lambda level, *_: level == "OK", 60, procs)

        _, message, values = diag.get("game_state_node")
        assert message == "running"
        assert BASE_KEYS | {"state_file", "tools", "refused_calls"} <= values.keys(), values
        assert "sell_to_player" in values["tools"] and values["failures"] == "0"
        assert values["last_error"] == ""

        _, _, values = diag.get("animation_node")
        assert BASE_KEYS | {"device", "animations", "override", "queue_depth"} <= values.keys()
        assert values["device"] == "robot backend sim" and values["override"] == "false"
        assert values["control_loop_alive"] == "true"
        assert diag.latest["animation_node"].hardware_id == "robot backend sim"

        _level, message, values = diag.get("perception_node")
        assert values["lifecycle_state"] == "active", values
        assert BASE_KEYS | {"model", "device", "camera_open", "frames"} <= values.keys()
        assert values["model"] == "classical" and values["device"] == "topic camera/image_raw"
        assert message == "subscribed to camera/image_raw"

        # periodic, not once: the count keeps growing while nothing changes
        seen = diag.count
        spin_until(ex, lambda: diag.count >= seen + 6, 10, "periodic reports")
    assert all(p.alive() for p in procs)


def test_missing_camera_is_an_error_with_the_reason(node_process, unique_ns):
    proc = start(
        node_process,
        "perception_node",
        unique_ns,
        "camera:=/nonexistent.mp4",
        "retry_period_s:=0.3",
    )
    with ros_node("diag_probe") as (node, ex):
        diag = Diagnostics(node, unique_ns)
        _level, message, values = diag.wait(
            ex, "perception_node", lambda level, *_: level == "ERROR", 60, [proc]
        )
    assert "camera unavailable" in message and "/nonexistent.mp4" in message, message
    assert "retrying" in message
    assert values["lifecycle_state"] == "active" and values["camera_open"] == "false"
    assert "/nonexistent.mp4" in values["last_error"]
    assert proc.alive()


def test_failed_configure_is_an_error_with_the_reason(node_process, unique_ns):
    proc = start(node_process, "perception_node", unique_ns, "backend:=vlm")
    with ros_node("diag_probe") as (node, ex):
        diag = Diagnostics(node, unique_ns)
        _level, message, values = diag.wait(
            ex,
            "perception_node",
            # the first ERROR goes out during the transition (configuring); wait for its end
            lambda level, _m, v: level == "ERROR" and v.get("lifecycle_state") == "unconfigured",
            60,
            [proc],
        )
    assert values["lifecycle_state"] == "unconfigured", values
    assert message.startswith("unconfigured: configure failed:") and "Cosmos" in message, message
    assert values["failures.configure"] == "1" and "Cosmos" in values["last_error"]
    assert values["model"] == "(not loaded)"
    assert proc.alive()


def test_deactivated_node_reports_its_state(node_process, unique_ns):
    proc = start(node_process, "perception_node", unique_ns, "camera:=topic")
    with ros_node("diag_probe") as (node, ex):
        diag = Diagnostics(node, unique_ns)
        diag.wait(ex, "perception_node", lambda level, *_: level == "OK", 60, [proc])
        change_state(node, ex, unique_ns, "perception_node", Transition.TRANSITION_DEACTIVATE)
        level, message, values = diag.wait(
            ex, "perception_node", lambda _l, _m, v: v["lifecycle_state"] == "inactive", 10, [proc]
        )
        assert level == "WARN", (level, message)
        assert message.startswith("inactive") and values["camera_open"] == "false"
        change_state(node, ex, unique_ns, "perception_node", Transition.TRANSITION_ACTIVATE)
        level, message, values = diag.wait(
            ex, "perception_node", lambda level, *_: level == "OK", 10, [proc]
        )
        assert values["lifecycle_state"] == "active"
    assert proc.alive()


#: what a microphone driver typically offers: best effort, shallow
BEST_EFFORT_MIC = QoSProfile(depth=10, reliability=ReliabilityPolicy.BEST_EFFORT)


@pytest.mark.slow
def test_asr_hears_a_best_effort_publisher_and_counts_bad_blocks(node_process, unique_ns, tmp_path):
    speech = make_speech(tmp_path, ("Hello there, how are you?",))
    proc = start(
        node_process, "asr_node", unique_ns, "audio_source:=topic", "partial_interval_s:=0.0"
    )
    with ros_node("diag_probe") as (node, ex):
        diag = Diagnostics(node, unique_ns)
        events: list = []
        node.create_subscription(
            VoiceActivity, f"{unique_ns}/asr/voice_activity", events.append, qos.RELIABLE
        )
        node.create_subscription(Transcript, f"{unique_ns}/asr/transcript", events.append, 50)
        pub = node.create_publisher(AudioChunk, f"{unique_ns}/audio/input", BEST_EFFORT_MIC)
        level, message, values = diag.wait(
            ex, "asr_node", lambda level, *_: level == "OK", 90, [proc]
        )
        assert values["lifecycle_state"] == "active" and values["device"] == "topic audio/input"
        assert values["model"] and values["model"] != "(not loaded)" and "queue_depth" in values
        spin_until(ex, lambda: pub.get_subscription_count() > 0, 10, "a matching subscription")

        pcm = float_to_int16(speech.audio)
        t0 = time.monotonic()
        for i in range(0, len(pcm), 1600):  # paced like a microphone: best effort has no resend
            spin_until(ex, lambda i=i: time.monotonic() - t0 >= i / 16000, 5, "the next block")
            pub.publish(
                AudioChunk(sample_rate=16000, channels=1, samples=pcm[i : i + 1600].tolist())
            )

        def finals() -> list[Transcript]:
            return [e for e in events if isinstance(e, Transcript) and e.is_final]

        spin_until(ex, lambda: len(finals()) == 1, 60, f"a final transcript: {events}")
        assert wer(speech.texts[0], finals()[0].text) <= 0.2, finals()[0].text
        assert any(isinstance(e, VoiceActivity) and e.speaking for e in events)

        # a malformed block (3 samples, 2 channels) is dropped, logged and counted: never fatal
        bad = AudioChunk(sample_rate=16000, channels=2, samples=[1, 2, 3])

        def counted() -> bool:
            return "failures.bad_audio" in diag.get("asr_node")[2]

        deadline = time.monotonic() + 10
        while not counted():  # best effort: resend until one is counted
            assert time.monotonic() < deadline, f"no bad_audio count: {diag.get('asr_node')}"
            pub.publish(bad)
            end = time.monotonic() + 0.5
            spin_until(ex, lambda end=end: counted() or time.monotonic() > end, 2)
        level, message, values = diag.get("asr_node")
        assert level == "WARN" and "audio/input block dropped" in values["last_error"], values
        assert "recent failure" in message
        assert proc.alive(), proc.log()
    assert "audio/input block dropped" in proc.log()

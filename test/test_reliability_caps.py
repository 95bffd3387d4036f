"""The input caps and the failed-utterance report, over real processes and real DDS: an over-long
prompt (``llm_node`` ``max_prompt_chars``, on teleop/prompt and on the Converse action), an
oversized or lying camera image (``perception_node`` ``max_image_pixels``), and a final
transcription that fails (``asr_node`` with a language whisper does not know: every
transcription raises) showing up in ``bolt/turn_metrics`` with its outcome."""

from __future__ import annotations

import time

import cv2
import numpy as np
from rclpy.action import ActionClient
from sensor_msgs.msg import Image
from std_msgs.msg import String

from bolt_agent.core.audio.audio_io import float_to_int16
from bolt_agent.core.vision.image_conv import to_image_fields
from bolt_agent.nodes import qos
from bolt_agent_interfaces.action import Converse
from bolt_agent_interfaces.msg import AudioChunk, SceneDescription, TurnMetrics, VoiceActivity
from support.audio_fixtures import make_speech
from support.diagnostics import Diagnostics, start
from support.llm import Recorder, start_llm
from support.perception_videos import astronaut_bgr
from support.ros_helpers import ros_node, spin_until, wait_for_subscriber


def counted(kind: str, n: int):
    """A ``Diagnostics.wait`` predicate: ``failures.<kind>`` reached ``n``."""
    return lambda level, message, values: int(values.get(f"failures.{kind}", 0)) >= n


def test_llm_node_refuses_over_long_prompts_and_answers_the_next(node_process, unique_ns):
    proc = start_llm(node_process, unique_ns, max_prompt_chars="200")
    with ros_node("caps_llm", unique_ns) as (node, ex):
        rec = Recorder(node)
        diag = Diagnostics(node, unique_ns)
        client = ActionClient(node, Converse, "llm/converse")
        wait_for_subscriber(ex, rec.prompt, timeout=60)
        spin_until(ex, client.server_is_ready, 30, "the Converse server")

        rec.prompt.publish(String(data="Tell me everything. " * 50))  # 1,000 chars
        diag.wait(ex, "llm_node", counted("bad_input", 1), 20, [proc])
        assert "1000 chars over max_prompt_chars" in proc.log()

        sent = client.send_goal_async(Converse.Goal(prompt="x" * 5000, use_defaults=True))
        spin_until(ex, sent.done, 10, "goal acceptance")
        result = sent.result().get_result_async()
        spin_until(ex, result.done, 20, "the refused goal's result")
        assert "max_prompt_chars" in result.result().result.spoken_text
        level, _, values = diag.wait(ex, "llm_node", counted("bad_input", 2), 20, [proc])
        assert level == "WARN", values
        assert not rec.spoken("teleop-1")  # the refused prompt never became a turn

        rec.prompt.publish(String(data="Hello, who are you?"))
        spin_until(
            ex, lambda: rec.turn_over("teleop-2"), 60, lambda: f"the next turn\n{proc.log()}"
        )
        assert rec.spoken("teleop-2") and proc.alive()


def test_perception_node_refuses_oversized_images_and_keeps_seeing(node_process, unique_ns):
    args = ["-m", "bolt_agent.nodes.perception_node", "--ros-args", "-r", f"__ns:={unique_ns}"]
    for p in ("camera:=topic", "width:=0", "height:=0", "max_image_pixels:=100000"):
        args += ["-p", p]
    proc = node_process(*args, name="perception_node")
    with ros_node("caps_perception") as (node, ex):
        scenes: list[SceneDescription] = []
        node.create_subscription(
            SceneDescription, f"{unique_ns}/perception/scene", scenes.append, qos.RELIABLE
        )
        diag = Diagnostics(node, unique_ns)
        pub = node.create_publisher(Image, f"{unique_ns}/camera/image_raw", qos.SENSOR)
        spin_until(ex, lambda: pub.get_subscription_count() > 0, 30, proc.log)
        rgb = np.ascontiguousarray(astronaut_bgr()[:, :, ::-1])
        assert rgb.shape[0] * rgb.shape[1] > 100000
        big = Image(**to_image_fields(rgb, "rgb8"))
        # a header that claims 10^10 pixels over an empty buffer: refused before any copy
        liar = Image(width=100000, height=100000, encoding="rgb8", step=300000)
        for image in (big, liar):
            deadline = time.monotonic() + 15
            before = diag.get("perception_node")
            n = int(before[2].get("failures.bad_image", 0)) if before else 0
            while not counted("bad_image", n + 1)(*(diag.get("perception_node") or ("", "", {}))):
                assert time.monotonic() < deadline, f"not counted: {diag.get('perception_node')}"
                pub.publish(image)  # best effort: resend until one is counted
                ex.spin_once(timeout_sec=0.2)
        assert not scenes, scenes  # nothing refused was looked at
        level, _, values = diag.get("perception_node")
        assert "over max_image_pixels" in values["last_error"] and level == "WARN", values

        small = cv2.resize(rgb, (256, 256), interpolation=cv2.INTER_AREA)
        ok = Image(**to_image_fields(np.ascontiguousarray(small), "rgb8"))
        deadline = time.monotonic() + 30
        while not scenes:
            assert time.monotonic() < deadline, proc.log()
            pub.publish(ok)
            ex.spin_once(timeout_sec=0.1)
        assert proc.alive(), proc.log()


def test_a_failed_final_transcription_shows_in_turn_metrics(node_process, unique_ns, tmp_path):
    speech = make_speech(tmp_path, ("Hello there, how are you?",))
    proc = start(
        node_process,
        "asr_node",
        unique_ns,
        "audio_source:=topic",
        "partial_interval_s:=0.0",
        "language:=zz",  # whisper raises "'zz' is not a valid language code" on every job
    )
    with ros_node("caps_asr") as (node, ex):
        diag = Diagnostics(node, unique_ns)
        metrics: list[TurnMetrics] = []
        node.create_subscription(
            TurnMetrics, f"{unique_ns}/bolt/turn_metrics", metrics.append, qos.RELIABLE
        )
        activity: list[VoiceActivity] = []
        node.create_subscription(
            VoiceActivity, f"{unique_ns}/asr/voice_activity", activity.append, qos.RELIABLE
        )
        pub = node.create_publisher(AudioChunk, f"{unique_ns}/audio/input", qos.AUDIO)
        # up and active, and loud about it: the warm-up at configure failed the same way
        warned = counted("warm_up", 1)
        diag.wait(
            ex,
            "asr_node",
            lambda *s: warned(*s) and s[2].get("lifecycle_state") == "active",
            90,
            [proc],
        )
        spin_until(ex, lambda: pub.get_subscription_count() > 0, 10, "the subscription")
        pcm = float_to_int16(speech.audio)
        t0 = time.monotonic()
        for i in range(0, len(pcm), 1600):  # paced like a microphone
            spin_until(ex, lambda i=i: time.monotonic() - t0 >= i / 16000, 5, "the next block")
            pub.publish(
                AudioChunk(sample_rate=16000, channels=1, samples=pcm[i : i + 1600].tolist())
            )

        def failed() -> list[TurnMetrics]:
            return [m for m in metrics if m.source == "asr" and m.outcome.startswith("failed")]

        spin_until(
            ex, failed, 60, lambda: f"a failed turn in turn_metrics: {metrics}\n{proc.log()}"
        )
        report = failed()[0]
        assert "final transcription" in report.outcome and "zz" in report.outcome, report
        utterances = {a.utterance_id for a in activity if a.speaking}
        assert report.turn_id in utterances, (report.turn_id, utterances)
        diag.wait(ex, "asr_node", counted("transcription", 1), 10, [proc])
        assert proc.alive(), proc.log()

"""Console scripts on SIGINT/SIGTERM: an orderly shutdown while the context is valid.

With rclpy's own handlers the context went down inside the signal: the TTS node's paced output
thread died on "publisher's context is invalid", and a node stopped while an executor or Piper
thread was still in C++ aborted at exit ("terminate called without an active exception", exit
-6; seen on `ros2 launch` Ctrl-C in CI). Here a node that gets a signal at any moment after it
starts, or in the middle of a sentence, exits 0, and its last state still reaches the topic.
"""

from __future__ import annotations

import signal
import time

import pytest
from std_msgs.msg import String

from bolt_agent.nodes import qos
from bolt_agent_interfaces.msg import AudioChunk, TtsState
from support.ros_helpers import spinning_node, wait_until

LONG = (
    "This is a long sentence that takes a while to say, so that the signal lands in the "
    "middle of the work, and then some more words follow to make it longer still."
)
ABORT = "terminate called"


def assert_clean(proc, rc: int) -> None:
    log = proc.log()
    assert rc == 0, log[-3000:]
    assert ABORT not in log and "Traceback" not in log, log[-3000:]


@pytest.mark.parametrize("delay_s", [0.0, 0.02, 0.05, 0.1, 0.2, 0.4])
def test_sigint_at_any_moment_after_start_exits_cleanly(node_process, unique_ns, delay_s):
    """The window right after the executor starts spinning is where the abort was (the main
    thread's interrupted join marked the spinning thread stopped, and the process exited under
    it): every offset from the first log line on must end with status 0."""
    proc = node_process(
        "-m", "bolt_agent.nodes.animation_node", "--ros-args", "-r", f"__ns:={unique_ns}",
        "-p", "backend:=sim", name="animation",
    )  # fmt: skip
    wait_until(lambda: "animations:" in proc.log() or not proc.alive(), 60, proc.log)
    time.sleep(delay_s)
    t0 = time.monotonic()
    rc = proc.stop(timeout=15.0)
    assert time.monotonic() - t0 < 10.0, proc.log()[-2000:]
    assert_clean(proc, rc)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_sentence_stops_synthesis_and_publishes_the_last_state(
    node_process, unique_ns, sig
):
    """Stopped while it speaks: the synthesis and output threads end before rclpy goes down, so
    the final ``tts/state`` (not speaking, the words said so far) is still published."""
    proc = node_process(
        "-m", "bolt_agent.nodes.tts_node", "--ros-args", "-r", f"__ns:={unique_ns}",
        "-p", "audio_sink:=topic", name="tts",
    )  # fmt: skip
    with spinning_node("signal_probe") as node:
        states: list[TtsState] = []
        audio: list[AudioChunk] = []
        node.create_subscription(TtsState, f"{unique_ns}/tts/state", states.append, qos.LATCHED)
        node.create_subscription(AudioChunk, f"{unique_ns}/audio/output", audio.append, qos.AUDIO)
        say = node.create_publisher(String, f"{unique_ns}/teleop/say", qos.RELIABLE)
        wait_until(lambda: say.get_subscription_count() > 0, 60, proc.log)
        say.publish(String(data=LONG))
        wait_until(lambda: len(audio) > 5, 60, lambda: f"audio output: {proc.log()}")
        assert any(s.speaking for s in states), states
        proc.proc.send_signal(sig)
        rc = proc.proc.wait(timeout=20)
        wait_until(lambda: states and not states[-1].speaking, 5, lambda: str(states))
    assert_clean(proc, rc)
    assert LONG.startswith(states[-1].spoken_text), states[-1]
    assert "stopped:" in proc.log()

"""room_node: a simulated room over topics, for simulation, tests and demos of echo cancellation.

It listens to what the robot plays (``audio/output``, tts_node with ``audio_sink: topic``) and
publishes what the robot's microphone would hear on ``audio/input``, in real time, 32 ms blocks:
the robot's voice as the room returns it (``core.audio.room``: delay, attenuation, reflection
tail), a noise floor, and a user. The user speaks what arrives on ``room/say`` (``std_msgs/
String``) in ``user_voice`` (an espeak-ng voice such as ``en+f4``, or ``piper``); each
utterance is announced on ``room/user_onset`` (``std_msgs/Header``, stamped with its first
voiced sample's time, frame ``room``) so a test or a benchmark can time the robot's reaction.

The microphone runs ``capture_latency_ms`` behind the wall clock, so the robot's voice for a
block has arrived before the block is mixed (DDS delivers it in a few ms; a block that comes
later than that is counted in ``late_reference``).

    python -m bolt_agent.nodes.room_node --ros-args -p echo_gain_db:=-9.0
    ros2 topic pub --once room/say std_msgs/msg/String "{data: 'Wait, stop.'}"
"""

from __future__ import annotations

import queue
import threading

import numpy as np
import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from std_msgs.msg import Header, String

from bolt_agent.core.audio.audio_io import (
    RateResamplers,
)
from bolt_agent.core.audio.echo_canceller import SAMPLE_RATE, sample_index, sample_stamp
from bolt_agent.core.audio.room import Room, RoomSettings, RoomStream
from bolt_agent.nodes import qos
from bolt_agent.nodes.messages import audio_chunk, chunk_audio, stamp, stamp_ns
from bolt_agent_interfaces.msg import AudioChunk

BLOCK = 512  # 32 ms


class RoomNode(Node):
    def __init__(self, **kwargs) -> None:
        super().__init__("room_node", **kwargs)
        d = RoomSettings()
        p = {
            "echo_delay_ms": self.declare_parameter("echo_delay_ms", d.echo_delay_ms).value,
            "echo_gain_db": self.declare_parameter("echo_gain_db", d.echo_gain_db).value,
            "tail_ms": self.declare_parameter("tail_ms", d.tail_ms).value,
            "noise_db": self.declare_parameter("noise_db", d.noise_db).value,
            "seed": self.declare_parameter("seed", d.seed).value,
        }
        self.voice = self.declare_parameter("user_voice", "en-us").value
        self.user_gain = self.declare_parameter("user_gain", 1.0).value
        latency_ms = self.declare_parameter("capture_latency_ms", 100.0).value
        self._lag = int(latency_ms * SAMPLE_RATE / 1000)
        self.room = RoomStream(Room(RoomSettings(**p)))
        self.late_reference = 0  # robot blocks that came after their echo was mixed
        self._resamplers = RateResamplers(SAMPLE_RATE)  # the speaker: one continuous stream
        self._said: queue.Queue[str] = queue.Queue()
        self._user: list[tuple[int, np.ndarray]] = []  # (start sample, audio) to mix in
        self._lock = threading.Lock()
        self._next = -1  # the next microphone sample to publish
        self._mic = self.create_publisher(AudioChunk, "audio/input", qos.AUDIO)
        self._onset = self.create_publisher(Header, "room/user_onset", qos.RELIABLE)
        self.create_subscription(AudioChunk, "audio/output", self._on_output, qos.AUDIO)
        self.create_subscription(String, "room/say", lambda m: self._said.put(m.data), 10)
        self.create_timer(BLOCK / SAMPLE_RATE, self._tick)
        self._voice_thread = threading.Thread(target=self._speak_loop, daemon=True)
        self._voice_thread.start()

    def _now(self) -> int:
        return sample_index(self.get_clock().now().nanoseconds)

    def _on_output(self, msg: AudioChunk) -> None:
        try:
            x = self._resamplers.process(chunk_audio(msg), int(msg.sample_rate) or SAMPLE_RATE)
        except Exception as exc:  # a malformed block is not played into the room
            self.get_logger().error(f"audio/output block refused: {exc!r}")
            return
        start = sample_index(stamp_ns(msg.header.stamp))
        if self._next >= 0 and start < self._next:
            self.late_reference += 1
            self.get_logger().warning(
                f"audio/output came after its echo was mixed ({self.late_reference} blocks so "
                "far): raise capture_latency_ms",
                throttle_duration_sec=5.0,
            )
        self.room.played(x, start)

    def _speak_loop(self) -> None:
        """Synthesis off the timer's thread: espeak-ng takes ~50 ms a sentence, Piper more."""
        from bolt_agent.testing.voices import espeak, piper, trim

        while rclpy.ok():
            try:
                text = self._said.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                audio = piper(text) if self.voice == "piper" else espeak(text, self.voice)
            except Exception as exc:
                self.get_logger().error(f"room/say {text!r} not spoken: {exc!r}")
                continue
            audio = trim(audio) * float(self.user_gain)
            with self._lock:
                start = max(self._next, self._now() - self._lag) + BLOCK
                self._user.append((start, audio))
            self._onset.publish(Header(frame_id="room", stamp=stamp(sample_stamp(start))))
            self.get_logger().info(f"user says {text!r} ({len(audio) / SAMPLE_RATE:.2f} s)")

    def _tick(self) -> None:
        until = self._now() - self._lag
        if self._next < 0:
            self._next = until
        while self._next + BLOCK <= until:
            start = self._next
            user = np.zeros(BLOCK, np.float32)
            with self._lock:
                for u_start, audio in self._user:
                    lo, hi = max(start, u_start), min(start + BLOCK, u_start + len(audio))
                    if hi > lo:
                        user[lo - start : hi - start] += audio[lo - u_start : hi - u_start]
                self._user = [(s, a) for s, a in self._user if s + len(a) > start + BLOCK]
            mic = self.room.heard(start, BLOCK, user)
            self._mic.publish(audio_chunk(mic, sample_stamp(start), SAMPLE_RATE))
            self._next += BLOCK


def main(args: list[str] | None = None) -> int:
    rclpy.init(args=args)
    node = RoomNode()
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

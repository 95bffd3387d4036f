"""scripted_user: a simulated person who talks to the robot through the ASR path.

Each utterance is synthesised with Piper and published on ``audio/input`` at real-time pace,
followed by silence so the VAD closes it; then it waits until the robot's turn is over
(the LLM finished the turn and ``tts/state`` says the robot stopped speaking).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np
from rclpy.node import Node
from rclpy.time import Time

from bolt_agent.core.models import resolve_model
from bolt_agent.core.tts.tts_engine import PiperEngine
from bolt_agent.nodes.qos import AUDIO, LATCHED, RELIABLE
from bolt_agent_interfaces.msg import AudioChunk, Transcript, TtsState, TurnMetrics

CHUNK_S = 0.032


@dataclass
class UserTurn:
    text: str
    utterance_id: str = ""
    transcript: str = ""
    ok: bool = False
    error: str = ""


class ScriptedUser(Node):
    def __init__(self, **kwargs):
        super().__init__("scripted_user", **kwargs)
        self.declare_parameter("voice", "")
        self.declare_parameter("silence_after_s", 1.2)
        self.declare_parameter("turn_timeout_s", 90.0)
        self.declare_parameter("reply_pause_s", 0.8)  # a person waits this long after the robot
        # the voice's noise seed: a scenario's audio is the same in every run (-1: random)
        self.declare_parameter("seed", 7)
        self._pub = self.create_publisher(AudioChunk, "audio/input", AUDIO)
        self._lock = threading.Condition()
        self._finals: list[Transcript] = []
        self._llm_done: dict[str, float] = {}  # turn id → when the LLM finished it
        self._tts: dict[str, TtsState] = {}
        self._tts_changed: dict[str, float] = {}
        self.create_subscription(Transcript, "asr/transcript", self._on_transcript, RELIABLE)
        self.create_subscription(TurnMetrics, "bolt/turn_metrics", self._on_metrics, RELIABLE)
        self.create_subscription(TtsState, "tts/state", self._on_tts, LATCHED)
        self._voice: PiperEngine | None = None

    def load(self) -> None:
        seed = self.get_parameter("seed").value
        model = resolve_model(self.get_parameter("voice").value, kind="tts")
        self._voice = PiperEngine(model, seed=seed if seed >= 0 else None)
        self._voice.load()

    # --- callbacks (executor threads) --------------------------------------------------------
    def _on_transcript(self, msg: Transcript) -> None:
        if msg.is_final:
            with self._lock:
                self._finals.append(msg)
                self._lock.notify_all()

    def _on_metrics(self, msg: TurnMetrics) -> None:
        if msg.source == "llm":
            with self._lock:
                self._llm_done.setdefault(msg.turn_id, time.monotonic())
                self._lock.notify_all()

    def _on_tts(self, msg: TtsState) -> None:
        with self._lock:
            self._tts[msg.turn_id] = msg
            self._tts_changed[msg.turn_id] = time.monotonic()
            self._lock.notify_all()

    # --- the conversation (caller's thread) --------------------------------------------------
    def say(self, text: str, stop: threading.Event | None = None) -> UserTurn:
        """Speak one utterance and wait for the robot's answer to finish."""
        turn = UserTurn(text)
        if self._voice is None:
            self.load()
        audio = np.concatenate([c.audio for c in self._voice.synthesize(text)])
        rate = self._voice.sample_rate
        silence = np.zeros(int(rate * self.get_parameter("silence_after_s").value), np.int16)
        with self._lock:
            seen = len(self._finals)
        self._stream(np.concatenate([audio, silence]), rate, stop)
        timeout = self.get_parameter("turn_timeout_s").value
        final = self._wait(
            lambda: self._finals[seen] if len(self._finals) > seen else None, timeout, stop
        )
        if final is None:
            turn.error = "no final transcript (the ASR did not hear the utterance)"
            return turn
        turn.utterance_id, turn.transcript = final.utterance_id, final.text
        uid = final.utterance_id

        pause = self.get_parameter("reply_pause_s").value

        def answered():  # the LLM is done and the robot has been quiet for `pause` seconds
            state = self._tts.get(uid)
            if uid not in self._llm_done or (state is not None and state.speaking):
                return None
            quiet_since = max(self._llm_done[uid], self._tts_changed.get(uid, 0.0))
            return True if time.monotonic() - quiet_since >= pause else None

        if self._wait(answered, timeout, stop) is None:
            turn.error = f"the robot did not finish its answer within {timeout:.0f}s"
            return turn
        turn.ok = True
        return turn

    def _stream(self, audio: np.ndarray, rate: int, stop: threading.Event | None) -> None:
        step = int(rate * CHUNK_S)
        start = time.monotonic()
        # stamped by the sample clock (where the block is in the utterance), not when it is
        # sent: a send late under load is not audio missing (asr_node's audio_gap_ms)
        start_ns = self.get_clock().now().nanoseconds
        for i, k in enumerate(range(0, len(audio), step)):
            if stop is not None and stop.is_set():
                return
            msg = AudioChunk(sample_rate=rate, channels=1, samples=audio[k : k + step].tolist())
            msg.header.stamp = Time(nanoseconds=start_ns + k * 1_000_000_000 // rate).to_msg()
            self._pub.publish(msg)
            delay = start + (i + 1) * CHUNK_S - time.monotonic()  # real-time pace
            if delay > 0:
                (stop or threading.Event()).wait(delay)

    def _wait(self, probe, timeout: float, stop: threading.Event | None):
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                value = probe()
                if value is not None or (stop is not None and stop.is_set()):
                    return value
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._lock.wait(min(remaining, 0.2))

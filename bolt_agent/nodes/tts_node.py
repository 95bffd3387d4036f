"""TTS node: speaks `speech/say` sentences with Piper; interruptible within one audio block.

Sentences are synthesised in order by one thread and handed to the sink (a sounddevice output
stream, or `audio/output` paced in real time when `audio_sink` is `topic`), so the first sentence
plays while the next ones are synthesised. A stop (`tts/stop`, a barge-in, `teleop/say`, a new
`tts/speak` goal with `interrupt`) bumps a generation counter, drops the queues, aborts the
output and publishes in `tts/state` exactly what was played (words proportional to samples).
"""

from __future__ import annotations

import array
import itertools
import json
import queue
import threading
import uuid
from dataclasses import dataclass, field

import numpy as np
from rclpy.action import ActionServer, CancelResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from std_msgs.msg import String

from bolt_agent.core.audio_io import (
    DeviceError,
    DeviceNotFoundError,
    describe_devices,
    list_devices,
)
from bolt_agent.core.memory import release_free_memory
from bolt_agent.core.models import ModelNotFoundError, resolve_model
from bolt_agent.core.playback import PacedSink, Player
from bolt_agent.core.tts_engine import PiperEngine, split_sentences, spoken_prefix
from bolt_agent.nodes import qos, runtime
from bolt_agent_interfaces.action import Speak
from bolt_agent_interfaces.msg import AudioChunk, SpokenText, TtsState, TurnMetrics, VoiceActivity

PARAMS = {
    "model": "",  # models.yaml name or path to a Piper .onnx ('' = default tts model)
    "cpu_threads": 1,  # onnxruntime intra-op threads for Piper
    "use_cuda": False,
    "length_scale": 0.0,  # speaking rate (> 1 slower); 0 = the voice's default
    "audio_sink": "device",  # device | topic (publish audio/output, headless simulation)
    "device": "",  # output device name or index ('' = default)
    "block_ms": 20,  # audio block: bounds how long a stop takes to silence the output
    "latency_s": 0.0,  # device latency (0 = PortAudio's low latency)
    "stop_on_barge_in": True,
    "retry_s": 3.0,  # retry period while the output device is missing or busy
    "release_memory_after_turn": True,  # malloc_trim once a turn is spoken (Piper's peak)
}


@dataclass(eq=False)
class _Sentence:
    turn: _Turn
    text: str
    gen: int


@dataclass(eq=False)
class _Turn:
    turn_id: str
    spoken: list[str] = field(default_factory=list)
    outstanding: int = 0  # sentences queued, being synthesised or playing
    last_received: bool = False
    interrupted: bool = False
    first_audio: bool = False
    done: threading.Event = field(default_factory=threading.Event)


class TtsNode(LifecycleNode):
    def __init__(self, **kwargs) -> None:
        super().__init__("tts_node", **kwargs)
        runtime.declare_autostart(self)
        for name, default in PARAMS.items():
            self.declare_parameter(name, default)
        self._lock = threading.RLock()
        self._gen = 0
        self._turns: dict[str, _Turn] = {}
        self._current: _Turn | None = None
        self._playing: list[_Sentence] = []
        self._synth_q: queue.Queue[_Sentence | None] = queue.Queue()
        self._done_q: queue.Queue[_Sentence | None] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._teleop_ids = itertools.count(1)
        self._engine: PiperEngine | None = None
        self._sink: Player | PacedSink | None = None
        self._retry_timer = None
        self._active = False

    # --- lifecycle ---------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        p = {name: self.get_parameter(name).value for name in PARAMS}
        self.p = p
        if p["audio_sink"] not in ("device", "topic"):
            self.get_logger().error(
                f"audio_sink must be 'device' or 'topic', not {p['audio_sink']!r}"
            )
            return TransitionCallbackReturn.FAILURE
        try:
            model = resolve_model(p["model"], kind="tts")
            engine = PiperEngine(
                model, None, p["cpu_threads"], p["use_cuda"], p["length_scale"] or None
            )
            engine.load()
        except (ModelNotFoundError, FileNotFoundError) as exc:
            self.get_logger().error(f"TTS model missing: {exc}")
            return TransitionCallbackReturn.FAILURE
        except Exception as exc:  # onnxruntime/JSON errors: a broken voice file
            self.get_logger().error(f"TTS voice could not be loaded: {exc!r}")
            return TransitionCallbackReturn.FAILURE
        self._engine = engine
        self._state_pub = self.create_publisher(TtsState, "tts/state", qos.LATCHED)
        self._metrics_pub = self.create_publisher(TurnMetrics, "bolt/turn_metrics", qos.RELIABLE)
        self._status_pub = self.create_publisher(String, "~/status", qos.LATCHED)
        self._audio_pub = self.create_publisher(AudioChunk, "audio/output", qos.AUDIO)
        group = ReentrantCallbackGroup()
        self._subs = [
            self.create_subscription(SpokenText, "speech/say", self._on_say, qos.RELIABLE),
            self.create_subscription(String, "teleop/say", self._on_teleop, qos.RELIABLE),
            self.create_subscription(String, "tts/stop", self._on_stop, qos.RELIABLE),
            self.create_subscription(
                VoiceActivity, "asr/voice_activity", self._on_voice, qos.RELIABLE
            ),
        ]
        self._action = ActionServer(
            self,
            Speak,
            "tts/speak",
            execute_callback=self._execute_speak,
            cancel_callback=lambda _goal: CancelResponse.ACCEPT,
            callback_group=group,
        )
        self.get_logger().info(f"Piper voice {model.name} loaded ({engine.sample_rate} Hz)")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        assert self._engine is not None
        rate, block = self._engine.sample_rate, self.p["block_ms"]
        if self.p["audio_sink"] == "topic":
            self._sink = PacedSink(self._publish_audio, rate, block, on_done=self._done_q.put)
        else:
            latency = self.p["latency_s"] or "low"
            self._sink = Player(self.p["device"], rate, block, latency, on_done=self._done_q.put)
        self._active = True
        self._threads = [
            threading.Thread(target=self._synth_loop, name="tts-synth", daemon=True),
            threading.Thread(target=self._track_loop, name="tts-track", daemon=True),
        ]
        for t in self._threads:
            t.start()
        self._publish_state(None)
        if not self._open_sink(rescan=False):
            self._retry_timer = self.create_timer(self.p["retry_s"], self._retry_sink)
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.stop_speaking("")
        self._active = False
        if self._retry_timer is not None:
            self.destroy_timer(self._retry_timer)
            self._retry_timer = None
        self._synth_q.put(None)
        self._done_q.put(None)
        for t in self._threads:
            t.join(timeout=5.0)
        if self._sink is not None:
            self._sink.close()
            self._sink = None
        return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        for sub in self._subs:
            self.destroy_subscription(sub)
        self._action.destroy()
        for pub in (self._state_pub, self._metrics_pub, self._status_pub, self._audio_pub):
            self.destroy_publisher(pub)
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        if self._active:
            self.on_deactivate(state)
        return TransitionCallbackReturn.SUCCESS

    # --- device ------------------------------------------------------------------------------
    def _open_sink(self, rescan: bool) -> bool:
        assert self._sink is not None
        try:
            self._sink.open(rescan=rescan)
        except (DeviceNotFoundError, DeviceError) as exc:
            message = f"audio output unavailable: {exc}"
            if isinstance(exc, DeviceError):
                message += "; available output devices: " + describe_devices(
                    list_devices("output"), "output"
                )
            self.get_logger().error(f"{message}; retrying every {self.p['retry_s']} s")
            self._status("ERROR", message)
            return False
        device = getattr(self._sink, "device", None)
        where = f"device {device.name!r}" if device else "topic audio/output"
        self._status("OK", f"audio output open on {where}")
        self.get_logger().info(f"audio output open on {where}")
        return True

    def _retry_sink(self) -> None:
        if self._sink is not None and not self._sink.is_open and self._open_sink(rescan=True):
            self.destroy_timer(self._retry_timer)
            self._retry_timer = None

    def _publish_audio(self, block: np.ndarray) -> None:
        msg = AudioChunk()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.sample_rate = self._engine.sample_rate if self._engine else 0
        msg.channels = 1
        msg.samples = array.array("h", block.tobytes())
        self._audio_pub.publish(msg)

    # --- inputs ------------------------------------------------------------------------------
    def _on_say(self, msg: SpokenText) -> None:
        self.say(msg.turn_id or f"say-{uuid.uuid4().hex[:8]}", msg.text, msg.is_last_in_turn)

    def _on_teleop(self, msg: String) -> None:
        self.stop_speaking("")
        self.say(f"teleop-{next(self._teleop_ids)}", msg.data, True)

    def _on_stop(self, msg: String) -> None:
        self.stop_speaking(msg.data)

    def _on_voice(self, msg: VoiceActivity) -> None:
        if msg.barge_in and msg.speaking and self.p["stop_on_barge_in"]:
            self.stop_speaking("", reason="barge-in")

    def _execute_speak(self, goal_handle) -> Speak.Result:
        goal = goal_handle.request
        if goal.interrupt:
            self.stop_speaking("")
        turn = self.say(f"speak-{uuid.uuid4().hex[:8]}", goal.text, True)
        total, reported = max(1, len(split_sentences(goal.text))), -1
        while not turn.done.wait(0.05):
            if goal_handle.is_cancel_requested:
                self.stop_speaking(turn.turn_id, reason="action cancelled")
                goal_handle.canceled()
                return Speak.Result(completed=False, spoken_text=" ".join(turn.spoken))
            if len(turn.spoken) != reported:
                reported = len(turn.spoken)
                goal_handle.publish_feedback(Speak.Feedback(progress=reported / total))
        completed = not turn.interrupted and self._active
        (goal_handle.succeed if completed else goal_handle.abort)()
        return Speak.Result(completed=completed, spoken_text=" ".join(turn.spoken))

    # --- speaking ----------------------------------------------------------------------------
    def say(self, turn_id: str, text: str, is_last: bool) -> _Turn:
        """Queue the sentences of ``text`` under ``turn_id``; returns the turn."""
        with self._lock:
            turn = self._turns.get(turn_id)
            if turn is None or turn.done.is_set():
                turn = self._turns[turn_id] = _Turn(turn_id)
                while len(self._turns) > 64:
                    self._turns.pop(next(iter(self._turns)))
            turn.last_received = turn.last_received or is_last
            if not self._active:
                self.get_logger().warning(f"not active; not saying {text!r}")
                turn.interrupted = True
                turn.done.set()
                return turn
            for sentence in split_sentences(text):
                turn.outstanding += 1
                self._synth_q.put(_Sentence(turn, sentence, self._gen))
            self._maybe_finish(turn)
        return turn

    def _synth_loop(self) -> None:
        while (item := self._synth_q.get()) is not None:
            with self._lock:
                if item.gen != self._gen or self._engine is None:
                    continue
            try:
                audio = self._engine.synthesize_sentence(item.text)
            except Exception as exc:  # one unsayable sentence must not end the speech thread
                self.get_logger().error(f"synthesis failed for {item.text!r}: {exc!r}")
                audio = np.zeros(0, dtype=np.int16)
            with self._lock:
                if item.gen != self._gen:
                    continue
                turn, sink = item.turn, self._sink
                if sink is None or not sink.is_open or not len(audio):
                    if len(audio):
                        self.get_logger().warning(f"no audio output; dropped {item.text!r}")
                    turn.outstanding -= 1
                    self._maybe_finish(turn)
                    continue
                self._current = turn
                self._playing.append(item)
                sink.write(item, audio)
                if not turn.first_audio:
                    turn.first_audio = True
                    metrics = TurnMetrics(turn_id=turn.turn_id, source="tts")
                    metrics.first_audio = self.get_clock().now().to_msg()
                    self._metrics_pub.publish(metrics)
                    self._publish_state(turn)

    def _track_loop(self) -> None:
        while (item := self._done_q.get()) is not None:
            with self._lock:
                if item.gen != self._gen or item not in self._playing:
                    continue
                self._playing.remove(item)
                if self._sink is not None:
                    self._sink.forget(item)
                item.turn.spoken.append(item.text)
                item.turn.outstanding -= 1
                done = self._maybe_finish(item.turn)
                if not done:
                    self._publish_state(item.turn)
                finished = done and item.turn.last_received
            if finished and self.p["release_memory_after_turn"]:
                release_free_memory()  # after the turn: Piper's working memory goes back

    def _maybe_finish(self, turn: _Turn) -> bool:
        if turn.outstanding > 0:
            return False
        if turn.last_received:
            turn.done.set()
        self._publish_state(turn)  # speaking=False: nothing of this turn is left to play
        return True

    def stop_speaking(self, turn_id: str, reason: str = "stop request") -> bool:
        """Stop the current turn (or only ``turn_id`` if it is the current one); True if audio
        was playing or queued."""
        with self._lock:
            current = self._current
            if turn_id and (current is None or current.turn_id != turn_id):
                pending = self._turns.get(turn_id)
                if pending is None or pending.done.is_set():
                    return False
                current = pending  # not playing yet: stop it anyway (and what queues with it)
            busy = [t for t in self._turns.values() if t.outstanding > 0]
            if not busy:
                return False
            self._gen += 1
            while not self._synth_q.empty():
                self._synth_q.get_nowait()
            report = self._sink.stop() if self._sink is not None and self._sink.is_open else None
            for item in self._playing:  # in play order: whole sentences, then the cut one
                played, total = self._sink.progress(item) if self._sink else (0, 1)
                if total and played >= total:
                    item.turn.spoken.append(item.text)
                    continue
                cut = spoken_prefix(item.text, played / total if total else 0.0)
                if cut:
                    item.turn.spoken.append(cut)
                break
            for item in self._playing:
                if self._sink is not None:
                    self._sink.forget(item)
            self._playing.clear()
            for turn in busy:
                turn.outstanding, turn.interrupted, turn.last_received = 0, True, True
                turn.done.set()
            shown = current if current in busy else busy[0]
            self._publish_state(shown)
            info = {"turn_id": shown.turn_id, "reason": reason, "spoken": " ".join(shown.spoken)}
            if report is not None:
                info |= {"stop_ms": report.stop_s * 1e3, "last_audio_ms": report.last_audio_s * 1e3}
            self.get_logger().info(f"stopped: {json.dumps(info)}")
            self._status("OK", f"stopped turn {shown.turn_id} ({reason})", stop=info)
            return True

    # --- outputs -----------------------------------------------------------------------------
    def _publish_state(self, turn: _Turn | None) -> None:
        msg = TtsState()
        msg.header.stamp = self.get_clock().now().to_msg()
        if turn is not None:
            msg.speaking = turn.outstanding > 0 and not turn.interrupted
            msg.turn_id = turn.turn_id
            msg.spoken_text = " ".join(turn.spoken)
            msg.interrupted = turn.interrupted
        self._state_pub.publish(msg)

    def _status(self, level: str, message: str, **extra) -> None:
        data = {"node": self.get_name(), "level": level, "message": message, **extra}
        self._status_pub.publish(String(data=json.dumps(data)))


def main(args: list[str] | None = None) -> int:
    return runtime.main_for(TtsNode, args)


if __name__ == "__main__":
    raise SystemExit(main())

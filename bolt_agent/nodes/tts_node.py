"""TTS node: speaks `speech/say` sentences with Piper; interruptible within one audio block.

Sentences are synthesised in order by one thread and handed to the sink (a sounddevice output
stream, or `audio/output` paced in real time when `audio_sink` is `topic`), so the first sentence
plays while the next ones are synthesised. A stop (`tts/stop`, a barge-in, `teleop/say`, a new
`tts/speak` goal with `interrupt`) bumps a generation counter, drops the queues, aborts the
output and publishes in `tts/state` exactly what was played (words proportional to samples).

Output device loss: a watch timer (``device_check_s``) asks the player whether its device went
away (stream ended, callback stalled, or the ``pulse_sink`` vanished / PulseAudio moved the stream
off it). Then the node reports (status ERROR, ``failures.output_lost``, a log line), stops the
current speech (``tts/state`` interrupted with the words played until then; the rest of the
turn is dropped, not replayed), closes the stream, refuses audio meanwhile (sentences dropped
and counted as ``no_output``) and reopens on the configured device every ``retry_s`` until it is
back; speech then resumes with the next sentence.

Preemptive answers: a `SpokenText` with `held` is synthesised at once and kept until a
`SpokenText` of the same turn without `held` releases it; one with `discard` drops it unheard
(no interruption, no `tts/state` speaking: the echo gate stays open for a user who goes on).

The turn and stop bookkeeping is ``core.tts.speaker.Speaker``; this node wires it to ROS:
parameters, topics, the Speak action, the synthesis and playback-tracking threads.
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
from rclpy.action import CancelResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.lifecycle import TransitionCallbackReturn
from std_msgs.msg import String

from bolt_agent.core.audio.audio_io import (
    DeviceError,
    DeviceNotFoundError,
    describe_devices,
    list_devices,
)
from bolt_agent.core.audio.playback import PacedSink, Player
from bolt_agent.core.audio.pulse_route import PulseRoute
from bolt_agent.core.memory import release_free_memory
from bolt_agent.core.models import ModelNotFoundError, resolve_model
from bolt_agent.core.tts.ducking import Ducking, DuckingSettings
from bolt_agent.core.tts.phrase_cache import PhraseCache
from bolt_agent.core.tts.speaker import (
    Sentence,
    Speaker,
)
from bolt_agent.core.tts.tts_engine import PiperEngine, split_sentences
from bolt_agent.nodes import qos, runtime
from bolt_agent.nodes.lifecycle import BoltLifecycleNode
from bolt_agent.nodes.tts_outputs import TtsOutputs
from bolt_agent.nodes.tts_params import TtsParams
from bolt_agent_interfaces.action import Speak
from bolt_agent_interfaces.msg import SpokenText, VoiceActivity


class TtsNode(BoltLifecycleNode):
    Params = TtsParams
    params: TtsParams

    def __init__(self, **kwargs) -> None:
        super().__init__("tts_node", **kwargs)
        self._engine: PiperEngine | None = None
        self._sink: Player | PacedSink | None = None
        self._phrases = PhraseCache(self._synthesize, max_chars=0)  # sized at configure
        self._out = TtsOutputs(self)
        self._speaker = Speaker(self._phrases, emit=self._out.publish)
        self._done_q: queue.Queue[Sentence | None] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._teleop_ids = itertools.count(1)
        self._watch_timer: Any = None
        self._ducking = Ducking()  # (settings taken at activate)
        self._duck_timer: Any = None
        self._duck_lock = threading.Lock()
        self._lost_since = 0.0  # monotonic time the output was found lost (0: not lost)

    # --- lifecycle ---------------------------------------------------------------------------
    def configure(self) -> TransitionCallbackReturn:
        p = self.params
        try:
            model = resolve_model(p.model, kind="tts")
            engine = PiperEngine(model, None, p.cpu_threads, p.use_cuda, p.length_scale or None)
            engine.load()
        except (ModelNotFoundError, FileNotFoundError) as exc:
            self.record_failure("configure", f"TTS model missing: {exc}")
            return TransitionCallbackReturn.FAILURE
        except Exception as exc:  # onnxruntime/JSON errors: a broken voice file
            self.record_failure("configure", f"TTS voice could not be loaded: {exc!r}")
            return TransitionCallbackReturn.FAILURE
        self._engine = engine
        self._phrases.max_chars = p.phrase_cache_chars  # (emptied by cleanup: a new voice)
        keep = p.lead_silence_ms
        self._speaker.lead_keep = None if keep < 0 else keep * engine.sample_rate // 1000
        self._out.open(engine.sample_rate)
        self._subs = [
            self.create_subscription(SpokenText, "speech/say", self._on_say, qos.RELIABLE),
            self.create_subscription(String, "teleop/say", self._on_teleop, qos.RELIABLE),
            self.create_subscription(String, "tts/stop", self._on_stop, qos.RELIABLE),
            self.create_subscription(
                VoiceActivity, "asr/voice_activity", self._on_voice, qos.RELIABLE
            ),
        ]
        self._action = self.create_action_server(
            Speak,
            "tts/speak",
            execute_callback=self._execute_speak,
            cancel_callback=lambda _goal: CancelResponse.ACCEPT,
            callback_group=ReentrantCallbackGroup(),
        )
        self.get_logger().info(f"Piper voice {model.name} loaded ({engine.sample_rate} Hz)")
        return TransitionCallbackReturn.SUCCESS

    def activate(self) -> TransitionCallbackReturn:
        assert self._engine is not None
        p = self.params
        rate, block = self._engine.sample_rate, p.block_ms
        self._done_q = done_q = queue.Queue()
        if p.audio_sink == "topic":
            self._sink = PacedSink(
                lambda b: self._out.audio(b, self._sink.late_s),
                rate,
                block,
                on_done=done_q.put,
                on_error=self._audio_failed,
            )
        else:
            latency = p.latency_s or "low"
            route = self._pulse_route()
            self._sink = Player(p.device, rate, block, latency, done_q.put, route, p.output_stall_s)
            self._watch_timer = self.create_timer(
                p.device_check_s,
                self._watch_output,
                callback_group=MutuallyExclusiveCallbackGroup(),  # pactl: off the other callbacks
            )
        self._ducking = Ducking(DuckingSettings(p.duck_db, p.duck_max_s))
        if p.duck_db < 0:
            self._duck_timer = self.create_timer(0.25, self._duck_tick)
        self._speaker.start(self._sink)  # publishes the idle state
        self._threads = [
            threading.Thread(target=self._synth_loop, name="tts-synth", daemon=True),
            threading.Thread(
                target=self._track_loop, args=(done_q,), name="tts-track", daemon=True
            ),
        ]
        for t in self._threads:
            t.start()
        attempts = itertools.count()
        self.retry_until(lambda: self._open_sink(rescan=next(attempts) > 0), p.retry_s)
        return TransitionCallbackReturn.SUCCESS

    def deactivate(self) -> None:
        if self._watch_timer is not None:
            self.destroy_timer(self._watch_timer)
            self._watch_timer = None
        if self._duck_timer is not None:
            self.destroy_timer(self._duck_timer)
            self._duck_timer = None
        self._speaker.shutdown()  # stops what plays; the synthesis thread ends
        self._done_q.put(None)
        for t in self._threads:
            t.join(timeout=5.0)
        if self._sink is not None:
            self._sink.close()
            if isinstance(self._sink, Player) and self._sink.route is not None:
                self._sink.route.close()  # its pactl subscribe process
            self._sink = None

    def cleanup(self) -> None:
        for sub in self._subs:
            self.destroy_subscription(sub)
        self._action.destroy()
        self._out.close()
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        self._phrases.clear()

    # --- device ------------------------------------------------------------------------------
    def _pulse_route(self) -> PulseRoute | None:
        """The watched PulseAudio sink; the player opens its stream there."""
        sink = self.params.pulse_sink or os.environ.get("PULSE_SINK", "")
        return None if sink in ("", "none") else PulseRoute(sink)

    def _watch_output(self) -> None:
        """The watch timer: on a lost device, report, stop what plays, close and reopen."""
        sink = self._sink
        if not isinstance(sink, Player) or not self._active:
            return
        why = sink.lost()
        if sink.route_error:
            self.get_logger().warning(
                f"cannot watch the PulseAudio sink: {sink.route_error}", throttle_duration_sec=60.0
            )
        if why is None:
            return
        self._lost_since = time.monotonic()
        message = (
            f"audio output lost: {why}; current speech dropped, reopening every "
            f"{self.params.retry_s} s"
        )
        self.get_logger().error(message)
        self.record_failure("output_lost", message, log=False)
        # off the wrong device at once (a restart would fail or land there); from now on the
        # speaker sees it closed and drops sentences (no_output). The stop reports what was
        # played, from the player's progress, and also ends a sentence written while closing.
        sink.close()
        self._speaker.stop("", reason="audio output lost")
        self.status("ERROR", message)
        self.retry_until(lambda: self._open_sink(rescan=True), self.params.retry_s)

    def _open_sink(self, rescan: bool) -> bool:
        """Open the output; True once it is open (or gone: nothing left to retry)."""
        sink = self._sink
        if sink is None or sink.is_open:
            return True
        try:
            sink.open(rescan=rescan)
        except (DeviceNotFoundError, DeviceError) as exc:
            message = f"audio output unavailable: {exc}"
            if isinstance(exc, DeviceError):
                message += "; available output devices: " + describe_devices(
                    list_devices("output"), "output"
                )
            self.get_logger().error(f"{message}; retrying every {self.params.retry_s} s")
            self.status("ERROR", message)
            return False
        device = getattr(sink, "device", None)
        where = f"device {device.name!r}" if device else "topic audio/output"
        route = getattr(sink, "route", None)
        if route is not None:
            where += f" (PulseAudio sink {route.sink!r})"
        if self._lost_since:  # back after a loss (the speaker writes to it again)
            where += f"; back {time.monotonic() - self._lost_since:.2f} s after it was lost"
            self._lost_since = 0.0
        self.status("OK", f"audio output open on {where}")
        self.get_logger().info(f"audio output open on {where}")
        return True

    def _audio_failed(self, exc: Exception) -> None:
        """A block the output thread could not publish: dropped, counted, logged (throttled)."""
        self.record_failure("output", f"audio/output block dropped: {exc!r}", log=False)
        self.get_logger().error(f"audio/output block dropped: {exc!r}", throttle_duration_sec=5.0)

    # --- threads -----------------------------------------------------------------------------
    def _synthesize(self, text: str) -> np.ndarray:
        engine = self._engine
        if engine is None:
            raise RuntimeError("no voice loaded")
        return engine.synthesize_sentence(text)

    def _synth_loop(self) -> None:
        while self._speaker.synthesize_next(timeout=None):
            pass

    def _track_loop(self, done_q: queue.Queue[Sentence | None]) -> None:
        while (item := done_q.get()) is not None:
            if self._speaker.played(item) and self.params.release_memory_after_turn:
                self._release_memory()

    def _release_memory(self) -> None:
        """After a turn: Piper's arena growth, then the heap's free pages, go back; not while
        more speech waits (the next turn would wait for the shrink and regrow the arena). A
        failure is logged and counted, never ends the tracking thread."""
        engine = self._engine
        if self._speaker.queued()[0]:
            return
        try:
            if engine is not None:
                engine.release_memory()
        except Exception as exc:
            self.record_failure("release_memory", f"releasing Piper's memory failed: {exc!r}")
        release_free_memory()

    # --- inputs ------------------------------------------------------------------------------
    def _refused(self, source: str, text: str) -> bool:
        """Refuse (warn and count) a text over ``max_text_chars``."""
        limit = self.params.max_text_chars
        if len(text) <= limit:
            return False
        message = f"{source}: text of {len(text)} chars refused (max_text_chars {limit})"
        self.get_logger().warning(message, throttle_duration_sec=5.0)
        self.record_failure("bad_input", message, log=False)
        return True

    def _on_say(self, msg: SpokenText) -> None:
        if self._refused("speech/say", msg.text):
            return
        if msg.discard:  # a preemptive answer the user never heard: dropped without a sound
            if not msg.turn_id or not self._speaker.discard(msg.turn_id):
                self.get_logger().debug(f"discard of {msg.turn_id!r}: no such held turn")
            return
        if msg.held and not msg.turn_id:  # nothing could ever release it
            message = "speech/say: a held sentence without a turn_id refused"
            self.get_logger().warning(message, throttle_duration_sec=5.0)
            self.record_failure("bad_input", message, log=False)
            return
        turn_id = msg.turn_id or f"say-{uuid.uuid4().hex[:8]}"
        self._speaker.say(turn_id, msg.text, msg.is_last_in_turn, held=msg.held, seq=msg.seq)

    def _on_teleop(self, msg: String) -> None:
        # own prefix: llm_node names its teleop/prompt turns teleop-N, and a tts/stop for one of
        # those must not stop an operator's say
        if self._refused("teleop/say", msg.data):
            return
        turn_id = f"teleop-say-{next(self._teleop_ids)}"
        self._speaker.say(turn_id, msg.data, True, interrupt=True)
        self._duck(Ducking.restore)  # after the stop: the line it cut is not raised first

    def _on_stop(self, msg: String) -> None:
        self._speaker.stop(msg.data)
        self._duck(Ducking.restore)  # what plays next starts at full level

    def _on_voice(self, msg: VoiceActivity) -> None:
        if msg.barge_in and msg.speaking and not msg.resumed and self.params.stop_on_barge_in:
            self._speaker.stop("", reason="barge-in")
        # only a voice over the robot ducks it (the reply that follows must not start quiet)
        self._duck(
            lambda d: d.voice(msg.speaking and self._over(d), msg.barge_in, time.monotonic())
        )

    def _over(self, ducking: Ducking) -> bool:
        return ducking.ducked or any(self._speaker.queued())

    def _duck_tick(self) -> None:
        self._duck(lambda d: d.tick(time.monotonic()))

    def _duck(self, change: Callable[[Ducking], float | None]) -> None:
        """Change the duck and apply its gain under one lock (the Speak action runs beside)."""
        with self._duck_lock:
            gain = change(self._ducking)
            if gain is not None and self._sink is not None:
                self._sink.set_gain(gain)

    def _execute_speak(self, goal_handle) -> Speak.Result:
        goal = goal_handle.request
        if self._refused("tts/speak", goal.text):
            goal_handle.abort()
            return Speak.Result(completed=False, spoken_text="")
        turn_id = f"speak-{uuid.uuid4().hex[:8]}"
        turn = self._speaker.say(turn_id, goal.text, True, interrupt=goal.interrupt)
        if goal.interrupt:
            self._duck(Ducking.restore)  # after the stop, as for teleop/say
        total, reported = max(1, len(split_sentences(goal.text))), -1
        while not turn.done.wait(0.05):
            if goal_handle.is_cancel_requested:
                self._speaker.stop(turn.turn_id, reason="action cancelled")
                self._duck(Ducking.restore)  # as tts/stop: what plays next is at full level
                goal_handle.canceled()
                return Speak.Result(completed=False, spoken_text=turn.spoken_text)
            if len(turn.spoken) != reported:
                reported = len(turn.spoken)
                goal_handle.publish_feedback(Speak.Feedback(progress=reported / total))
        completed = not turn.interrupted and self._active
        (goal_handle.succeed if completed else goal_handle.abort)()
        return Speak.Result(completed=completed, spoken_text=turn.spoken_text)

    # --- diagnostics -------------------------------------------------------------------------
    def diagnostic_values(self) -> dict[str, Any]:
        p, engine, sink = self.params, self._engine, self._sink
        if p.audio_sink == "topic":
            device = "topic audio/output"
        elif sink is not None and getattr(sink, "device", None) is not None and sink.is_open:
            device = f"speaker {sink.device.name!r}"
            if getattr(sink, "route", None) is not None:
                device += f" on PulseAudio sink {sink.route.sink!r}"
        else:
            device = f"speaker {p.device or 'default'!r} (not open)"
        waiting, playing = self._speaker.queued()
        return {
            "model": engine.model_path.name if engine is not None else "(not loaded)",
            "sample_rate": engine.sample_rate if engine is not None else 0,
            "device": device,
            "queue_depth": waiting,
            "playing_sentences": playing,
            "held_discarded": self._out.discarded,
            "cut_held_dropped": self._out.cut_held_dropped,
            "output_underflows": getattr(sink, "underflows", 0),
            "output_underflows_playing": getattr(sink, "underflows_playing", 0),
            "ducks": self._ducking.ducks,
            "ducks_expired": self._ducking.expired,
            **self._phrases.stats(),
        }


def main(args: list[str] | None = None) -> int:
    return runtime.main_for(TtsNode, args)


if __name__ == "__main__":
    raise SystemExit(main())

"""llm_node: Bolt E4B (or any GGUF) through llama-cpp-python, spoken-first tool dispatch.

Subscribes ``asr/transcript`` (finals start turns; partials prefill; the early transcript of a
silence gets a hint on ``llm/end_of_turn`` and, with ``preemptive``, an answer held until the
final confirms it), ``teleop/prompt``, ``perception/scene``, ``asr/voice_activity`` (barge-in),
``tts/state``, ``teleop/mute``, ``teleop/override``. Publishes ``speech/say`` (a SpokenText per
sentence, before the step's tool goals), ``llm/thinking``, ``tts/stop``, ``bolt/turn_metrics``,
``llm/tool_events`` (ToolEvent). Serves ``llm/converse`` (Converse), ``llm/cancel`` and
``llm/reset`` (std_srvs/Trigger). A lifecycle node: configure loads the model.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from concurrent.futures import Future
from typing import Any

from rclpy.action import CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn
from std_msgs.msg import String
from std_srvs.srv import Trigger

from bolt_agent.core.llm.chat_template import Knobs
from bolt_agent.core.llm.preemption import Preemption
from bolt_agent.core.llm.profile import load_profile
from bolt_agent.core.llm.turn_runner import TurnRequest, TurnRunner
from bolt_agent.core.llm.turn_scheduler import NotActiveError, TurnScheduler
from bolt_agent.core.llm.types import EngineError
from bolt_agent.core.memory import release_free_memory
from bolt_agent.core.models import ModelNotFoundError
from bolt_agent.nodes import runtime
from bolt_agent.nodes.lifecycle import BoltLifecycleNode
from bolt_agent.nodes.llm_diagnostics import engine_values, remote_values
from bolt_agent.nodes.llm_engine import load_engine
from bolt_agent.nodes.llm_outputs import ConverseSink, LlmOutputs, TurnSink
from bolt_agent.nodes.llm_params import LlmParams
from bolt_agent.nodes.llm_requests import serve_cancel, serve_converse, serve_reset
from bolt_agent.nodes.operator_switch import OperatorSwitch
from bolt_agent.nodes.qos import LATCHED, RELIABLE
from bolt_agent.nodes.tool_dispatcher import ToolDispatcher
from bolt_agent_interfaces.action import Converse
from bolt_agent_interfaces.msg import SceneDescription, Transcript, TtsState, VoiceActivity


class LlmNode(BoltLifecycleNode):
    Params = LlmParams

    def __init__(self, **kwargs):
        super().__init__("llm_node", **kwargs)
        self._worker: threading.Thread | None = None
        self._startup_prefill: threading.Event | None = None  # set when it is over
        # teleop mute and override; kept over a cleanup, so their values outlive a reconfigure
        self.mute_switch: OperatorSwitch | None = None
        self.override_switch: OperatorSwitch | None = None
        self._scene: str | None = None
        self._teleop_ids = itertools.count(1)
        self.runner: TurnRunner | None = None
        self.scheduler: TurnScheduler | None = None
        self.engine: Any = None  # LlamaEngine, or a remote engine (core/llm/remote)
        self._entities: list[Any] = []
        self._tool_errors = 0  # tool calls that came back failed (not cancelled)
        self.preemption: Preemption | None = None  # the preemptive turn awaiting its final
        self._counts_lock = threading.Lock()
        self._spoken = ("", "")  # the latest early transcript: (utterance id, words)
        # prefills queued when the user went on after a pause (prefill_after_pause)
        self._after_pause_prefills = 0
        # barge-ins heard, and those that stopped a turn (the rest came after the turn's end)
        self.barge_ins = {"heard": 0, "cancelled": 0}

    # --- lifecycle -----------------------------------------------------------------------------
    def configure(self) -> TransitionCallbackReturn:
        p = self.params
        try:
            profile = load_profile(p.profile)
            self.engine, model_path = load_engine(p, self._on_remote_fallback, self.get_logger())
        except (ModelNotFoundError, EngineError, FileNotFoundError, ValueError) as exc:
            self.record_failure("configure", f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        constrained = p.constrained_mode(self.engine.chat_template.is_bundled)
        self.profile = profile
        config = p.runner_config(constrained, profile)
        dialogue = p.dialogue(profile, constrained)
        selector, guard = p.choosers(profile, self.engine)
        self.runner = TurnRunner(self.engine, dialogue, profile.registry, config, selector, guard)
        if hasattr(self.engine, "watch_cancel"):  # a cancel closes the remote stream at once
            self.engine.watch_cancel(lambda: self.runner.cancel_token)
        self.scheduler = TurnScheduler(
            self.runner,
            self._request,
            on_cancel=self._on_turn_cancelled,
            after_turn=self._after_turn,
            logger=self.get_logger(),
            on_failure=lambda kind, message: self.record_failure(kind, message, log=False),
            failure_reply=self.params.failure_reply,
            on_hint=self._publish_hint,
        )
        self.preemption = Preemption(self.scheduler, self.get_logger())
        self._make_entities()
        self.get_logger().info(
            f"loaded {model_path.name} in {self.engine.load_s:.1f}s (template: "
            f"{self.engine.chat_template.name}, constrained: {constrained}, profile: "
            f"{profile.name}, tools: {profile.registry.names})"
        )
        if self.engine.speculation is not None:
            self.get_logger().info(f"speculative decoding: {self.engine.speculation.summary()}")
        return TransitionCallbackReturn.SUCCESS

    def _on_remote_fallback(self, reason: str) -> None:
        self.get_logger().warning(f"LLM server failed ({reason}): turn goes on with local engine")
        self.record_failure("remote_fallback", f"LLM server failed: {reason}", log=False)

    def _make_entities(self) -> None:
        io = MutuallyExclusiveCallbackGroup()
        self.tools = ToolDispatcher(self, self.runner.registry, self.params.tool_server_wait_s)
        self._out = LlmOutputs(self, self.tools, lambda: self._muted, self._count_tool_error)
        subs = [
            (Transcript, "asr/transcript", self._on_transcript, RELIABLE),
            (String, "teleop/prompt", self._on_teleop_prompt, RELIABLE),
            (SceneDescription, "perception/scene", self._on_scene, RELIABLE),
            (VoiceActivity, "asr/voice_activity", self._on_voice_activity, RELIABLE),
            (TtsState, "tts/state", self._on_tts_state, LATCHED),
            (String, "teleop/say", lambda _m: self.cancel_current("teleop/say"), RELIABLE),
        ]
        self._entities = [
            self.create_subscription(t, n, cb, q, callback_group=io) for t, n, cb, q in subs
        ]
        # operator switches: latched publishers and plain `ros2 topic pub` alike, each sample
        # acted on once and in order (see operator_switch); mute and override outlive a reconfigure
        held = self.override_switch is not None and self.override_switch.value
        self.tools.motion_held = held
        self.mute_switch = OperatorSwitch(
            self, "teleop/mute", self._on_mute, callback_group=io, initial=self._muted
        )
        self.override_switch = OperatorSwitch(
            self, "teleop/override", self._on_override, callback_group=io, initial=held
        )
        self._entities += self.mute_switch.subscriptions + self.override_switch.subscriptions
        self._trigger_srvs = [  # llm/reset, llm/cancel: std_srvs/Trigger
            self.create_service(
                Trigger, name, lambda _q, res, f=serve: f(self, res),
                callback_group=ReentrantCallbackGroup(),
            )
            for name, serve in (("llm/reset", serve_reset), ("llm/cancel", serve_cancel))
        ]  # fmt: skip
        self._converse = self.create_action_server(
            Converse,
            "llm/converse",
            execute_callback=self._execute_converse,
            goal_callback=lambda _g: GoalResponse.ACCEPT,
            cancel_callback=lambda _g: CancelResponse.ACCEPT,
            callback_group=ReentrantCallbackGroup(),
        )

    def activate(self) -> TransitionCallbackReturn:
        self.scheduler.start()
        self._worker = threading.Thread(
            target=self.scheduler.run_forever, name="llm-turns", daemon=True
        )
        self._worker.start()
        self._startup_prefill = (  # the system prompt and tools, before the first turn
            self.scheduler.prewarm("startup", "") if self.params.prefill_on_partial else None
        )
        return TransitionCallbackReturn.SUCCESS

    def wait_ready(self, timeout: float) -> bool:
        """The start-up prefill (system prompt, tools, examples) is over: a user who speaks
        earlier waits for it, and so does whisper, which shares the cores."""
        started = self._startup_prefill
        return started is None or started.wait(timeout)

    def deactivate(self) -> None:
        self._discard_held("deactivate")
        self.scheduler.stop()
        if self._worker is not None:
            self._worker.join(timeout=10)

    def cleanup(self) -> None:
        for ent in self._entities:
            self.destroy_subscription(ent)
        self._entities = []
        self._converse.destroy()
        for srv in self._trigger_srvs:
            self.destroy_service(srv)
        self._out.destroy()
        self._close_engine("cleanup")
        self.engine = self.runner = self.scheduler = self.preemption = None

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Deactivate, then free the model here, in order, rather than leave llama.cpp's
        context to the interpreter's exit (a Ctrl-C right after a turn ended the process
        with SIGSEGV twice in one test run on a loaded machine)."""
        result = super().on_shutdown(state)
        self._close_engine("shutdown")
        return result

    def _close_engine(self, why: str) -> None:
        """Free the model unless the worker is still inside it (a prefill is not stoppable
        midway; its join timed out): freeing it under a running decode would crash."""
        engine = self.engine
        if engine is None:
            return
        if self._worker is not None and self._worker.is_alive():
            self.get_logger().warning(f"{why}: the LLM worker is busy; the model stays loaded")
            return
        self.engine = None
        engine.close()

    # --- inputs --------------------------------------------------------------------------------
    def _on_transcript(self, msg: Transcript) -> None:
        if not msg.text.strip():
            return
        if msg.is_final:
            utterance_id = msg.utterance_id or uuid.uuid4().hex[:8]
            if self.preemption is not None and self.preemption.commit(utterance_id, msg.text):
                return
            self.submit(utterance_id, msg.text)
        elif msg.speculative and msg.utterance_id and self._on_early_transcript(msg):  # early
            self._spoken = (msg.utterance_id, msg.text)
            return
        elif self.params.prefill_on_partial:
            self.scheduler.prewarm(msg.utterance_id, msg.text)

    # --- preemptive answers ----------------------------------------------------------------------
    def _on_early_transcript(self, msg: Transcript) -> bool:
        """The user went quiet: judge the words (hint) and, with ``preemptive``, answer them
        held (core/llm/preemption.py). False when neither is on (the transcript only
        prefills)."""
        p = self.params
        preempt = p.preemptive and not self._muted and len(msg.text) <= p.max_prompt_chars
        if not (preempt or p.end_of_turn_hints) or self.preemption is None:
            return False
        self.preemption.start(
            msg.utterance_id,
            msg.text,
            self.default_knobs(),
            TurnSink(self._out) if preempt else None,
            p.preemptive_hold_s,
            p.end_of_turn_hints,
            p.end_of_turn_probe_nearest,
        )
        return True

    def _discard_held(self, why: str, utterance_id: str = "") -> None:
        """Drop the preemptive turn unheard (any one, or only ``utterance_id``'s)."""
        if self.preemption is not None:
            self.preemption.discard(why, utterance_id)

    def _publish_hint(self, utterance_id: str, text: str, p_complete: float) -> None:
        self._out.hint(utterance_id, text, p_complete)
        if self.preemption is not None:
            self.preemption.count("hints")
        self.get_logger().info(
            f"end of turn [{utterance_id}] {text!r}: p_complete {p_complete:.3g}"
        )

    def _on_teleop_prompt(self, msg: String) -> None:
        if not msg.data.strip():
            self.get_logger().warning("teleop/prompt: empty text ignored")
            return
        self._discard_held("teleop/prompt")
        turn_id = f"teleop-{next(self._teleop_ids)}"
        self.get_logger().info(f"teleop/prompt: turn {turn_id} ({len(msg.data)} chars)")
        self.submit(turn_id, msg.data)

    def _on_scene(self, msg: SceneDescription) -> None:
        self._scene = msg.summary or None

    def _on_voice_activity(self, msg: VoiceActivity) -> None:
        if msg.speaking:  # (resumed: after the pause that started a preemptive answer)
            self._discard_held("the user went on talking", msg.utterance_id)
        if msg.resumed:  # the utterance in progress goes on: its start was handled already
            self._prefill_spoken(msg.utterance_id)
            return
        if msg.barge_in and self.params.barge_in_cancels:
            stopped = self.cancel_current("barge-in")
            with self._counts_lock:  # together: diagnostics never sees one count without the other
                self.barge_ins["heard"] += 1
                self.barge_ins["cancelled"] += bool(stopped)
        elif msg.speaking and self.params.prefill_on_partial:
            # the user started talking: bring the history up to their (empty) message into the
            # cache now, so the transcript only adds its own words
            self.scheduler.prewarm(msg.utterance_id, "")

    def _prefill_spoken(self, utterance_id: str) -> None:
        """The user went on after a pause: prefill the history with the few-shot exchange their
        words so far pick while they talk. The probe at the next pause carries an exchange the
        cache holds, and the turn reuses it (a motion request's exchange, ~75 tokens, was
        prefilled after the words: a first token 0.4-0.5 s after the final here)."""
        spoken_id, words = self._spoken
        p = self.params
        if not (p.prefill_after_pause and p.prefill_on_partial and spoken_id == utterance_id):
            return
        if words and self.scheduler.prewarm(utterance_id, words) is not None:
            with self._counts_lock:
                self._after_pause_prefills += 1

    def _on_tts_state(self, msg: TtsState) -> None:
        if msg.interrupted and msg.turn_id:
            self.scheduler.interrupted(msg.turn_id, msg.spoken_text)

    @property
    def _muted(self) -> bool:
        """teleop/mute as its switch holds it (already set while ``_on_mute`` runs)."""
        return self.mute_switch is not None and self.mute_switch.value

    def _on_mute(self, muted: bool) -> None:
        """Called once per change of the switch: a repeated mute must not cancel a turn asked
        for since the first."""
        self.get_logger().info(f"teleop mute {'ON: speech and tools held' if muted else 'off'}")
        if muted:
            self._discard_held("teleop mute")
            self.cancel_current("teleop mute")

    def _on_override(self, held: bool) -> None:
        self.get_logger().info(f"teleop override {'ON: motion tools held' if held else 'off'}")
        self.tools.motion_held = held

    # --- turns ---------------------------------------------------------------------------------
    def submit(
        self, turn_id: str, text: str, knobs: Knobs | None = None, sink: TurnSink | None = None
    ) -> Future:
        """Queue a turn; a new utterance cancels the one in progress (barge-in semantics). A
        turn the node cannot take (not active, too long) is refused: logged, counted, and the
        future holds the reason."""
        if self.scheduler is None or not self.scheduler.active:
            why = f"turn {turn_id} refused: llm_node is not active"
            self.get_logger().warning(why)
            self.record_failure("not_active", why, log=False)
            return _failed(NotActiveError("llm_node is not active"))
        if len(text) > self.params.max_prompt_chars:
            why = f"turn {turn_id}: {len(text)} chars over max_prompt_chars; refused"
            self.record_failure("bad_input", why)
            return _failed(ValueError(why))
        sink = sink or TurnSink(self._out)
        return self.scheduler.submit(turn_id, text, knobs or self.default_knobs(), sink)

    def default_knobs(self) -> Knobs:
        return self.params.knobs()

    def _request(self, turn_id: str, text: str, knobs: Knobs | None) -> TurnRequest:
        scene = self._scene if self.profile.use_scene else None
        knobs = knobs or self.default_knobs()
        return TurnRequest(turn_id, text, knobs, self.params.tool_choice, scene)

    def cancel_current(self, why: str) -> str:
        """Cancel the turn in progress and those queued; the id of the one stopped, or ''."""
        return self.scheduler.cancel(why) if self.scheduler is not None else ""

    def _on_turn_cancelled(self, turn_id: str, why: str) -> None:
        if self.preemption is not None and self.preemption.turn_cancelled(turn_id, why):
            return  # a preemptive turn, discarded unheard: nothing to stop
        self._out.stop_speech(turn_id)
        if self.params.cancel_tools_on_cancel:
            self.tools.cancel_turn(turn_id)

    def _after_turn(self) -> None:
        if self.params.release_memory_after_turn:
            release_free_memory()

    def _count_tool_error(self) -> None:
        with self._counts_lock:  # the worker and the dispatcher's callbacks both count
            self._tool_errors += 1

    def diagnostic_values(self) -> dict[str, Any]:
        p, engine, scheduler = self.params, self.engine, self.scheduler
        if engine is None:
            return {"model": "(not loaded)", "device": "", "queue_depth": 0}
        if hasattr(engine, "describe"):  # engine: openai (core/llm/remote)
            return {**remote_values(engine, scheduler), "tool_errors": self._tool_errors}
        with self._counts_lock:  # one snapshot of the counts the callbacks and the worker update
            held = self.preemption.counts() if self.preemption is not None else {}
            counts = {f"preemptive_{k}": v for k, v in held.items()}
            counts.update({f"barge_ins_{k}": v for k, v in self.barge_ins.items()})
            counts["prefills_after_pause"] = self._after_pause_prefills
        return {
            **engine_values(engine, p, scheduler, self.runner),
            "tool_errors": self._tool_errors,
            "startup_prefill_done": self.wait_ready(0),  # never blocks at 0
            **counts,
        }

    def _execute_converse(self, goal_handle) -> Converse.Result:
        return serve_converse(self, ConverseSink(self._out, goal_handle))


def _failed(exc: Exception) -> Future:
    done: Future = Future()
    done.set_exception(exc)
    return done


def main(args: list[str] | None = None) -> int:
    return runtime.main_for(LlmNode, args)


if __name__ == "__main__":
    raise SystemExit(main())

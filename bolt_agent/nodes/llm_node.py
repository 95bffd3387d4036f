"""llm_node: Bolt E4B (or any GGUF) through llama-cpp-python, spoken-first tool dispatch.

Subscribes ``asr/transcript`` (finals start turns; partials prefill the prompt; the speculative
transcript of a silence gets an end-of-turn hint on ``llm/end_of_turn`` and, with
``preemptive``, starts the answer held until the final confirms the same words),
``teleop/prompt``, ``perception/scene``, ``asr/voice_activity`` (barge-in), ``tts/state`` (what
was really said), ``teleop/mute``, ``teleop/override``, ``llm/cancel``. Publishes
``speech/say`` (one SpokenText per sentence, as soon as it is complete, before the step's tool
goals are sent; ``held`` / ``discard`` for a preemptive turn), ``llm/end_of_turn``,
``llm/thinking``, ``tts/stop``, ``bolt/turn_metrics``, ``llm/tool_events``
(JSON per finished tool call). Serves ``llm/converse`` (Converse). A lifecycle node: configure
loads the model.
"""

from __future__ import annotations

import itertools
import json
import threading
import uuid
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout  # not builtin before 3.11
from concurrent.futures import wait as wait_futures
from typing import Any

from rclpy.action import CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.lifecycle import LifecycleState, TransitionCallbackReturn
from std_msgs.msg import String
from std_srvs.srv import Trigger

from bolt_agent.core.llm.chat_template import Knobs
from bolt_agent.core.llm.llama.engine import LlamaEngine
from bolt_agent.core.llm.preemption import Preemption
from bolt_agent.core.llm.profile import load_profile
from bolt_agent.core.llm.turn_runner import (
    ToolResult,
    TurnRequest,
    TurnResult,
    TurnRunner,
)
from bolt_agent.core.llm.turn_scheduler import NotActiveError, TurnScheduler
from bolt_agent.core.llm.types import EngineError
from bolt_agent.core.memory import release_free_memory
from bolt_agent.core.models import ModelNotFoundError, resolve_model
from bolt_agent.nodes import runtime
from bolt_agent.nodes.base import BoltLifecycleNode
from bolt_agent.nodes.llm_params import LlmParams
from bolt_agent.nodes.metrics import TurnMetricsPublisher
from bolt_agent.nodes.operator_switch import OperatorSwitch
from bolt_agent.nodes.qos import LATCHED, RELIABLE
from bolt_agent.nodes.tool_dispatcher import ToolDispatcher
from bolt_agent_interfaces.action import Converse
from bolt_agent_interfaces.msg import (
    EndOfTurnHint,
    SceneDescription,
    SpokenText,
    Transcript,
    TtsState,
    VoiceActivity,
)

#: how long ``llm/reset`` waits for the worker to finish cancelling and forget the history
RESET_TIMEOUT_S = 10.0


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
        self.engine: LlamaEngine | None = None
        self._entities: list[Any] = []
        self._tool_errors = 0  # tool calls that came back failed (not cancelled)
        self.preemption: Preemption | None = None  # the preemptive turn awaiting its final
        self._counts_lock = threading.Lock()
        self._spoken = ("", "")  # the latest speculative transcript: (utterance id, words)
        # prefills queued when the user went on after a pause (prefill_after_pause)
        self._after_pause_prefills = 0
        # barge-ins heard, and those that stopped a turn (the rest came after the turn's end)
        self.barge_ins = {"heard": 0, "cancelled": 0}

    # --- lifecycle -----------------------------------------------------------------------------
    def configure(self) -> TransitionCallbackReturn:
        p = self.params
        try:
            profile = load_profile(p.profile)
            model_path = resolve_model(p.model, kind="llm")
            draft_path = str(resolve_model(p.draft_model, kind="drafter")) if p.draft_model else ""
            load_local = lambda: LlamaEngine(  # noqa: E731 (also the remote engine's fallback)
                p.llama_config(str(model_path), draft_path)
            ).load()
            self.engine = self._load_engine(str(model_path), load_local)
        except (ModelNotFoundError, EngineError, FileNotFoundError, ValueError) as exc:
            self.record_failure("configure", f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        constrained = p.constrained_mode(self.engine.chat_template.is_bundled)
        self.profile = profile
        config = p.runner_config(constrained, profile)
        dialogue = p.dialogue(profile, constrained)
        self.runner = TurnRunner(self.engine, dialogue, profile.registry, config)
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

    def _load_engine(self, model_path: str, load_local) -> Any:
        """The local engine, or the server (engine: openai) with its optional local fallback."""
        p = self.params
        if p.engine == "local":
            return load_local()
        from bolt_agent.core.llm.remote import RemoteConfig, api_key_from_env, build_remote_engine

        config = RemoteConfig(
            base_url=p.base_url,
            api_key=api_key_from_env(p.api_key_env),
            model=p.remote_model,
            api=p.remote_api,
            timeout_s=p.remote_timeout_s,
            grammar_field=p.remote_grammar_field,
            n_ctx=p.n_ctx,
        )
        engine = build_remote_engine(
            config,
            model_path,
            load_local if p.remote_fallback == "local" else None,
            warm=p.remote_fallback_warm,
            chat_template=p.chat_template,
            on_fallback=self._on_remote_fallback,
        )
        self.get_logger().info(f"LLM server: {engine.describe()}")
        return engine

    def _on_remote_fallback(self, reason: str) -> None:
        self.get_logger().warning(f"LLM server failed ({reason}): turn goes on with local engine")
        self.record_failure("remote_fallback", f"LLM server failed: {reason}", log=False)

    def _make_entities(self) -> None:
        io = MutuallyExclusiveCallbackGroup()
        self._say_pub = self.create_publisher(SpokenText, "speech/say", RELIABLE)
        self._think_pub = self.create_publisher(String, "llm/thinking", RELIABLE)
        self._stop_pub = self.create_publisher(String, "tts/stop", RELIABLE)
        self._tool_pub = self.create_publisher(String, "llm/tool_events", RELIABLE)
        self._hint_pub = self.create_publisher(EndOfTurnHint, "llm/end_of_turn", RELIABLE)
        self._metrics = TurnMetricsPublisher(self, "llm")
        self.tools = ToolDispatcher(self, self.runner.registry, self.params.tool_server_wait_s)
        subs = [
            (Transcript, "asr/transcript", self._on_transcript, RELIABLE),
            (String, "teleop/prompt", self._on_teleop_prompt, RELIABLE),
            (SceneDescription, "perception/scene", self._on_scene, RELIABLE),
            (VoiceActivity, "asr/voice_activity", self._on_voice_activity, RELIABLE),
            (TtsState, "tts/state", self._on_tts_state, LATCHED),
            (String, "llm/cancel", lambda _m: self.cancel_current("llm/cancel"), RELIABLE),
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
        self._reset_srv = self.create_service(
            Trigger, "llm/reset", self._on_reset, callback_group=ReentrantCallbackGroup()
        )
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
        """The start-up prefill (system prompt, tools, examples: ~1250 tokens, 3-4 s on this
        CPU) is over. A user who speaks before that waits for it, and so does whisper, which
        shares the cores: the bench's first turn took 2.3 s instead of ~0.8."""
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
        self.destroy_service(self._reset_srv)
        self.tools.destroy()
        for pub in (self._say_pub, self._think_pub, self._stop_pub, self._tool_pub, self._hint_pub):
            self.destroy_publisher(pub)
        self._metrics.destroy()
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
        elif msg.speculative and msg.utterance_id and self._speculate(msg):
            self._spoken = (msg.utterance_id, msg.text)
            return
        elif self.params.prefill_on_partial:
            self.scheduler.prewarm(msg.utterance_id, msg.text)

    # --- preemptive answers ----------------------------------------------------------------------
    def _speculate(self, msg: Transcript) -> bool:
        """The user went quiet: judge the words (hint) and, with ``preemptive``, answer them
        held (core/llm/preemption.py). False when neither is on (the transcript only
        prefills)."""
        p = self.params
        preempt = p.preemptive and not self._muted and len(msg.text) <= p.max_prompt_chars
        if not (preempt or p.end_of_turn_hints) or self.preemption is None:
            return False
        self.preemption.speculate(
            msg.utterance_id,
            msg.text,
            self.default_knobs(),
            _Sink(self) if preempt else None,
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
        msg = EndOfTurnHint(utterance_id=utterance_id, text=text, p_complete=float(p_complete))
        msg.header.stamp = self.get_clock().now().to_msg()
        self._hint_pub.publish(msg)
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
        self, turn_id: str, text: str, knobs: Knobs | None = None, sink: _Sink | None = None
    ) -> Future:
        """Queue a turn; a new utterance cancels the one in progress (barge-in semantics). A
        turn the node cannot take (not active, too long) is refused: logged, counted, and the
        future holds the reason."""
        if self.scheduler is None or not self.scheduler.active:
            why = f"turn {turn_id} refused: llm_node is not active"
            self.get_logger().warning(why)
            self.record_failure("not_active", why, log=False)
            done: Future = Future()
            done.set_exception(NotActiveError("llm_node is not active"))
            return done
        if len(text) > self.params.max_prompt_chars:
            why = f"turn {turn_id}: {len(text)} chars over max_prompt_chars; refused"
            self.record_failure("bad_input", why)
            refused: Future = Future()
            refused.set_exception(ValueError(why))
            return refused
        sink = sink or _Sink(self)
        sink.node = self
        return self.scheduler.submit(turn_id, text, knobs or self.default_knobs(), sink)

    def default_knobs(self) -> Knobs:
        return self.params.knobs()

    def _request(self, turn_id: str, text: str, knobs: Knobs | None) -> TurnRequest:
        scene = self._scene if self.profile.use_scene else None
        knobs = knobs or self.default_knobs()
        return TurnRequest(turn_id, text, knobs, self.params.tool_choice, scene)

    def _on_reset(self, _request: Trigger.Request, response: Trigger.Response) -> Any:
        """``llm/reset``: a new conversation (history forgotten, the turn in progress cancelled)."""
        if self.scheduler is None:
            response.success, response.message = False, "llm_node is not configured"
            return response
        try:
            forgotten = self.scheduler.reset("llm/reset").result(timeout=RESET_TIMEOUT_S)
        except FutureTimeout:
            response.success, response.message = False, "the LLM worker did not answer in time"
            return response
        response.success, response.message = True, f"forgot {forgotten} turn(s)"
        return response

    def cancel_current(self, why: str) -> str:
        """Cancel the turn in progress and those queued; the id of the one stopped, or ''."""
        return self.scheduler.cancel(why) if self.scheduler is not None else ""

    def _on_turn_cancelled(self, turn_id: str, why: str) -> None:
        if self.preemption is not None and self.preemption.turn_cancelled(turn_id, why):
            return  # a preemptive turn, discarded unheard: nothing to stop
        self._stop_pub.publish(String(data=turn_id))
        if self.params.cancel_tools_on_cancel:
            self.tools.cancel_turn(turn_id)

    def _after_turn(self) -> None:
        if self.params.release_memory_after_turn:
            release_free_memory()

    def tool_done(self, turn_id: str, name: str, arguments: dict, future: Future) -> None:
        """Stamp and publish a finished tool call (``llm/tool_events``, JSON)."""
        self._metrics.stamp(turn_id, "tool_done")
        outcome = (
            future.result() if not future.cancelled() else ToolResult(False, None, "cancelled")
        )
        event = {
            "turn_id": turn_id,
            "tool": name,
            "arguments": arguments,
            "ok": outcome.ok,
            "result": outcome.result,
            "error": outcome.error,
        }
        self._tool_pub.publish(String(data=json.dumps(event, default=str)))
        line = f"tool {name} {json.dumps(arguments)} -> {outcome.error or outcome.result}"
        if outcome.ok:  # two call sites: rclpy fixes one severity per call site
            self.get_logger().info(line)
        else:
            self.get_logger().warning(line)
        if not outcome.ok and not future.cancelled():
            with self._counts_lock:  # the worker and the dispatcher's callbacks both count
                self._tool_errors += 1

    def diagnostic_values(self) -> dict[str, Any]:
        p, engine, scheduler = self.params, self.engine, self.scheduler
        if engine is None:
            return {"model": "(not loaded)", "device": "", "queue_depth": 0}
        speculation = engine.speculation.summary() if engine.speculation is not None else "none"
        if hasattr(engine, "describe"):  # engine: openai (core/llm/remote)
            return {
                "model": engine.describe(),
                "device": "remote",
                "chat_template": engine.chat_template.name,
                "remote_ttft_s": f"{engine.last_ttft_s:.3f}" if engine.last_ttft_s else "",
                "remote_fallbacks": getattr(engine, "fallbacks", 0),
                "queue_depth": scheduler.pending() if scheduler is not None else 0,
                "tool_errors": self._tool_errors,
            }
        with self._counts_lock:  # one snapshot of the counts the callbacks and the worker update
            held = self.preemption.counts() if self.preemption is not None else {}
            counts = {f"preemptive_{k}": v for k, v in held.items()}
            counts.update({f"barge_ins_{k}": v for k, v in self.barge_ins.items()})
            counts["prefills_after_pause"] = self._after_pause_prefills
        guard = getattr(engine, "swa_guard", None)
        return {
            "model": engine.config.model_path,
            "device": f"GPU ({p.n_gpu_layers} layers)" if p.n_gpu_layers else "CPU",
            "chat_template": engine.chat_template.name,
            "speculative": speculation,
            "queue_depth": scheduler.pending() if scheduler is not None else 0,
            "current_turn": scheduler.current_turn if scheduler is not None else "",
            "tool_errors": self._tool_errors,
            "history_turns": len(self.runner.dialogue.turns) if self.runner is not None else 0,
            # tokens in the KV cache: the start-up prefill of system prompt + examples is done
            # once this is past them (the first answer is then fast)
            "cached_tokens": getattr(getattr(engine, "_llm", None), "n_tokens", 0),
            "startup_prefill_done": self.wait_ready(0),  # never blocks at 0
            # rollbacks past the small sliding-window cache: served by the checkpoint, or a
            # prefill of the whole prompt (seconds on a CPU; should stay 0 in a conversation)
            "swa_restored": getattr(guard, "restored", 0),
            "swa_full_prefills": getattr(guard, "refilled", 0),
            # a stable-prefix checkpoint not taken (the cache had lost the window before it)
            "swa_anchor_kept": getattr(guard, "kept_anchor", 0),
            # checkpoints cut back to a rollback before their end (the deepest, in tokens), and
            # those a rollback went further back into than they keep (CUT_BACK_TOKENS)
            "swa_cut_backs": getattr(guard, "cut_backs", 0),
            "swa_cut_back_deepest": getattr(guard, "cut_back_deepest", 0),
            "swa_checkpoints_dropped": getattr(guard, "dropped", 0),
            "swa_checkpoint_mib": guard.held_bytes() / 2**20 if guard is not None else 0.0,
            **counts,
        }

    def _execute_converse(self, goal_handle) -> Converse.Result:
        node = self
        goal = goal_handle.request
        knobs = (
            node.default_knobs()
            if goal.use_defaults
            else Knobs(
                enable_thinking=goal.enable_thinking,
                thinking_token_budget=goal.thinking_token_budget
                if goal.thinking_token_budget >= 0
                else None,
                conversational_mode=goal.conversational_mode,
            )
        )
        turn_id = "converse-" + bytes(goal_handle.goal_id.uuid).hex()[:8]
        done = node.submit(turn_id, goal.prompt, knobs, _ConverseSink(goal_handle))
        while not done.done():
            if goal_handle.is_cancel_requested and node.scheduler.current_turn == turn_id:
                node.cancel_current("converse goal cancelled")
            wait_futures([done], timeout=0.02)
        if done.exception() is not None:
            goal_handle.abort()
            return Converse.Result(spoken_text=f"error: {done.exception()}")
        result: TurnResult = done.result()
        if result.cancelled:
            goal_handle.canceled()
        else:
            goal_handle.succeed()
        return Converse.Result(
            spoken_text=result.spoken_text,
            thinking_text=result.thinking_text,
            tool_calls=result.tool_calls,
            prompt_tokens=result.prompt_tokens,
            completion_tokens=result.completion_tokens,
            thinking_tokens=result.thinking_tokens,
        )


class _Sink:
    """Publishes a turn's output; the Converse action subclasses it to stream feedback."""

    def __init__(self, node: LlmNode | None = None):
        self.node = node

    def on_first_token(self, turn_id: str) -> None:
        self.node._metrics.stamp(turn_id, "llm_first_token")

    def on_thinking(self, turn_id: str, text: str) -> None:
        self.node._think_pub.publish(String(data=text))

    def on_speech_delta(self, turn_id: str, text: str) -> None:
        pass

    def on_sentence(self, turn_id: str, seq: int, text: str) -> None:
        if self.node._muted:
            return
        if seq == 0:
            self.node._metrics.stamp(turn_id, "first_speech")
        msg = SpokenText(turn_id=turn_id, seq=seq, text=text, is_last_in_turn=False)
        msg.header.stamp = self.node.get_clock().now().to_msg()
        self.node._say_pub.publish(msg)

    def dispatch(self, turn_id: str, name: str, arguments: dict[str, Any]) -> Future[ToolResult]:
        node = self.node
        if node._muted:
            f: Future[ToolResult] = Future()
            f.set_result(ToolResult(ok=False, error="held: the operator muted the robot"))
            return f
        node._metrics.stamp(turn_id, "first_tool_goal", only_first=True)
        future = node.tools.dispatch(turn_id, name, arguments)
        future.add_done_callback(lambda f: node.tool_done(turn_id, name, arguments, f))
        return future

    # a preemptive turn (HeldTurn): held sentences, then its release or its discard
    def on_held_sentence(self, turn_id: str, seq: int, text: str) -> None:
        if self.node._muted:
            return
        if seq == 0:
            self.node._metrics.stamp(turn_id, "first_speech")
        self._say(turn_id, seq, text, held=True)

    def on_release(self, turn_id: str) -> None:
        self._say(turn_id, 0, "")

    def on_discard(self, turn_id: str) -> None:
        self.node._metrics.forget(turn_id)
        self._say(turn_id, 0, "", held=True, discard=True)

    def _say(self, turn_id: str, seq: int, text: str, held: bool = False, discard: bool = False):
        msg = SpokenText(turn_id=turn_id, seq=seq, text=text, held=held, discard=discard)
        msg.header.stamp = self.node.get_clock().now().to_msg()
        self.node._say_pub.publish(msg)

    def on_turn_end(self, turn_id: str, seq: int, result: TurnResult) -> None:
        node = self.node
        if not node._muted and not result.cancelled:
            end = SpokenText(turn_id=turn_id, seq=seq, text="", is_last_in_turn=True)
            end.header.stamp = node.get_clock().now().to_msg()
            node._say_pub.publish(end)
        node._metrics.finish_llm_turn(turn_id, result)


class _ConverseSink(_Sink):
    def __init__(self, goal_handle):
        super().__init__()
        self.goal_handle = goal_handle

    def on_speech_delta(self, turn_id: str, text: str) -> None:
        self.goal_handle.publish_feedback(Converse.Feedback(spoken_delta=text))


def main(args: list[str] | None = None) -> int:
    return runtime.main_for(LlmNode, args)


if __name__ == "__main__":
    raise SystemExit(main())

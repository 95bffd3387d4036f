"""llm_node: Bolt E4B (or any GGUF) through llama-cpp-python, spoken-first tool dispatch.

Subscribes ``asr/transcript`` (finals start turns; partials prefill the prompt),
``teleop/prompt``, ``perception/scene``, ``asr/voice_activity`` (barge-in), ``tts/state`` (what
was really said), ``teleop/mute``, ``teleop/override``, ``llm/cancel``. Publishes
``speech/say`` (one SpokenText per sentence, as soon as it is complete, before the step's tool
goals are sent), ``llm/thinking``, ``tts/stop``, ``bolt/turn_metrics``, ``llm/tool_events``
(JSON per finished tool call). Serves ``llm/converse`` (Converse). A lifecycle node: configure
loads the model.
"""

from __future__ import annotations

import itertools
import json
import queue
import threading
import time
import uuid
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from typing import Any

from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from std_msgs.msg import Bool, String

from bolt_agent.core.chat_template import Knobs
from bolt_agent.core.dialogue import Dialogue
from bolt_agent.core.llm_engine import EngineError, LlamaConfig, LlamaEngine, SamplingParams
from bolt_agent.core.memory import release_free_memory
from bolt_agent.core.models import ModelNotFoundError, resolve_model
from bolt_agent.core.profile import load_profile
from bolt_agent.core.turn_runner import (
    RunnerConfig,
    ToolResult,
    TurnRequest,
    TurnResult,
    TurnRunner,
)
from bolt_agent.nodes import runtime
from bolt_agent.nodes.metrics import TurnMetricsPublisher
from bolt_agent.nodes.qos import LATCHED, RELIABLE
from bolt_agent.nodes.tool_dispatcher import ToolDispatcher
from bolt_agent_interfaces.action import Converse
from bolt_agent_interfaces.msg import (
    SceneDescription,
    SpokenText,
    Transcript,
    TtsState,
    VoiceActivity,
)

#: name → (default, description). Declared once; config/params/llm_node.yaml mirrors it.
PARAMETERS: dict[str, tuple[Any, str]] = {
    "model": ("", "model name from config/models.yaml or a GGUF path ('' = default llm)"),
    "n_ctx": (4096, "context window (up to 65536 for Bolt E4B)"),
    "n_gpu_layers": (0, "layers offloaded to the GPU (-1 = all; Jetson)"),
    "n_threads": (2, "CPU threads for llama.cpp decoding"),
    "n_threads_batch": (0, "CPU threads for prompt prefill (0 = n_threads)"),
    "n_batch": (256, "prompt batch size"),
    "n_ubatch": (
        256,
        "physical batch: compute buffer n_vocab x n_ubatch x 4 B, SWA cache n_swa + n_ubatch cells",
    ),
    "swa_full": (False, "full-size sliding-window KV cache (n_ctx cells per SWA layer)"),
    "flash_attn": ("auto", "on | off | auto (on with GPU layers)"),
    "chat_template": ("", "Jinja chat template override ('' = GGUF's own, else bundled)"),
    "speculative": (
        "none",
        "none | dflash | ngram | draft_model (falls back with a logged reason)",
    ),
    "draft_model": ("", "DFlash drafter or draft GGUF: model name or path"),
    "spec_n_max": (7, "draft tokens per speculative step"),
    "spec_p_min": (0.0, "stop a draft below this drafter probability"),
    "profile": ("reachy_mini", "persona + tools: config/profiles/<name>.yaml"),
    "temperature": (1.0, "sampling temperature (seed default 1.0)"),
    "top_p": (0.95, "nucleus sampling (seed default 0.95)"),
    "top_k": (64, "top-k sampling (seed default 64)"),
    "min_p": (0.0, "min-p sampling (0 = off)"),
    "seed": (-1, "sampling seed (-1 = random)"),
    "enable_thinking": (True, "default for requests: reason before answering"),
    "thinking_token_budget": (-1, "default thinking budget in tokens (-1 = unset)"),
    "conversational_mode": (False, "default: inject the brevity instruction"),
    "tool_choice": ("auto", "auto | none | required | <tool name> (first step of a turn)"),
    "constrained": ("auto", "GBNF output: on | off | auto (on when the GGUF has no template)"),
    "max_steps": (3, "model steps per turn (tool results → continuation)"),
    "max_new_tokens": (192, "tokens per step"),
    "max_thinking_tokens": (512, "safety cap on thinking when no budget is set"),
    "max_speech_chars": (160, "constrained mode: characters of speech per step"),
    "max_calls_per_step": (1, "constrained mode: tool calls per step"),
    "first_clause_chars": (
        0,
        "> 0: the first sentence of a turn may end at a clause (', ; :') this long, for TTS",
    ),
    "cancel_tools_on_cancel": (True, "cancel a turn's tool goals when the turn is cancelled"),
    "barge_in_cancels": (True, "a barge-in cancels generation and speech"),
    "prefill_on_partial": (
        True,
        "prefill the prompt at start-up, speech start and partial transcripts (KV prefix reuse)",
    ),
    "tool_server_wait_s": (2.0, "how long to wait for a tool's action server"),
    "release_memory_after_turn": (
        True,
        "malloc_trim after each turn (returns freed heap pages; ~10-20 ms, after the turn)",
    ),
}


class LlmNode(LifecycleNode):
    def __init__(self, **kwargs):
        super().__init__("llm_node", **kwargs)
        for name, (default, _description) in PARAMETERS.items():
            self.declare_parameter(name, default)
        runtime.declare_autostart(self)
        self._jobs: queue.Queue = queue.Queue()
        self._worker: threading.Thread | None = None
        self._active = False
        self._muted = False
        self._scene: str | None = None
        self._current_turn = ""
        self._teleop_ids = itertools.count(1)
        self.runner: TurnRunner | None = None
        self.engine: LlamaEngine | None = None
        self._entities: list[Any] = []

    def p(self, name: str) -> Any:
        return self.get_parameter(name).value

    # --- lifecycle -----------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            profile = load_profile(self.p("profile"))
            model_path = resolve_model(self.p("model"), kind="llm")
            draft = self.p("draft_model")
            draft_path = str(resolve_model(draft, kind="drafter")) if draft else ""
            self.engine = LlamaEngine(
                LlamaConfig(
                    model_path=str(model_path),
                    n_ctx=self.p("n_ctx"),
                    n_gpu_layers=self.p("n_gpu_layers"),
                    n_threads=self.p("n_threads"),
                    n_threads_batch=self.p("n_threads_batch"),
                    n_batch=self.p("n_batch"),
                    n_ubatch=self.p("n_ubatch"),
                    swa_full=self.p("swa_full"),
                    flash_attn=self.p("flash_attn"),
                    chat_template=self.p("chat_template"),
                    speculative=self.p("speculative"),
                    draft_model=draft_path,
                    spec_n_max=self.p("spec_n_max"),
                    spec_p_min=self.p("spec_p_min"),
                )
            ).load()
        except (ModelNotFoundError, EngineError, FileNotFoundError, ValueError) as exc:
            self.get_logger().error(f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        constrained = {"on": True, "off": False}.get(
            self.p("constrained"), self.engine.chat_template.is_bundled
        )
        config = RunnerConfig(
            sampling=SamplingParams(
                temperature=self.p("temperature"),
                top_p=self.p("top_p"),
                top_k=self.p("top_k"),
                min_p=self.p("min_p"),
                seed=self.p("seed"),
            ),
            constrained=constrained,
            max_new_tokens=self.p("max_new_tokens"),
            max_steps=self.p("max_steps"),
            max_thinking_tokens=self.p("max_thinking_tokens"),
            max_speech_chars=self.p("max_speech_chars"),
            max_calls_per_step=self.p("max_calls_per_step"),
            first_clause_chars=self.p("first_clause_chars"),
        )
        self.profile = profile
        self.runner = TurnRunner(self.engine, Dialogue(profile.persona), profile.registry, config)
        self._make_entities()
        self.get_logger().info(
            f"loaded {model_path.name} in {self.engine.load_s:.1f}s (template: "
            f"{self.engine.chat_template.name}, constrained: {constrained}, profile: "
            f"{profile.name}, tools: {profile.registry.names})"
        )
        if self.engine.speculation is not None:
            self.get_logger().info(f"speculative decoding: {self.engine.speculation.summary()}")
        return TransitionCallbackReturn.SUCCESS

    def _make_entities(self) -> None:
        io = MutuallyExclusiveCallbackGroup()
        self._say_pub = self.create_publisher(SpokenText, "speech/say", RELIABLE)
        self._think_pub = self.create_publisher(String, "llm/thinking", RELIABLE)
        self._stop_pub = self.create_publisher(String, "tts/stop", RELIABLE)
        self._tool_pub = self.create_publisher(String, "llm/tool_events", RELIABLE)
        self._metrics = TurnMetricsPublisher(self, "llm")
        self.tools = ToolDispatcher(self, self.runner.registry, self.p("tool_server_wait_s"))
        subs = [
            (Transcript, "asr/transcript", self._on_transcript, RELIABLE),
            (String, "teleop/prompt", self._on_teleop_prompt, RELIABLE),
            (SceneDescription, "perception/scene", self._on_scene, RELIABLE),
            (VoiceActivity, "asr/voice_activity", self._on_voice_activity, RELIABLE),
            (TtsState, "tts/state", self._on_tts_state, LATCHED),
            # operator switches: latched publishers and plain `ros2 topic pub` (volatile) alike
            (Bool, "teleop/mute", self._on_mute, LATCHED),
            (Bool, "teleop/mute", self._on_mute, RELIABLE),
            (Bool, "teleop/override", self._on_override, LATCHED),
            (Bool, "teleop/override", self._on_override, RELIABLE),
            (String, "llm/cancel", lambda _m: self.cancel_current("llm/cancel"), RELIABLE),
            (String, "teleop/say", lambda _m: self.cancel_current("teleop/say"), RELIABLE),
        ]
        self._entities = [
            self.create_subscription(t, n, cb, q, callback_group=io) for t, n, cb, q in subs
        ]
        self._converse = ActionServer(
            self,
            Converse,
            "llm/converse",
            execute_callback=self._execute_converse,
            goal_callback=lambda _g: GoalResponse.ACCEPT,
            cancel_callback=lambda _g: CancelResponse.ACCEPT,
            callback_group=ReentrantCallbackGroup(),
        )

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._active = True
        self._worker = threading.Thread(target=self._work, name="llm-turns", daemon=True)
        self._worker.start()
        if self.p("prefill_on_partial"):  # the system prompt and tools, before the first turn
            self._jobs.put(("prewarm", "startup", ""))
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._active = False
        self.cancel_current("deactivate")
        self._jobs.put(None)
        if self._worker is not None:
            self._worker.join(timeout=10)
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        for ent in self._entities:
            self.destroy_subscription(ent)
        self._entities = []
        self._converse.destroy()
        self.tools.destroy()
        for pub in (self._say_pub, self._think_pub, self._stop_pub, self._tool_pub):
            self.destroy_publisher(pub)
        self._metrics.destroy()
        if self.engine is not None:
            self.engine.close()
        self.engine = self.runner = None
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        if self._active:
            self.on_deactivate(state)
        return TransitionCallbackReturn.SUCCESS

    # --- inputs --------------------------------------------------------------------------------
    def _on_transcript(self, msg: Transcript) -> None:
        if not msg.text.strip():
            return
        if msg.is_final:
            self.submit(msg.utterance_id or uuid.uuid4().hex[:8], msg.text)
        elif self.p("prefill_on_partial") and self._active and not self._current_turn:
            self._jobs.put(("prewarm", msg.utterance_id, msg.text))

    def _on_teleop_prompt(self, msg: String) -> None:
        if msg.data.strip():
            self.submit(f"teleop-{next(self._teleop_ids)}", msg.data)

    def _on_scene(self, msg: SceneDescription) -> None:
        self._scene = msg.summary or None

    def _on_voice_activity(self, msg: VoiceActivity) -> None:
        if msg.barge_in and self.p("barge_in_cancels"):
            self.cancel_current("barge-in")
        elif msg.speaking and self.p("prefill_on_partial") and not self._current_turn:
            # the user started talking: bring the history up to their (empty) message into the
            # cache now, so the transcript only adds its own words
            self._jobs.put(("prewarm", msg.utterance_id, ""))

    def _on_tts_state(self, msg: TtsState) -> None:
        if msg.interrupted and msg.turn_id:
            self._jobs.put(("interrupted", msg.turn_id, msg.spoken_text))

    def _on_mute(self, msg: Bool) -> None:
        self._muted = bool(msg.data)
        if self._muted:
            self.cancel_current("teleop mute")

    def _on_override(self, msg: Bool) -> None:
        self.tools.motion_held = bool(msg.data)

    # --- turns ---------------------------------------------------------------------------------
    def submit(
        self, turn_id: str, text: str, knobs: Knobs | None = None, sink: _Sink | None = None
    ) -> Future:
        """Queue a turn; a new utterance cancels the one in progress (barge-in semantics)."""
        done: Future = Future()
        if not self._active:
            done.set_exception(RuntimeError("llm_node is not active"))
            return done
        if self._current_turn:
            self.cancel_current("new utterance")
        self._jobs.put(("turn", turn_id, text, knobs or self.default_knobs(), sink, done))
        return done

    def default_knobs(self) -> Knobs:
        budget = self.p("thinking_token_budget")
        return Knobs(
            enable_thinking=self.p("enable_thinking"),
            thinking_token_budget=budget if budget >= 0 else None,
            conversational_mode=self.p("conversational_mode"),
        )

    def cancel_current(self, why: str) -> None:
        turn_id = self._current_turn
        if self.runner is None or not turn_id:
            return
        self.get_logger().info(f"cancel turn {turn_id}: {why}")
        self.runner.cancel()
        self._stop_pub.publish(String(data=turn_id))
        if self.p("cancel_tools_on_cancel"):
            self.tools.cancel_turn(turn_id)

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
        log = self.get_logger().info if outcome.ok else self.get_logger().warning
        log(f"tool {name} {json.dumps(arguments)} -> {outcome.error or outcome.result}")

    def _work(self) -> None:
        # only the sentinel ends the loop: a worker that left on `_active` alone would leave the
        # sentinel queued for the next activation's worker
        while (job := self._jobs.get()) is not None:
            if not self._active:  # deactivating: turns queued before it are refused, not run
                if job[0] == "turn" and not job[-1].done():
                    job[-1].set_exception(RuntimeError("llm_node is not active"))
                continue
            if job[0] == "interrupted":
                self.runner.dialogue.mark_interrupted(job[1], job[2])
                continue
            if job[0] == "prewarm":
                self._prewarm(job[1], job[2])
                continue
            _, turn_id, text, knobs, sink, done = job
            self._current_turn = turn_id
            sink = sink or _Sink(self)
            sink.node = self
            scene = self._scene if self.profile.use_scene else None
            request = TurnRequest(turn_id, text, knobs, self.p("tool_choice"), scene)
            try:
                result = self.runner.run(request, sink)
            except Exception as exc:  # keep the node alive; report the turn as failed
                self.get_logger().error(f"turn {turn_id} failed: {exc!r}")
                done.set_exception(exc)
            else:
                self.get_logger().info(
                    f"turn {turn_id}: {result.steps} step(s), {result.completion_tokens} tokens, "
                    f"tools {result.tool_calls}{' (cancelled)' if result.cancelled else ''}"
                    + (f", tool errors {result.errors}" if result.errors else "")
                )
                done.set_result(result)
            finally:
                self._current_turn = ""
                if self.p("release_memory_after_turn") and self._jobs.empty():
                    release_free_memory()

    def _prewarm(self, utterance_id: str, text: str) -> None:
        if not self._jobs.empty():
            return  # a newer transcript (or the final) is waiting: it prefills for itself
        scene = self._scene if self.profile.use_scene else None
        knobs, choice = self.default_knobs(), self.p("tool_choice")
        request = TurnRequest(utterance_id, text, knobs, choice, scene)
        t0 = time.monotonic()
        try:
            n = self.runner.prewarm(request)
        except Exception as exc:  # a failed warm-up costs nothing but its time
            self.get_logger().warning(f"prefill ahead of {utterance_id} failed: {exc!r}")
            return
        if n:
            dt = time.monotonic() - t0
            what = f"partial transcript of {utterance_id}" if text else f"{utterance_id} (no text)"
            self.get_logger().info(f"prefilled {n} tokens ahead of the {what} in {dt:.2f}s")

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
            if goal_handle.is_cancel_requested and node._current_turn == turn_id:
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

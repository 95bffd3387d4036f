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
import threading
import uuid
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from typing import Any

from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.lifecycle import TransitionCallbackReturn

try:  # Iron+
    from rclpy.event_handler import SubscriptionEventCallbacks
except ImportError:  # Humble
    from rclpy.qos_event import SubscriptionEventCallbacks
from std_msgs.msg import Bool, String

from bolt_agent.core.llm.chat_template import Knobs
from bolt_agent.core.llm.dialogue import Dialogue
from bolt_agent.core.llm.llama.engine import LlamaConfig, LlamaEngine
from bolt_agent.core.llm.profile import load_profile
from bolt_agent.core.llm.turn_runner import (
    RunnerConfig,
    ToolResult,
    TurnRequest,
    TurnResult,
    TurnRunner,
)
from bolt_agent.core.llm.turn_scheduler import NotActiveError, TurnScheduler
from bolt_agent.core.llm.types import EngineError, SamplingParams
from bolt_agent.core.memory import release_free_memory
from bolt_agent.core.models import ModelNotFoundError, resolve_model
from bolt_agent.nodes import runtime
from bolt_agent.nodes.base import BoltLifecycleNode, param
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


@dataclass(frozen=True)
class LlmParams:
    """llm_node parameters; config/params/llm_node.yaml mirrors the defaults."""

    model: str = param(
        "", "model name from config/models.yaml or a GGUF path ('' = default llm)", load_time=True
    )
    n_ctx: int = param(4096, "context window (up to 65536 for Bolt E4B)", load_time=True, low=128)
    n_gpu_layers: int = param(
        0, "layers offloaded to the GPU (-1 = all; Jetson)", load_time=True, low=-1
    )
    n_threads: int = param(2, "CPU threads for llama.cpp decoding", load_time=True, low=1)
    n_threads_batch: int = param(
        0, "CPU threads for prompt prefill (0 = n_threads)", load_time=True, low=0
    )
    n_batch: int = param(256, "prompt batch size", load_time=True, low=1)
    n_ubatch: int = param(
        256,
        "physical batch: compute buffer n_vocab x n_ubatch x 4 B, SWA cache n_swa + n_ubatch cells",
        load_time=True,
        low=1,
    )
    swa_full: bool = param(
        False, "full-size sliding-window KV cache (n_ctx cells per SWA layer)", load_time=True
    )
    flash_attn: str = param(
        "auto",
        "on | off | auto (on with GPU layers)",
        load_time=True,
        choices=("on", "off", "auto"),
    )
    chat_template: str = param(
        "", "Jinja chat template override ('' = GGUF's own, else bundled)", load_time=True
    )
    speculative: str = param(
        "none",
        "none | dflash | ngram | draft_model (falls back with a logged reason)",
        load_time=True,
        choices=("none", "dflash", "ngram", "draft_model"),
    )
    draft_model: str = param("", "DFlash drafter or draft GGUF: model name or path", load_time=True)
    spec_n_max: int = param(7, "draft tokens per speculative step", load_time=True, low=1, high=64)
    spec_p_min: float = param(
        0.0, "stop a draft below this drafter probability", load_time=True, low=0.0, high=1.0
    )
    profile: str = param(
        "reachy_mini", "persona + tools: config/profiles/<name>.yaml", load_time=True
    )
    temperature: float = param(
        1.0, "sampling temperature (seed default 1.0)", load_time=True, low=0.0
    )
    top_p: float = param(
        0.95, "nucleus sampling (seed default 0.95)", load_time=True, low=0.0, high=1.0
    )
    top_k: int = param(64, "top-k sampling (seed default 64)", load_time=True, low=0)
    min_p: float = param(0.0, "min-p sampling (0 = off)", load_time=True, low=0.0, high=1.0)
    seed: int = param(-1, "sampling seed (-1 = random)", load_time=True)
    enable_thinking: bool = param(True, "default for requests: reason before answering")
    thinking_token_budget: int = param(-1, "default thinking budget in tokens (-1 = unset)", low=-1)
    conversational_mode: bool = param(False, "default: inject the brevity instruction")
    tool_choice: str = param("auto", "auto | none | required | <tool name> (first step of a turn)")
    constrained: str = param(
        "auto",
        "GBNF output: on | off | auto (on when the GGUF has no template)",
        load_time=True,
        choices=("on", "off", "auto"),
    )
    max_steps: int = param(
        3, "model steps per turn (tool results → continuation)", load_time=True, low=1
    )
    max_new_tokens: int = param(192, "tokens per step", load_time=True, low=1)
    max_thinking_tokens: int = param(
        512, "safety cap on thinking when no budget is set", load_time=True, low=0
    )
    max_speech_chars: int = param(
        160, "constrained mode: characters of speech per step", load_time=True, low=1
    )
    max_calls_per_step: int = param(
        1, "constrained mode: tool calls per step", load_time=True, low=0
    )
    first_clause_chars: int = param(
        0,
        "> 0: the first sentence of a turn may end at a clause (', ; :') this long, for TTS",
        load_time=True,
        low=0,
    )
    cancel_tools_on_cancel: bool = param(
        True, "cancel a turn's tool goals when the turn is cancelled"
    )
    barge_in_cancels: bool = param(True, "a barge-in cancels generation and speech")
    prefill_on_partial: bool = param(
        True,
        "prefill the prompt at start-up, speech start and partial transcripts (KV prefix reuse)",
    )
    tool_server_wait_s: float = param(
        2.0, "how long to wait for a tool's action server", load_time=True, low=0.0
    )
    release_memory_after_turn: bool = param(
        True, "malloc_trim after each turn (returns freed heap pages; ~10-20 ms, after the turn)"
    )


class LlmNode(BoltLifecycleNode):
    Params = LlmParams

    def __init__(self, **kwargs):
        super().__init__("llm_node", **kwargs)
        self._worker: threading.Thread | None = None
        self._muted = False
        self._scene: str | None = None
        self._teleop_ids = itertools.count(1)
        self.runner: TurnRunner | None = None
        self.scheduler: TurnScheduler | None = None
        self.engine: LlamaEngine | None = None
        self._entities: list[Any] = []
        self._tool_errors = 0  # tool calls that came back failed (not cancelled)

    # --- lifecycle -----------------------------------------------------------------------------
    def configure(self) -> TransitionCallbackReturn:
        p = self.params
        try:
            profile = load_profile(p.profile)
            model_path = resolve_model(p.model, kind="llm")
            draft_path = str(resolve_model(p.draft_model, kind="drafter")) if p.draft_model else ""
            self.engine = LlamaEngine(
                LlamaConfig(
                    model_path=str(model_path),
                    n_ctx=p.n_ctx,
                    n_gpu_layers=p.n_gpu_layers,
                    n_threads=p.n_threads,
                    n_threads_batch=p.n_threads_batch,
                    n_batch=p.n_batch,
                    n_ubatch=p.n_ubatch,
                    swa_full=p.swa_full,
                    flash_attn=p.flash_attn,
                    chat_template=p.chat_template,
                    speculative=p.speculative,
                    draft_model=draft_path,
                    spec_n_max=p.spec_n_max,
                    spec_p_min=p.spec_p_min,
                )
            ).load()
        except (ModelNotFoundError, EngineError, FileNotFoundError, ValueError) as exc:
            self.record_failure("configure", f"configure failed: {exc}")
            return TransitionCallbackReturn.FAILURE
        constrained = {"on": True, "off": False}.get(
            p.constrained, self.engine.chat_template.is_bundled
        )
        config = RunnerConfig(
            sampling=SamplingParams(
                temperature=p.temperature, top_p=p.top_p, top_k=p.top_k, min_p=p.min_p, seed=p.seed
            ),
            constrained=constrained,
            max_new_tokens=p.max_new_tokens,
            max_steps=p.max_steps,
            max_thinking_tokens=p.max_thinking_tokens,
            max_speech_chars=p.max_speech_chars,
            max_calls_per_step=p.max_calls_per_step,
            first_clause_chars=p.first_clause_chars,
        )
        self.profile = profile
        self.runner = TurnRunner(self.engine, Dialogue(profile.persona), profile.registry, config)
        self.scheduler = TurnScheduler(
            self.runner,
            self._request,
            on_cancel=self._on_turn_cancelled,
            after_turn=self._after_turn,
            logger=self.get_logger(),
            on_failure=lambda kind, message: self.record_failure(kind, message, log=False),
        )
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
        # operator switches: latched publishers and plain `ros2 topic pub` (volatile) alike. A
        # volatile publisher cannot match the latched subscription: keep that expected mismatch
        # out of the log (the volatile subscription matches and receives)
        quiet = SubscriptionEventCallbacks(incompatible_qos=lambda _e: None)
        for topic, cb in (("teleop/mute", self._on_mute), ("teleop/override", self._on_override)):
            for profile in (LATCHED, RELIABLE):
                self._entities.append(
                    self.create_subscription(
                        Bool, topic, cb, profile, callback_group=io, event_callbacks=quiet
                    )
                )
        self._converse = ActionServer(
            self,
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
        if self.params.prefill_on_partial:  # the system prompt and tools, before the first turn
            self.scheduler.prewarm("startup", "")
        return TransitionCallbackReturn.SUCCESS

    def deactivate(self) -> None:
        self.scheduler.stop()
        if self._worker is not None:
            self._worker.join(timeout=10)

    def cleanup(self) -> None:
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
        self.engine = self.runner = self.scheduler = None

    # --- inputs --------------------------------------------------------------------------------
    def _on_transcript(self, msg: Transcript) -> None:
        if not msg.text.strip():
            return
        if msg.is_final:
            self.submit(msg.utterance_id or uuid.uuid4().hex[:8], msg.text)
        elif self.params.prefill_on_partial:
            self.scheduler.prewarm(msg.utterance_id, msg.text)

    def _on_teleop_prompt(self, msg: String) -> None:
        if msg.data.strip():
            self.submit(f"teleop-{next(self._teleop_ids)}", msg.data)

    def _on_scene(self, msg: SceneDescription) -> None:
        self._scene = msg.summary or None

    def _on_voice_activity(self, msg: VoiceActivity) -> None:
        if msg.barge_in and self.params.barge_in_cancels:
            self.cancel_current("barge-in")
        elif msg.speaking and self.params.prefill_on_partial:
            # the user started talking: bring the history up to their (empty) message into the
            # cache now, so the transcript only adds its own words
            self.scheduler.prewarm(msg.utterance_id, "")

    def _on_tts_state(self, msg: TtsState) -> None:
        if msg.interrupted and msg.turn_id:
            self.scheduler.interrupted(msg.turn_id, msg.spoken_text)

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
        if self.scheduler is None:
            done: Future = Future()
            done.set_exception(NotActiveError("llm_node is not active"))
            return done
        sink = sink or _Sink(self)
        sink.node = self
        return self.scheduler.submit(turn_id, text, knobs or self.default_knobs(), sink)

    def default_knobs(self) -> Knobs:
        p = self.params
        return Knobs(
            enable_thinking=p.enable_thinking,
            thinking_token_budget=p.thinking_token_budget if p.thinking_token_budget >= 0 else None,
            conversational_mode=p.conversational_mode,
        )

    def _request(self, turn_id: str, text: str, knobs: Knobs | None) -> TurnRequest:
        scene = self._scene if self.profile.use_scene else None
        knobs = knobs or self.default_knobs()
        return TurnRequest(turn_id, text, knobs, self.params.tool_choice, scene)

    def cancel_current(self, why: str) -> None:
        if self.scheduler is not None:
            self.scheduler.cancel(why)

    def _on_turn_cancelled(self, turn_id: str, why: str) -> None:
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
            self._tool_errors += 1

    def diagnostic_values(self) -> dict[str, Any]:
        p, engine, scheduler = self.params, self.engine, self.scheduler
        if engine is None:
            return {"model": "(not loaded)", "device": "", "queue_depth": 0}
        speculation = engine.speculation.summary() if engine.speculation is not None else "none"
        return {
            "model": engine.config.model_path,
            "device": f"GPU ({p.n_gpu_layers} layers)" if p.n_gpu_layers else "CPU",
            "chat_template": engine.chat_template.name,
            "speculative": speculation,
            "queue_depth": scheduler.pending() if scheduler is not None else 0,
            "current_turn": scheduler.current_turn if scheduler is not None else "",
            "tool_errors": self._tool_errors,
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

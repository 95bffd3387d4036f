"""One conversational turn: render → generate → parse → speak first → dispatch tools → continue.

The runner is synchronous and rclpy-free. A ``TurnSink`` (the ROS node, or a test) receives
sentences as soon as they are complete and tool calls as soon as they are parsed; because the
output format puts speech before calls, every sentence of a step reaches the sink before that
step's calls are dispatched. Results are awaited at the end of the step and fed back, and the model
continues the same turn (bounded by ``max_steps``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from typing import Any, Protocol

from bolt_agent.core.cancellation import CancelToken
from bolt_agent.core.llm.chat_template import Knobs
from bolt_agent.core.llm.dialogue import Dialogue, Step
from bolt_agent.core.llm.markers import THINK_OPEN
from bolt_agent.core.llm.output_parser import (
    EndOfTurn,
    OutputParser,
    Sentence,
    SpeechDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallError,
)
from bolt_agent.core.llm.reply_guard import ReplyGuard
from bolt_agent.core.llm.speakable import clean_sentence
from bolt_agent.core.llm.tool_grammar import build_grammar
from bolt_agent.core.llm.tool_selection import Option, Selection, ToolSelector, pinned_registry
from bolt_agent.core.llm.types import SamplingParams, SessionStats, TextEngine
from bolt_agent.core.tools.registry import ToolRegistry
from bolt_agent.core.tools.request_values import narrowed_to

log = logging.getLogger("bolt_agent.llm")
_TRAILING_PUNCT = " \t.,;:!?…"
_MARK = "\x00"  # a user message no transcript holds: where the template's tail begins


def _content_start(render, prompt: str, content: str) -> int:
    """Where the last (user) message's ``content`` starts in ``prompt`` (-1: not found). It is
    searched before the template's tail (the generation prompt after a user message), which
    may hold the same characters: a user who said "model" or "turn" matched inside
    ``<|turn>model`` and the probe measured the template, not the words."""
    try:
        probe = render([{"role": "user", "content": _MARK}])
    except Exception:  # a template that wants more than one message: no bound, as before
        probe = ""
    mark = probe.rfind(_MARK)
    tail = probe[mark + len(_MARK) :] if mark >= 0 else ""
    if not prompt.endswith(tail):  # another tail after the full conversation: no bound
        tail = ""
    return prompt.rfind(content, 0, len(prompt) - len(tail))


@dataclass(frozen=True)
class ToolResult:
    ok: bool
    result: Any = None
    error: str = ""

    def response(self) -> dict[str, Any]:
        if self.ok:
            return self.result if isinstance(self.result, dict) else {"result": self.result}
        return {"error": self.error}


@dataclass(frozen=True)
class TurnRequest:
    turn_id: str
    user_text: str
    knobs: Knobs = Knobs()
    tool_choice: str = "auto"
    scene: str | None = None


@dataclass
class TurnResult:
    turn_id: str
    spoken_text: str = ""
    thinking_text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {"name", "arguments"}
    steps: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    thinking_tokens: int = 0
    cancelled: bool = False
    errors: list[str] = field(default_factory=list)
    stats: list[SessionStats] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # markup fragments kept from the TTS
    failure: str = ""  # why the turn failed (the scheduler's clear end state); '' = it did not
    fillers: int = 0  # goals that needed the profile's filler sentence before them
    selection: str = ""  # the tool selection's choice (its label; '' = not selected by scoring)
    selection_s: float = 0.0  # time spent scoring the options (0 when cached)
    rejected: list[str] = field(default_factory=list)  # sentences the reply guard kept back
    resampled: int = 0  # steps sampled again because their first sentence was kept back


class TurnSink(Protocol):
    """Where a turn's output goes. Called from the runner's thread."""

    def on_first_token(self, turn_id: str) -> None: ...
    def on_thinking(self, turn_id: str, text: str) -> None: ...
    def on_speech_delta(self, turn_id: str, text: str) -> None: ...
    def on_sentence(self, turn_id: str, seq: int, text: str) -> None: ...
    def dispatch(
        self, turn_id: str, name: str, arguments: dict[str, Any]
    ) -> Future[ToolResult]: ...
    def on_turn_end(self, turn_id: str, seq: int, result: TurnResult) -> None: ...


@dataclass(frozen=True)
class RunnerConfig:
    sampling: SamplingParams = SamplingParams()
    constrained: bool = False  # GBNF: speech, then allowlisted calls (for untrained models)
    max_new_tokens: int = 192  # answer tokens per step (thinking is capped separately)
    max_steps: int = 3
    max_thinking_tokens: int = 512  # safety cap when no budget is given
    max_speech_chars: int = 160  # constrained mode: speech length per step
    max_calls_per_step: int = 1  # constrained mode
    reserve_tokens: int = 0  # kept free for generation (default: max_new_tokens)
    first_clause_chars: int = 0  # > 0: the turn's first sentence may end at a clause (", ; :")
    #: constrained calls: json | gemma4 | auto (gemma4 with the bundled template: the form the
    #: history and few-shot examples are rendered in)
    call_format: str = "auto"
    #: said before a goal whose step has no sentence of its own (spoken-first for every model)
    filler_sentence: str = "Sure."
    #: a step whose first sentence the reply guard keeps back is sampled again this many times
    #: (then the sentence is left out)
    resample_tries: int = 3
    #: the sampling of a new try (a greedy model would say the same sentence again), its
    #: temperature raised by half of it for each further try
    resample_sampling: SamplingParams = SamplingParams(temperature=0.8, top_p=0.95, top_k=40)
    #: sentences of the last this many turns may not be said again
    guard_turns: int = 12


#: the selection's "some tool" when it does not pin the call (``SelectionSpec.pin`` false)
_ANY_TOOL = Option("*")


class _Resample(Exception):
    """The step's first sentence was kept back: sample the step again."""

    def __init__(self, reason: str, sentence: str):
        super().__init__(reason)
        self.reason, self.sentence = reason, sentence


@dataclass
class StepState:
    """One decode step of a turn, as its helpers share it: the turn and where its output goes,
    the next sentence number (sentences are numbered across the turn's steps), and what the
    step produced."""

    turn_id: str
    sink: TurnSink
    result: TurnResult
    seq: int  # the number of the next sentence in the turn
    step: Step = field(default_factory=Step)  # the step's history entry
    #: the step's calls, in order, each with its goal's future (None: refused, not sent)
    calls: list[tuple[ToolCall | ToolCallError, Future[ToolResult] | None]] = field(
        default_factory=list
    )
    said: list[str] = field(default_factory=list)  # what really went to the speaker
    user_text: str = ""  # the request (the reply guard compares with it)
    may_resample: bool = False  # a kept-back first sentence restarts the step (else: left out)
    repeated: str = ""  # the last sentence kept back for repeating a line (not for copying)

    def say(self, text: str) -> None:
        self.sink.on_sentence(self.turn_id, self.seq, text)
        self.said.append(text)
        self.seq += 1

    def call(
        self,
        ev: ToolCall | ToolCallError,
        future: Future[ToolResult] | None,
        name: str,
        arguments: dict[str, Any],
    ) -> None:
        self.calls.append((ev, future))
        self.step.tool_calls.append({"name": name, "arguments": arguments})


class TurnRunner:
    """Runs turns against one engine and one dialogue; one turn at a time."""

    def __init__(
        self,
        engine: TextEngine,
        dialogue: Dialogue,
        registry: ToolRegistry,
        config: RunnerConfig = RunnerConfig(),
        selector: ToolSelector | None = None,
        guard: ReplyGuard | None = None,
    ):
        self.engine = engine
        self.dialogue = dialogue
        self.registry = registry
        self.config = config
        self.selector = selector  # None: the grammar's greedy decoding chooses the call
        self.guard = guard  # None: every sentence the model says is spoken
        self.cancel_token = CancelToken()
        self._lock = threading.Lock()

    def cancel(self) -> None:
        """Stop the running turn within one decode step (thread-safe)."""
        self.cancel_token.cancel()

    def prewarm(self, request: TurnRequest) -> int:
        """Prefill the prompt the first step of ``request`` would start from (a tentative
        transcript while the user is still finishing), so that the real turn only decodes what
        changed: the engine reuses the longest common prefix. Nothing is generated and the
        dialogue is not changed. Returns the tokens newly prefilled (0 when it would not fit,
        the engine keeps no cache, or a turn is running)."""
        if not self._lock.acquire(blocking=False):
            return 0
        try:
            render = self._renderer(request.knobs)
            limit = self._prompt_limit()
            teaches = _teaches(request)
            prompt = render(self.dialogue.preview(request.user_text, request.scene, teaches))
            if self.engine.count_tokens(prompt) > limit:
                return 0  # the real turn drops history first: a different prompt
            if teaches:
                self._mark_stable(render, self.dialogue.stable_messages(preview=True), prompt)
            return self.engine.prefill(prompt)
        finally:
            self._lock.release()

    def end_of_turn_probability(
        self, request: TurnRequest, with_nearest: bool = False
    ) -> float | None:
        """How likely the user's turn is complete with ``request.user_text``: the model's
        probability that a sentence, or the user's message, ends right after these words.

        Whisper punctuates whatever it hears as finished ("I would like to buy."), so its
        trailing punctuation is taken off and the model itself says whether the words can end
        here: P(next token is ``.``, ``?``, ``!``, a newline, or the template's closer of a user
        message). Measured on our own Piper + whisper transcripts
        (``benchmarks/end_of_turn_calibration.py``, docs/speech.md): AUC 0.8-0.96 this way,
        0.49-0.62 with whisper's punctuation left on.

        The prompt is the history and the user's words, without the nearest few-shot exchanges
        a turn puts before them (``with_nearest`` adds them): those depend on the words, so
        they would cost a prefill of ~75 tokens on every silence, while the history is in the
        cache already (prefilled when the user started speaking), so this costs about one
        forward pass over the words. When the cache already holds the exchange these words
        pick (a prefill of earlier words of the same utterance brought it in: ``prewarm``), the
        probe carries it at no extra cost, and the turn after it reuses all of it. None when it
        cannot be told (the engine gives no probabilities, the prompt would not fit, a turn is
        running)."""
        words = request.user_text.strip().rstrip(_TRAILING_PUNCT)
        if not words:
            return None
        if not self._lock.acquire(blocking=False):
            return None
        try:
            render = self._renderer(request.knobs)
            messages, prompt, nearest = self._probe_prompt(request, words, render, with_nearest)
            content = messages[-1]["content"]
            cut = _content_start(render, prompt, content)
            if cut < 0 or self.engine.count_tokens(prompt) > self._prompt_limit():
                return None
            cut += len(content)
            if nearest:
                stable = self.dialogue.stable_messages(preview=True)
                self._mark_stable(render, stable, prompt[:cut])
            ends = [".", "?", "!", "\n", prompt[cut:]]
            return self.engine.next_token_probability(prompt[:cut], ends)
        finally:
            self._lock.release()

    def _probe_prompt(
        self, request: TurnRequest, words: str, render, with_nearest: bool
    ) -> tuple[list[dict[str, Any]], str, bool]:
        """The probe's messages, their prompt, and whether they carry the nearest exchange:
        with ``with_nearest``, or when the cache already holds the history and the exchange
        ``words`` pick up to the user's message (2 tokens of slack for a merge at its start).
        Each preview and render is done once."""
        scene = request.scene
        if not _teaches(request):
            plain = self.dialogue.preview(words, scene, False)
            return plain, render(plain), False
        taught = self.dialogue.preview(words, scene, True)
        if with_nearest:
            return taught, render(taught), True
        plain = self.dialogue.preview(words, scene, False)
        if len(taught) > len(plain):  # the words pick an exchange
            prompt = render(taught)
            head = prompt[: _content_start(render, prompt, taught[-1]["content"])]
            if self.engine.cached_tokens(prompt) >= self.engine.count_tokens(head) - 2:
                return taught, prompt, True
        return plain, render(plain), False

    def _mark_stable(self, render, stable: list[dict[str, Any]], prompt: str) -> None:
        """Tell the engine where the next prompt will depart from ``prompt`` (before this
        turn's nearest exchanges), so a small sliding-window cache can roll back there."""
        if stable:
            # character by character is what is meant: these are texts, not paths
            self.engine.mark_stable(os.path.commonprefix([render(stable), prompt]))  # noqa: RUF071

    def _prompt_limit(self) -> int:
        reserve = self.config.reserve_tokens or self.config.max_new_tokens
        return max(self.engine.n_ctx - reserve, 1)

    def _renderer(self, knobs: Knobs):
        # the same declarations in every step: a stable prompt prefix keeps the KV cache valid
        # across steps and turns; the grammar and the step's validator enforce the step's choice
        tools = self.registry.as_openai() or None
        return lambda messages: self.engine.chat_template.render(messages, tools, knobs)

    # --- the turn ------------------------------------------------------------------------------
    def run(self, request: TurnRequest, sink: TurnSink) -> TurnResult:
        with self._lock:
            generation = self.cancel_token.begin()
            result = TurnResult(turn_id=request.turn_id)
            selection = self._select(request, result)
            option = selection.option if selection else None
            call = selection.call if selection else None
            if option is not None and option.tool and not self.selector.spec.pin:
                option = _ANY_TOOL  # the scores said "a tool"; the grammar picks which
            turn = self.dialogue.begin_turn(
                request.turn_id,
                request.user_text,
                request.scene,
                _teaches(request),  # (a selection's "no tool" shows a reply without calls)
                None if option is _ANY_TOOL else option,
            )
            # under a grammar, an item or a price the request names is copied, not decoded
            named = (
                narrowed_to(self.registry, request.user_text)
                if self.config.constrained and request.tool_choice != "none"
                else self.registry
            )
            seq = 0
            for step_index in range(self.config.max_steps):
                choice = self._step_choice(request.tool_choice, step_index)
                registry = named
                if step_index == 0 and option is _ANY_TOOL:
                    choice = "required"
                elif step_index == 0 and option is not None:  # the selection decides the call
                    choice = option.tool or "none"
                    registry = pinned_registry(named, call) if option.tool else registry
                state = StepState(request.turn_id, sink, result, seq, user_text=request.user_text)
                self._run_step(request, choice, state, generation, registry)
                seq, step = state.seq, state.step
                step.spoken = list(state.said)
                turn.steps.append(step)
                result.steps += 1
                if result.cancelled or not state.calls:
                    break
                step.tool_responses = self._await_results(state.calls, generation, result)
                if result.cancelled or self._nothing_to_add(step):
                    break
            if not self.cancel_token.finish(generation):
                result.cancelled = True  # cancelled after its last decode step: no end marker
            sink.on_turn_end(request.turn_id, seq, result)
            return result

    def _select(self, request: TurnRequest, result: TurnResult) -> Selection | None:
        """The tool selection's choice for the first step (None: the model decides, as
        without a selector: tool choice ``none``, a named tool, no scores, or an unconstrained
        model: only a grammar makes it produce the chosen call, where a validator alone would
        refuse the call it made instead)."""
        if (
            self.selector is None
            or not self.config.constrained
            or request.tool_choice not in ("auto", "required")
        ):
            return None
        try:
            selection = self.selector.select(
                request.user_text, allow_none=request.tool_choice == "auto"
            )
        except Exception as exc:  # the grammar still makes a valid call: degrade, say why
            log.warning("turn %s: tool selection failed (%s); greedy choice", request.turn_id, exc)
            result.errors.append(f"tool selection failed: {exc}")
            return None
        if selection is not None:
            result.selection, result.selection_s = selection.call.label, selection.seconds
            log.debug(
                "turn %s: selected %s (lead %.2f, %.0f ms)",
                request.turn_id,
                selection.call.label,
                selection.margin,
                selection.seconds * 1000,
            )
        return selection

    def _nothing_to_add(self, step: Step) -> bool:
        """Every call of the step succeeded with a tool whose result needs no words (an
        animation: the robot moved; ``after_result: end``): the turn ends there."""
        if not step.tool_responses:
            return False
        for call, response in zip(step.tool_calls, step.tool_responses):
            tool = self.registry.get(call["name"]) if call["name"] in self.registry else None
            if tool is None or tool.after_result != "end" or "error" in response["response"]:
                return False
        return True

    def _step_choice(self, tool_choice: str, step_index: int) -> str:
        if step_index == self.config.max_steps - 1 and step_index > 0:
            return "none"  # the last step must answer in words
        if step_index > 0 and tool_choice != "none":
            return "auto"  # 'required'/a named tool applies to the first step
        return tool_choice

    def _run_step(
        self,
        request: TurnRequest,
        choice: str,
        state: StepState,
        generation: int,
        registry: ToolRegistry | None = None,
    ) -> None:
        """Decode one step into ``state``: its sentences and calls go out through the sink as
        they complete; the step's history entry and the turn's counts are filled in. A step
        whose first sentence the reply guard keeps back is decoded again with
        ``resample_sampling`` (at most ``resample_tries`` times)."""
        cfg = self.config
        sampling = cfg.sampling
        for tries_left in range(cfg.resample_tries, -1, -1):
            state.may_resample = self.guard is not None and tries_left > 0
            try:
                self._decode_step(request, choice, state, generation, registry, sampling)
                break
            except _Resample as again:
                state.result.resampled += 1
                state.result.rejected.append(again.sentence)
                if again.reason.startswith("repeats"):
                    state.repeated = again.sentence
                log.info("turn %s: %s: sampled again", state.turn_id, again.reason)
                warmer = cfg.resample_sampling.temperature * (
                    1 + 0.5 * (state.result.resampled - 1)
                )
                sampling = dataclasses.replace(
                    cfg.resample_sampling, temperature=warmer, seed=cfg.sampling.seed
                )
        if state.repeated and not state.said and not state.calls and not state.result.cancelled:
            # every try was kept back: a line said before beats a question left unanswered
            # (a copy of the user's words is never said)
            log.info("turn %s: nothing new to say: %r again", state.turn_id, state.repeated)
            state.say(state.repeated)
            state.step.content = " ".join(state.said)

    def _decode_step(
        self,
        request: TurnRequest,
        choice: str,
        state: StepState,
        generation: int,
        registry: ToolRegistry | None,
        sampling: SamplingParams,
    ) -> None:
        cfg, knobs, result, sink = self.config, request.knobs, state.result, state.sink
        render = self._renderer(knobs)
        limit = self._prompt_limit()
        self.dialogue.fit(lambda m: self.engine.count_tokens(render(m)), limit)
        prompt = render(self.dialogue.messages())
        self._mark_stable(render, self.dialogue.stable_messages(), prompt)
        session = self.engine.start(prompt)
        result.prompt_tokens += session.stats.prompt_tokens
        result.stats.append(session.stats)

        grammar = (
            build_grammar(
                registry or self.registry,
                choice,
                cfg.max_speech_chars,
                cfg.max_calls_per_step,
                self._call_format(),
            )
            if cfg.constrained
            else None
        )
        # Constrained mode: a grammar governs only the answer, so thinking is opened by us (first
        # step only) and runs free until the model closes it or the budget forces it closed.
        prefill_thinking = cfg.constrained and knobs.enable_thinking and result.steps == 0
        parser = OutputParser(
            self._validator(choice, registry or self.registry),
            start_in_thinking=prefill_thinking,
            first_clause_chars=cfg.first_clause_chars if result.steps == 0 else 0,
        )
        if prefill_thinking:
            session.force(THINK_OPEN)
        elif self.guard is not None and result.steps == 0:
            # the first answer token steers clear of the openers recent turns began with (and,
            # when the step is sampled again, of those its earlier tries began with)
            recent = self.dialogue.recent_first_pieces(cfg.guard_turns)
            openers = self.guard.openers([*recent, *result.rejected])
            if openers:
                session.avoid(openers)
        budget = knobs.thinking_token_budget  # per turn, across steps
        cap = cfg.max_thinking_tokens if budget is None or budget < 0 else budget
        cap -= result.thinking_tokens
        altered_before = len(result.dropped) + result.fillers + len(result.rejected)
        thinking_tokens = 0
        first = result.completion_tokens == 0

        answer_tokens = 0
        done = reopened = False
        while answer_tokens < cfg.max_new_tokens and not done:  # thinking has its own cap
            if self.cancel_token.is_stale(generation):
                result.cancelled = True
                break
            thinking = parser.in_thinking
            room = max(1, cap - thinking_tokens if thinking else cfg.max_new_tokens - answer_tokens)
            tokens = session.step(sampling, None if thinking else grammar, room)
            if first:
                sink.on_first_token(request.turn_id)
                first = False
            for token in tokens:  # one token, or several accepted by a speculative decoder
                if token.is_eog and grammar is not None and parser.in_thinking and not reopened:
                    # constrained: the answer (and a required call) is the grammar's, so a model
                    # that ends its turn inside its thought gets the thought closed, as the
                    # budget would, and answers under the grammar (once a step)
                    reopened = True
                    close = parser.thinking_close_marker
                    session.force(close)
                    self._handle(parser.feed(close), state)
                    break
                if token.is_eog:
                    done = True
                    break
                result.completion_tokens += 1
                thinking_before = parser.in_thinking
                events = parser.feed(token.text)
                if thinking_before:
                    thinking_tokens += 1
                else:
                    answer_tokens += 1
                if not knobs.enable_thinking and parser.in_thinking:
                    cap = 0  # thinking is off: close any thought the model opens at once
                if parser.in_thinking and thinking_tokens >= cap:  # budget forcing
                    close = parser.thinking_close_marker
                    session.force(close)
                    events += parser.feed(close)
                try:
                    self._handle(events, state)
                except _Resample:
                    session.close()
                    raise
                if parser.done:
                    done = True
                    break
        session.close()  # a remote stream stops here, not at the server's max_tokens
        if not result.cancelled:
            self._handle(parser.finish(), state)
        raw = parser.speech_text.strip()
        # the history keeps what was said: the model's words unless some were dropped or filled
        altered = len(result.dropped) + result.fillers + len(result.rejected) != altered_before
        state.step.content = " ".join(state.said) if altered else raw
        result.spoken_text = " ".join(x for x in (result.spoken_text, state.step.content) if x)
        result.thinking_text += parser.thinking_text
        result.thinking_tokens += thinking_tokens

    def _call_format(self) -> str:
        if self.config.call_format != "auto":
            return self.config.call_format
        return "gemma4" if self.engine.chat_template.is_bundled else "json"

    def _validator(self, choice: str, registry: ToolRegistry):
        """The step's registry's validation, narrowed to what its tool_choice allows."""

        def validate(name: str, arguments: dict[str, Any]) -> str | None:
            if choice == "none":
                return f"no tools may be called in this step (asked to call {name!r})"
            if choice not in ("auto", "required") and name != choice:
                return f"only {choice!r} may be called in this step (asked to call {name!r})"
            return registry.validate(name, arguments)

        return validate

    def _handle(self, events: list, state: StepState) -> None:
        """Send the parser's events on: sentences spoken, calls dispatched after them."""
        turn_id, sink, result = state.turn_id, state.sink, state.result
        for ev in events:
            if isinstance(ev, Sentence):
                text, dropped = clean_sentence(ev.text)  # only what a voice can say
                if dropped:
                    result.dropped.extend(dropped)
                    log.warning("turn %s: dropped unspeakable %r", turn_id, " ".join(dropped))
                if text and not self._kept_back(text, state):
                    state.say(text)
            elif isinstance(ev, SpeechDelta):
                sink.on_speech_delta(turn_id, ev.text)
            elif isinstance(ev, ThinkingDelta):
                sink.on_thinking(turn_id, ev.text)
            elif isinstance(ev, ToolCall):
                if state.seq == 0:  # spoken first, whatever the model did: no silent goal
                    state.say(self.config.filler_sentence)
                    result.fillers += 1
                refused = self.registry.admit(ev.name)
                future = None if refused else sink.dispatch(turn_id, ev.name, ev.arguments)
                if refused:
                    ev = ToolCallError(raw=ev.raw, reason=refused, name=ev.name)
                    result.errors.append(refused)
                else:
                    result.tool_calls.append({"name": ev.name, "arguments": ev.arguments})
                state.call(ev, future, ev.name, getattr(ev, "arguments", {}))
            elif isinstance(ev, ToolCallError):
                result.errors.append(ev.reason)
                state.call(ev, None, ev.name or "invalid_call", {})
            elif isinstance(ev, EndOfTurn):
                pass

    def _kept_back(self, text: str, state: StepState) -> bool:
        """The reply guard's say on a sentence: a first sentence with a problem restarts the
        step (``_Resample``); a later one is left out, logged and counted."""
        if self.guard is None:
            return False
        said = [*self.dialogue.recent_sentences(self.config.guard_turns), *state.said]
        problem = self.guard.problem(text, state.user_text, said, " ".join(state.said))
        if problem is None:
            return False
        if state.may_resample and not state.said:
            raise _Resample(problem, text)
        state.result.rejected.append(text)
        if problem.startswith("repeats"):
            state.repeated = text
        log.info("turn %s: left out %r: %s", state.turn_id, text, problem)
        return True

    def _await_results(self, calls, generation, result) -> list[dict[str, Any]]:
        pending = [f for _, f in calls if f is not None]
        while pending:
            if self.cancel_token.is_stale(generation):
                result.cancelled = True
                for f in pending:
                    f.cancel()
                break
            _, not_done = wait_futures(pending, timeout=0.05)
            pending = list(not_done)
        responses = []
        for ev, future in calls:
            name = ev.name or "invalid_call"
            if future is None:
                outcome = ToolResult(ok=False, error=getattr(ev, "reason", "not dispatched"))
            elif future.cancelled() or not future.done():
                outcome = ToolResult(ok=False, error="cancelled")
            else:
                outcome = future.result()
            responses.append({"name": name, "response": outcome.response()})
        return responses


def _teaches(request: TurnRequest) -> bool:
    """Nearest few-shot examples teach calls: none for a turn that may call no tool."""
    return request.tool_choice != "none"

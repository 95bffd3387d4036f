"""Hypothesis fuzz of the core's message handlers: audio → listener, transcripts → turn
scheduler, joint commands → motion controller, model output → parser. Each runs
``FUZZ_EXAMPLES`` cases (2,000; 10,000 with ``pytest --fuzz-long``) and checks invariants, not
only "does not raise". Synchronous: scripted VAD probabilities and a scripted LLM engine (no
models, no threads, no sleeps)."""

from __future__ import annotations

import math
import os
from concurrent.futures import Future

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bolt_agent.core.asr.asr_engine import AsrResult
from bolt_agent.core.asr.end_of_turn import EndOfTurnSettings
from bolt_agent.core.asr.listener import (
    Listener,
    ListenerSettings,
    NoSpeech,
    TranscriptEvent,
    TranscriptionFailed,
    VoiceActivityEvent,
)
from bolt_agent.core.asr.vad_segmenter import WINDOW, VadConfig, VadSegmenter
from bolt_agent.core.llm.chat_template import Knobs
from bolt_agent.core.llm.dialogue import Dialogue
from bolt_agent.core.llm.output_parser import EndOfTurn, OutputParser, ToolCall
from bolt_agent.core.llm.profile import load_profile
from bolt_agent.core.llm.scripted_engine import ScriptedEngine
from bolt_agent.core.llm.turn_runner import RunnerConfig, TurnRequest, TurnRunner
from bolt_agent.core.llm.turn_scheduler import TurnScheduler
from bolt_agent.core.motion.animation import AnimationLibrary
from bolt_agent.core.motion.animation_control import AnimationController
from support.turn_sinks import RecordingSink

FUZZ_EXAMPLES = int(os.environ.get("BOLT_FUZZ_EXAMPLES", "2000"))
FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
NO_THINK = Knobs(enable_thinking=False)


# --- audio → listener ------------------------------------------------------------------------
class ScriptedVad:
    """VAD model double: the probability of each successive 512-sample window, cycled."""

    def __init__(self, probs: list[float]) -> None:
        self.probs, self.i = probs, 0

    def reset(self) -> None:
        pass

    def __call__(self, windows: np.ndarray) -> np.ndarray:
        out = [self.probs[(self.i + k) % len(self.probs)] for k in range(len(windows))]
        self.i += len(windows)
        return np.array(out, np.float32)


class FlakyAsr:
    """Cycles through outcomes: a result, no speech, or an exception."""

    def __init__(self, outcomes: list[str]) -> None:
        self.outcomes, self.i = outcomes, 0

    def transcribe(self, audio: np.ndarray, final: bool = True) -> AsrResult | None:
        assert np.isfinite(audio).all()  # NaN/inf never reach the transcriber
        outcome = self.outcomes[self.i % len(self.outcomes)]
        self.i += 1
        if outcome == "raise":
            raise RuntimeError("CUDA error: out of memory")
        return None if outcome == "none" else AsrResult("words", 0.5, "en", 0.0)


class LaterRunner:
    """Holds jobs until the test runs them (a busy whisper thread), in order."""

    def __init__(self) -> None:
        self.jobs: list = []

    def submit(self, fn) -> Future:
        future: Future = Future()
        self.jobs.append((fn, future))
        return future

    def run(self, n: int) -> None:
        for _ in range(min(n, len(self.jobs))):
            fn, future = self.jobs.pop(0)
            future.set_result(fn())  # a job that raised would fail the test here


SPECIAL = st.sampled_from([math.nan, math.inf, -math.inf, 0.0, 1.0, -1.0, 40.0])
block = st.tuples(st.integers(0, 3 * WINDOW), st.lists(SPECIAL, max_size=3))
listener_op = st.one_of(
    st.tuples(st.just("push"), block),
    st.tuples(st.just("robot"), st.booleans()),
    st.tuples(st.just("run"), st.integers(0, 4)),
    st.tuples(st.just("hint"), st.sampled_from([0.0, 0.5, 1.0, math.nan, 2.0])),
)


@FUZZ
@given(
    probs=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=40),
    outcomes=st.lists(st.sampled_from(["text", "none", "raise"]), min_size=1, max_size=5),
    echo=st.sampled_from(["off", "gate", "barge_in"]),
    early=st.booleans(),
    partial_s=st.sampled_from([0.0, 0.05, 0.3]),
    ops=st.lists(listener_op, max_size=60),
    semantic=st.booleans(),
)
def test_fuzz_listener(probs, outcomes, echo, early, partial_s, ops, semantic):
    runner = LaterRunner()
    vad = VadSegmenter(
        VadConfig(min_speech_ms=64, min_silence_ms=96, speech_pad_ms=32, max_speech_s=1.0),
        ScriptedVad(probs),
    )
    # semantic: the VAD's 96 ms is the longest wait; complete words end the turn after 32 ms,
    # likely ones after 64 ms
    mode = "semantic" if semantic else "fixed"
    eot = EndOfTurnSettings(mode, 32, 96, 0.3, 64, likely_threshold=0.1, likely_silence_ms=64)
    settings_ = ListenerSettings(echo, 0.8, 64, 0, partial_s, early, 0.5, eot)
    clock = iter(range(10**6)).__next__  # a deterministic clock (the echo tail is 0)
    listener = Listener(FlakyAsr(outcomes), settings_, vad, runner, clock=lambda: clock())
    events: list = []
    stamp = 1_000_000_000
    for op, arg in ops:
        if op == "push":
            n, specials = arg
            chunk = np.zeros(n, np.float32)
            chunk[: len(specials)] = specials[:n]
            events += listener.push(chunk, stamp)
            stamp += n * 62_500
        elif op == "robot":
            listener.robot_speaking(arg)
        elif op == "hint":  # the LLM's judgement, maybe late, maybe about another utterance
            listener.end_of_turn_hint(listener._utt_id or "u-none", "words", arg)
        else:
            runner.run(arg)
            events += listener.take_events()
    for _ in range(4):  # the end of the stream: silence closes an open utterance
        events += listener.push(np.zeros(4 * WINDOW, np.float32), stamp)
        stamp += 4 * WINDOW * 62_500
    runner.run(10**6)
    events += listener.take_events()

    speaking, started, ended, started_last = False, set(), [], ""
    outcome: dict[str, int] = {}
    for e in events:
        if isinstance(e, VoiceActivityEvent) and e.resumed:
            # speaking again after an early end: within the utterance in progress
            assert speaking and e.speaking and e.utterance_id == started_last, e
        elif isinstance(e, VoiceActivityEvent):
            assert e.speaking != speaking, "voice activity must alternate start/stop"
            speaking = e.speaking
            started_last = e.utterance_id
            (started.add if e.speaking else ended.append)(e.utterance_id)
        elif isinstance(e, TranscriptEvent):
            assert e.utterance_id in started and e.audio_start_ns <= e.audio_end_ns
            if e.is_final:
                outcome[e.utterance_id] = outcome.get(e.utterance_id, 0) + 1
        elif isinstance(e, NoSpeech) or (isinstance(e, TranscriptionFailed) and e.stage == "final"):
            outcome[e.utterance_id] = outcome.get(e.utterance_id, 0) + 1
    assert all(n == 1 for n in outcome.values()), outcome  # never two finals for one utterance
    assert set(outcome) <= set(ended)
    if echo != "gate":  # only the gate drops an utterance without a final outcome
        assert set(outcome) == set(ended), "an ended utterance was lost silently"


# --- transcripts → turn scheduler --------------------------------------------------------------
sched_op = st.one_of(
    st.tuples(st.just("submit"), st.integers(0, 3)),
    st.tuples(st.just("cancel"), st.just(0)),
    st.tuples(st.just("cancel_at_start"), st.just(0)),
    st.tuples(st.just("prewarm"), st.just(0)),
    st.tuples(st.just("interrupted"), st.just(0)),
    st.tuples(st.just("run"), st.just(0)),
    st.tuples(st.just("nested"), st.integers(1, 6)),  # the next turn's decode submits at token n
)


PROFILE = load_profile("reachy_mini")
ENGINE = ScriptedEngine([])  # built once: compiling the chat template costs ~60 ms


@FUZZ
@given(ops=st.lists(sched_op, max_size=30))
def test_fuzz_turn_scheduler(ops):
    engine = ENGINE
    engine._scripts, engine.prompts, engine.on_token = ["One two three four."] * 64, [], None
    runner = TurnRunner(
        engine, Dialogue(PROFILE.persona), PROFILE.registry, RunnerConfig(max_steps=1)
    )
    bumps = [0]  # every submit and cancel makes all earlier jobs stale
    at_submit: dict[str, int] = {}
    started: dict[str, int] = {}
    failures: list = []
    cancel_at_start = [False]
    sched: TurnScheduler

    def make_request(turn_id, text, knobs):
        started[turn_id] = bumps[0]
        if cancel_at_start[0]:  # the window between "marked current" and the runner's read
            cancel_at_start[0] = False
            bumps[0] += 1
            sched.cancel("fuzz")
        return TurnRequest(turn_id, text, NO_THINK, "none")

    sched = TurnScheduler(runner, make_request, on_failure=lambda *a: failures.append(a))
    futures: dict[str, Future] = {}
    ids = iter(range(10**6))

    def submit() -> None:
        turn_id = f"t{next(ids)}"
        bumps[0] += 1
        at_submit[turn_id] = bumps[0]
        futures[turn_id] = sched.submit(turn_id, "hello", NO_THINK, RecordingSink())

    sched.start()
    for op, arg in ops:
        if op == "submit":
            for _ in range(arg + 1):
                submit()
        elif op == "cancel":
            bumps[0] += 1
            sched.cancel("fuzz")
        elif op == "cancel_at_start":
            cancel_at_start[0] = True
        elif op == "prewarm":
            sched.prewarm("u", "hel")
        elif op == "interrupted" and futures:
            sched.interrupted(next(iter(futures)), "One two.")
        elif op == "nested":
            engine.on_token = lambda n, at=arg: (
                (engine.__setattr__("on_token", None), submit())[1] if n == at else None
            )
        else:
            sched.run_pending()
    sched.run_pending()
    sched.run_pending()  # a nested submit during the last run is queued behind it

    assert not failures and sched.current_turn == "" and sched.pending() == 0
    for turn_id, future in futures.items():
        result = future.result(timeout=0)  # every turn ends: none is left hanging
        if turn_id in started:
            # a turn that started was not superseded while it waited in the queue
            assert started[turn_id] == at_submit[turn_id], turn_id
        else:
            assert result.cancelled and result.steps == 0
        if result.cancelled:
            assert bumps[0] > at_submit[turn_id]  # never cancelled without a reason
    if futures:
        last = list(futures)[-1]
        if bumps[0] == at_submit[last]:  # nothing came after the newest turn: it answered
            assert last in started and not futures[last].result().cancelled


# --- joint commands → motion controller --------------------------------------------------------
LIB = AnimationLibrary.load()
NAMES = [*LIB.animations, "moonwalk", ""]
numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, 1.0]))
motion_op = st.one_of(
    st.tuples(st.just("goal"), st.sampled_from(NAMES), numbers, st.sampled_from(["", "llm", "x"])),
    st.tuples(st.just("teleop_anim"), st.sampled_from(NAMES), numbers, st.just("")),
    st.tuples(
        st.just("pose"),
        st.dictionaries(st.sampled_from([*LIB.joints, "tail"]), numbers, max_size=4),
        st.just(0.0),
        st.just(""),
    ),
    st.tuples(st.just("cancel"), st.integers(0, 5), st.just(0.0), st.just("")),
    st.tuples(st.just("override"), st.booleans(), st.just(0.0), st.just("")),
    st.tuples(st.just("step"), st.integers(1, 30), st.just(0.0), st.just("")),
)


@FUZZ
@given(ops=st.lists(motion_op, max_size=25), policy=st.sampled_from(["preempt", "queue", "reject"]))
def test_fuzz_motion_controller(ops, policy):
    ctrl = AnimationController(LIB, rate_hz=50.0, policy=policy)
    goals: list[str] = []
    finished: list[str] = []
    pose = ctrl.pose
    for op, a, b, c in ops:
        if op == "goal":
            goal_id = f"g{len(goals)}"
            if ctrl.submit(goal_id, a, b, c).accepted:
                goals.append(goal_id)
                assert math.isfinite(b) and b >= 0
        elif op == "teleop_anim":
            ctrl.play_teleop(a, b)
        elif op == "pose":
            if ctrl.teleop_pose(a).accepted:
                assert all(math.isfinite(v) for v in a.values())
        elif op == "cancel" and goals:
            ctrl.cancel(goals[a % len(goals)])
        elif op == "override":
            ctrl.set_override(a)
        elif op == "step":
            for _ in range(a):
                res = ctrl.step()
                finished += [o.goal_id for o in res.finished]
                if res.command is None:
                    continue
                new = res.command.positions
                for joint, x0, x1 in zip(LIB.joints, pose, new, strict=True):
                    lim = LIB.limits[joint]
                    assert math.isfinite(x1) and lim.lower - 1e-9 <= x1 <= lim.upper + 1e-9
                    assert abs(x1 - x0) <= lim.max_velocity * ctrl.dt + 1e-9
                pose = new
    assert len(finished) == len(set(finished)), "a goal finished twice"


# --- model output → parser ---------------------------------------------------------------------
REGISTRY = load_profile("blacksmith_npc").registry
FRAGMENTS = [
    "<|channel>thought\n", "<channel|>", "<think>", "</think>", "<|tool_call>", "<tool_call|>",
    "<tool_call>", "</tool_call>", "<turn|>", "<|\"|>", "call:sell_to_player{", "}", "{", "\"",
    '{"name": "sell_to_player", "arguments": {"item": "sword", "quantity": 2}}',
    '{"name": "rm_rf", "arguments": {}}', "call:check_shop_inventory{}", "Hello there. ",
    "How are you? ", "\n", "<", "|", ">", "<|", "…", "\x00", "\ud7ff",
]  # fmt: skip
piece = st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=12))


@FUZZ
@given(
    pieces=st.lists(piece, max_size=40),
    cuts=st.lists(st.integers(1, 7), min_size=1, max_size=10),
    thinking=st.booleans(),
)
def test_fuzz_output_parser(pieces, cuts, thinking):
    text = "".join(pieces)
    parser = OutputParser(REGISTRY.validate, start_in_thinking=thinking)
    events, i, k = [], 0, 0
    while i < len(text):
        n = cuts[k % len(cuts)]
        events += parser.feed(text[i : i + n])
        i, k = i + n, k + 1
    events += parser.finish()
    assert isinstance(events[-1], EndOfTurn) and sum(isinstance(e, EndOfTurn) for e in events) == 1
    for e in events:
        if isinstance(e, ToolCall):  # only allowlisted, schema-valid calls ever come out
            assert e.name in REGISTRY and REGISTRY.validate(e.name, e.arguments) is None
    assert parser.feed("more") == [] and parser.finish() == []  # done stays done

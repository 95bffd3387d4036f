"""Preemptive answers and the end-of-turn probe, synchronously (core/llm/held_turn.py and the
scheduler's preemptive jobs): the worker runs on this thread, the final transcript or the user's
resumption is injected between two tokens (the scripted engine's hook). No ROS, no sleeps."""

from __future__ import annotations

from bolt_agent.core.llm.chat_template import Knobs
from bolt_agent.core.llm.dialogue import Dialogue
from bolt_agent.core.llm.held_turn import COMMITTED, DISCARDED, HeldTurn
from bolt_agent.core.llm.preemption import Preemption
from bolt_agent.core.llm.profile import load_profile
from bolt_agent.core.llm.scripted_engine import ScriptedEngine
from bolt_agent.core.llm.turn_runner import RunnerConfig, TurnRequest, TurnRunner
from bolt_agent.core.llm.turn_scheduler import NotActiveError, TurnScheduler
from support.turn_sinks import RecordingSink, speaking_after_results

NO_THINK = Knobs(enable_thinking=False)
NOD = (
    "Sure, watch this. Here it comes."
    '<|tool_call>call:trigger_reachy_animation{animation_name:<|"|>happy_nod<|"|>}<tool_call|>'
)


class NodeSink(RecordingSink):
    """llm_node's sink as the gate sees it: held sentences, release and discard recorded."""

    def on_held_sentence(self, turn_id, seq, text):
        self.events.append(("held", seq, text))

    def on_release(self, turn_id):
        self.events.append(("release",))

    def on_discard(self, turn_id):
        self.events.append(("discard",))


class Harness:
    def __init__(self, scripts: list[str], on_token=None, nearest=None, make_request=None):
        profile = load_profile("reachy_mini")
        self.engine = ScriptedEngine(scripts, on_token=on_token)
        config = RunnerConfig(constrained=False, max_steps=2)
        self.dialogue = Dialogue(profile.persona, nearest=nearest)
        # the animation's turn goes on after its result here (the profile ends it there:
        # after_result), so a sentence comes after the release as well
        registry = speaking_after_results(profile.registry)
        self.runner = TurnRunner(self.engine, self.dialogue, registry, config)
        self.hints: list[tuple[str, str, float]] = []
        self.cancelled: list[tuple[str, str]] = []
        self.failures: list[tuple[str, str]] = []
        self.scheduler = TurnScheduler(
            self.runner,
            make_request
            or (lambda turn_id, text, knobs: TurnRequest(turn_id, text, knobs or NO_THINK, "auto")),
            on_cancel=lambda turn_id, why: self.cancelled.append((turn_id, why)),
            on_hint=lambda *hint: self.hints.append(hint),
            on_failure=lambda kind, message: self.failures.append((kind, message)),
        )
        self.scheduler.start()

    def held(self, utt: str, text: str, timeout_s: float = 5.0) -> tuple[HeldTurn, NodeSink]:
        sink = NodeSink()
        return HeldTurn(utt, text, sink, timeout_s), sink


def test_a_committed_preemptive_turn_is_heard_and_dispatched_only_after_the_final():
    h = Harness([NOD, "All done."])
    held, sink = h.held("u1", "Can you nod for me?")

    def on_token(n: int) -> None:  # the final transcript arrives in the middle of the answer
        if n == 7 and held.state == "pending":
            assert "dispatch" not in [e[0] for e in sink.events]
            held.commit()

    h.engine.on_token = on_token
    done = h.scheduler.preempt("u1", "Can you nod for me?", NO_THINK, held, probe=False)
    h.scheduler.run_pending()
    kinds = [e[0] for e in sink.events if e[0] not in ("first",)]
    # held sentences, then the release, then everything else in order
    assert kinds[: kinds.index("release")] == ["held"] * kinds.index("release")
    assert "dispatch" in kinds and kinds.index("dispatch") > kinds.index("release")
    assert kinds[-1] == "end"
    held_texts = [e[2] for e in sink.events if e[0] == "held"]
    said = [e[2] for e in sink.events if e[0] == "sentence"]
    assert held_texts + said == ["Sure, watch this.", "Here it comes.", "All done."]
    result = done.result(timeout=0)
    assert not result.cancelled and result.tool_calls
    assert held.state == COMMITTED
    # a real turn now: it is in the history like any other
    assert [t.turn_id for t in h.dialogue.turns] == ["u1"]


def test_a_discarded_preemptive_turn_is_never_heard_dispatched_or_remembered():
    h = Harness([NOD, "A fresh answer."])
    h.dialogue.begin_turn("u0", "Hello")  # an earlier exchange, kept
    h.dialogue.current.steps.clear()
    held, sink = h.held("u1", "I would like to buy")

    def on_token(n: int) -> None:  # the user resumes: the node discards and cancels
        if n == 3 and held.state == "pending":
            held.discard()
            h.scheduler.cancel("the user went on talking")

    h.engine.on_token = on_token
    done = h.scheduler.preempt("u1", "I would like to buy", NO_THINK, held, probe=False)
    h.scheduler.run_pending()
    assert done.result(timeout=0).cancelled and held.state == DISCARDED
    kinds = [e[0] for e in sink.events]
    assert "sentence" not in kinds and "dispatch" not in kinds and "end" not in kinds
    assert "release" not in kinds and kinds.count("discard") == 1
    assert [t.turn_id for t in h.dialogue.turns] == ["u0"]  # history as if it never started
    assert h.scheduler.discarded == 1

    # the final of the whole sentence answers as a normal turn; its prompt holds no trace of
    # the discarded answer
    h.engine.on_token = None
    real = RecordingSink()
    h.scheduler.submit("u1", "I would like to buy a long sword.", NO_THINK, real)
    h.scheduler.run_pending()
    assert [e[2] for e in real.events if e[0] == "sentence"] == ["A fresh answer."]
    prompt = h.engine.prompts[-1]
    assert "I would like to buy a long sword." in prompt and "watch this" not in prompt
    assert prompt.count("I would like to buy") == 1
    assert [t.turn_id for t in h.dialogue.turns] == ["u0", "u1"]


def test_a_preemptive_turn_discarded_before_it_starts_never_reaches_the_model():
    h = Harness([NOD])
    held, sink = h.held("u1", "I would like")
    done = h.scheduler.preempt("u1", "I would like", NO_THINK, held, probe=False)
    assert held.discard()
    h.scheduler.run_pending()
    assert h.engine.prompts == [] and done.result(timeout=0).cancelled
    assert sink.events == [("discard",)]  # the gate told the TTS; the end never comes out
    assert h.dialogue.turns == []


def test_a_goal_waits_for_the_decision_and_a_lost_final_discards_the_turn():
    """No final within the hold time (timeout 0 here): the goal is refused, never sent."""
    h = Harness([NOD, "Left unsaid."])
    held, sink = h.held("u1", "Can you nod", timeout_s=0.0)
    done = h.scheduler.preempt("u1", "Can you nod", NO_THINK, held, probe=False)
    h.scheduler.run_pending()
    assert held.state == DISCARDED
    assert "dispatch" not in [e[0] for e in sink.events] and ("discard",) in sink.events
    assert "end" not in [e[0] for e in sink.events] and not done.result(timeout=0).cancelled
    assert h.dialogue.turns == []


def test_the_probe_reads_the_turns_own_prompt_cut_after_the_users_words():
    h = Harness(["Hello!"])
    h.engine.continuation_p = lambda prompt, continuations: 0.42
    held, sink = h.held("u1", "Can you nod for me?")
    held.commit()  # decided before the worker runs: the answer goes straight through
    h.scheduler.preempt("u1", "Can you nod for me?", NO_THINK, held, probe=True)
    h.scheduler.run_pending()
    assert h.hints == [("u1", "Can you nod for me?", 0.42)]
    ((probe, continuations),) = h.engine.probes
    # whisper's punctuation off: the model says whether the words can end here
    assert probe.endswith("Can you nod for me")
    turn_prompt = h.engine.prompts[0]
    assert turn_prompt.startswith(probe)  # the probe's prefill is the turn's own
    closer = turn_prompt[len(probe) + 1 :]  # after the "?"
    assert continuations == [".", "?", "!", "\n", closer] and closer.startswith("<turn|>")
    kinds = [e[0] for e in sink.events if e[0] in ("release", "held", "sentence", "end")]
    assert kinds == ["release", "sentence", "end"]


#: the few-shot exchange a motion request picks (profile.nearest's part, here by one word)
EXCHANGE = [
    {"role": "user", "content": "Nod once for me, please."},
    {"role": "assistant", "content": "Here is my nod."},
]


def test_the_probe_with_nearest_prefills_the_turns_exchange_before_the_hint():
    """``with_nearest`` (llm_node's ``end_of_turn_probe_nearest``): the probe's prompt holds
    the exchange the words pick, so the turn reuses all of it; without it the probe leaves the
    exchange out and the turn departs from the probe's prompt before the words."""
    for with_nearest in (True, False):
        h = Harness(["Hello!"], nearest=lambda text: EXCHANGE if "nod" in text else [])
        h.engine.continuation_p = lambda prompt, continuations: 0.42
        held, _sink = h.held("u1", "Can you nod for me?")
        held.commit()
        h.scheduler.preempt(
            "u1", "Can you nod for me?", NO_THINK, held, probe=True, with_nearest=with_nearest
        )
        h.scheduler.run_pending()
        assert h.hints == [("u1", "Can you nod for me?", 0.42)]
        ((probe, _continuations),) = h.engine.probes
        turn_prompt = h.engine.prompts[0]
        assert probe.endswith("Can you nod for me") and "Here is my nod." in turn_prompt
        assert ("Here is my nod." in probe) is with_nearest
        assert turn_prompt.startswith(probe) is with_nearest


def test_after_a_pause_the_exchange_prefilled_from_the_first_words_serves_the_probe_and_turn():
    """llm_node's ``prefill_after_pause``: the user went on after "Can you nod", so the history
    and the exchange those words pick were prefilled while they talked; the probe at the next
    pause carries that exchange (the cache holds it: no extra cost) and the turn reuses the
    probe's whole prompt. Without the prefill the probe leaves the exchange out."""
    for prefilled in (True, False):
        h = Harness(["Hello!", "Here it is."], nearest=lambda t: EXCHANGE if "nod" in t else [])
        # the first pause: a preemptive turn and a probe; the user goes on while the probe
        # runs, so the turn is discarded before it starts (dropped, no cancel)
        first, _ = h.held("u1", "Can you nod")
        h.engine.continuation_p = lambda prompt, continuations, held=first: held.discard() or 0.42
        h.scheduler.preempt("u1", "Can you nod", NO_THINK, first, probe=True)
        if prefilled:
            assert h.scheduler.prewarm("u1", "Can you nod") is not None
        h.scheduler.run_pending()
        assert "Here is my nod." not in h.engine.probes[0][0]  # nothing cached it yet
        # the second pause: the whole request
        held, _sink = h.held("u1", "Can you nod for me?")
        held.commit()
        h.scheduler.preempt("u1", "Can you nod for me?", NO_THINK, held, probe=True)
        h.scheduler.run_pending()
        probe = h.engine.probes[1][0]
        turn_prompt = h.engine.prompts[-1]
        assert probe.endswith("Can you nod for me") and "Here is my nod." in turn_prompt
        assert ("Here is my nod." in probe) is prefilled
        assert turn_prompt.startswith(probe) is prefilled


def test_a_prewarm_waits_for_no_turn_that_a_cancel_has_stopped():
    """The preemptive turn the user's resumption discards may still be running when the prefill
    after the pause is asked for: once cancelled it no longer holds prefills back."""
    h = Harness(["one two three four five six.", "Fine."])
    asked: list[object] = []
    h.engine.on_token = lambda n: n == 2 and asked.extend(
        [h.scheduler.prewarm("u0", "still"), h.scheduler.cancel("barge-in"),
         h.scheduler.prewarm("u1", "Can you")]
    )  # fmt: skip
    h.scheduler.submit("t1", "count", NO_THINK, RecordingSink())
    h.scheduler.run_pending()
    assert asked[0] is None and asked[1] == "t1"  # refused while t1 ran, then t1 stopped
    assert asked[2] is not None and asked[2].is_set()  # queued, and run after t1 ended
    opened = "<|turn>user\nCan you<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"
    assert h.engine.cached.endswith(opened)


def test_a_probe_alone_does_not_cancel_the_turn_in_progress_and_a_stale_one_is_silent():
    h = Harness(["one two three four five six.", "Fine."])
    h.engine.continuation_p = lambda prompt, continuations: 0.9
    first = h.scheduler.submit("t1", "count", NO_THINK, RecordingSink())
    assert h.scheduler.preempt("u1", "Hi there.", NO_THINK, None, probe=True) is None
    h.scheduler.run_pending()
    assert not first.result(timeout=0).cancelled and h.cancelled == []
    assert h.hints == [("u1", "Hi there.", 0.9)]
    # a probe queued before a cancel is stale: no hint for words that no longer matter
    h.scheduler.preempt("u2", "Old words.", NO_THINK, None, probe=True)
    h.scheduler.cancel("barge-in")
    h.scheduler.run_pending()
    assert [hint[0] for hint in h.hints] == ["u1"]


def test_an_engine_without_probabilities_gives_no_hint():
    h = Harness([])
    h.scheduler.preempt("u1", "Hi there.", NO_THINK, None, probe=True)
    h.scheduler.run_pending()
    assert h.hints == [] and len(h.engine.probes) == 1


# --- llm_node's held turn (core/llm/preemption.py): one decision per event, whatever the thread --


class Log:
    def __init__(self):
        self.lines: list[str] = []

    def info(self, line: str) -> None:
        self.lines.append(line)


def preemption(h: Harness) -> tuple[Preemption, NodeSink]:
    return Preemption(h.scheduler, Log()), NodeSink()


def test_a_final_after_a_cancel_stopped_the_held_turn_gets_a_turn_of_its_own():
    """``llm/cancel`` (or a reset) while the preemptive turn is still queued: it will never
    run, so the final of the same words must not commit it (the user got no answer)."""
    h = Harness(["Hello there."])
    pre, sink = preemption(h)
    pre.start("u1", "Hi robot", NO_THINK, sink, 5.0, probe=False)
    h.scheduler.cancel("llm/cancel")
    assert pre.commit("u1", "Hi robot.") is False  # the node then submits the final
    assert pre.held is None and sink.events == [("discard",)]
    h.scheduler.run_pending()
    assert h.engine.prompts == []  # the stale preemptive turn never ran
    assert pre.counts() == {"started": 1, "committed": 0, "discarded": 1, "hints": 0}


def test_a_held_turn_the_scheduler_refuses_is_discarded_at_once():
    """Not active: no worker will run the held turn; the final must not be swallowed by it."""
    h = Harness(["Hello there."])
    h.scheduler.stop()
    pre, sink = preemption(h)
    pre.start("u1", "Hi robot", NO_THINK, sink, 5.0, probe=False)
    assert pre.held is None and sink.events == [("discard",)]
    assert pre.commit("u1", "Hi robot.") is False
    assert pre.counts()["started"] == 1 and pre.counts()["discarded"] == 1


def test_a_cancel_discards_a_pending_held_turn_and_stops_a_committed_one():
    h = Harness(["one two three four five six.", "one two three four five six."])
    pre, sink = preemption(h)
    seen: list[bool] = []

    def cancel_at_3(n: int) -> None:  # a cancel (barge-in, llm/cancel) while it generates
        if n == 3 and not seen:
            seen.append(pre.turn_cancelled("u1", "llm/cancel"))

    h.engine.on_token = cancel_at_3
    pre.start("u1", "Hi robot", NO_THINK, sink, 5.0, probe=False)
    h.scheduler.run_pending()
    assert seen == [True]  # unheard: discarded, nothing to stop
    assert pre.held is None and ("discard",) in sink.events and "release" not in sink.events

    # the same, once the final committed it: a real turn, which the node stops like any other
    pre2, sink2 = preemption(h)
    seen.clear()

    def commit_then_cancel(n: int) -> None:
        if n == 3 and not seen:
            assert pre2.commit("u2", "Hi robot.")
            seen.append(pre2.turn_cancelled("u2", "llm/cancel"))

    h.engine.on_token = commit_then_cancel
    pre2.start("u2", "Hi robot", NO_THINK, sink2, 5.0, probe=False)
    h.scheduler.run_pending()
    assert seen == [False] and ("release",) in sink2.events and ("discard",) not in sink2.events
    assert pre2.counts() == {"started": 1, "committed": 1, "discarded": 0, "hints": 0}


def test_every_discard_is_counted_whoever_makes_it():
    """The scheduler dropping a stale held turn and the hold timing out discard without the
    node's call: both are counted."""
    h = Harness(["Hello there.", "Hi."])
    pre, sink = preemption(h)
    pre.start("u1", "Hi robot", NO_THINK, sink, 5.0, probe=False)
    h.scheduler.submit("t2", "something else", NO_THINK, RecordingSink())  # supersedes it
    h.scheduler.run_pending()  # the worker drops u1 unrun
    assert h.scheduler.dropped == 1 and ("discard",) in sink.events
    pre.start("u3", "Hi robot", NO_THINK, NodeSink(), 0.0, probe=False)  # no final: timeout
    h.scheduler.run_pending()
    assert pre.counts() == {"started": 2, "committed": 0, "discarded": 2, "hints": 0}


def test_a_preemptive_turn_queued_when_the_scheduler_stops_is_refused_and_discarded():
    h = Harness(["Hi."])
    held, sink = h.held("u1", "Hi")
    done = h.scheduler.preempt("u1", "Hi", NO_THINK, held, probe=False)
    h.scheduler.stop()
    h.scheduler.run_pending()
    assert isinstance(done.exception(timeout=0), NotActiveError)
    assert held.state == DISCARDED and sink.events == [("discard",)]


def test_a_job_that_raises_is_reported_and_the_worker_goes_on():
    def make_request(turn_id, text, knobs):
        if text == "boom":
            raise RuntimeError("no request for you")
        return TurnRequest(turn_id, text, knobs or NO_THINK, "auto")

    h = Harness(["Still here."], make_request=make_request)
    held, _ = h.held("u1", "boom")
    done = h.scheduler.preempt("u1", "boom", NO_THINK, held, probe=True)
    h.scheduler.run_pending()  # (run_forever's loop runs the same run_job)
    assert isinstance(done.exception(timeout=0), RuntimeError)
    assert [kind for kind, _ in h.failures] == ["worker"]
    assert held.state == DISCARDED  # a final of the same words must not commit it
    after = h.scheduler.submit("t2", "hello", NO_THINK, RecordingSink())
    h.scheduler.run_pending()
    assert after.result(timeout=0).spoken_text == "Still here."


def test_the_probe_cuts_after_the_users_words_even_when_they_are_the_templates():
    """ "model" and "turn" also occur in the template's tail (``<|turn>model``): the probe
    reads the user's word, not the template's."""
    h = Harness([])
    h.engine.continuation_p = lambda prompt, continuations: 0.5
    for word in ("model", "turn", "thought"):
        h.scheduler.preempt("u1", word, NO_THINK, None, probe=True)
        h.scheduler.run_pending()
        probe, continuations = h.engine.probes[-1]
        assert probe.endswith("<|turn>user\n" + word), probe[-60:]
        assert continuations[-1].startswith("<turn|>")

"""Turn scheduling, synchronously: jobs queued, then run on this thread (no ROS, no sleeps)."""

from __future__ import annotations

import pytest

from bolt_agent.core.llm.chat_template import Knobs
from bolt_agent.core.llm.dialogue import INTERRUPTED_MARKER, Dialogue
from bolt_agent.core.llm.profile import load_profile
from bolt_agent.core.llm.scripted_engine import ScriptedEngine
from bolt_agent.core.llm.turn_runner import RunnerConfig, TurnRequest, TurnRunner
from bolt_agent.core.llm.turn_scheduler import NotActiveError, TurnScheduler
from bolt_agent.core.turn_metrics import turn_outcome
from support.turn_sinks import RecordingSink

NO_THINK = Knobs(enable_thinking=False)


class Harness:
    def __init__(self, scripts: list[str], on_token=None):
        profile = load_profile("reachy_mini")
        self.engine = ScriptedEngine(scripts, on_token=on_token)
        config = RunnerConfig(constrained=False, max_steps=1)
        self.runner = TurnRunner(self.engine, Dialogue(profile.persona), profile.registry, config)
        self.cancelled: list[tuple[str, str]] = []
        self.after = 0
        self.scheduler = TurnScheduler(
            self.runner,
            lambda turn_id, text, knobs: TurnRequest(turn_id, text, knobs or NO_THINK, "none"),
            on_cancel=lambda turn_id, why: self.cancelled.append((turn_id, why)),
            after_turn=self._after,
        )

    def _after(self) -> None:
        self.after += 1


def test_turns_run_in_order_and_their_futures_hold_the_results():
    h = Harness(["Hello there.", "Second answer."])
    h.scheduler.start()
    first = h.scheduler.submit("t1", "hi", NO_THINK, RecordingSink())
    assert h.scheduler.run_pending() == 1
    second = h.scheduler.submit("t2", "again", NO_THINK, RecordingSink())
    assert not second.done()
    assert h.scheduler.run_pending() == 1
    assert first.result().spoken_text == "Hello there."
    assert second.result().spoken_text == "Second answer."
    assert h.cancelled == []  # nothing was in progress when t2 was queued
    assert h.after == 2
    assert h.scheduler.current_turn == ""


def test_a_newer_final_supersedes_queued_ones():
    """Finals B and C arrive while A runs: A is cancelled, B never runs, C answers."""
    h = Harness(["one two three four five six seven eight.", "Never said.", "Fine."])
    sched = h.scheduler
    later: dict = {}
    b_sink = RecordingSink()

    def on_token(n: int) -> None:
        if n == 2 and not later:
            later["b"] = sched.submit("B", "first", NO_THINK, b_sink)
            later["c"] = sched.submit("C", "second", NO_THINK, RecordingSink())

    h.engine.on_token = on_token
    sched.start()
    a = sched.submit("A", "count", NO_THINK, RecordingSink())
    sched.run_pending()
    assert a.result().cancelled
    b = later["b"].result(timeout=0)
    assert b.cancelled and b.steps == 0 and b_sink.events == [("end", 0)]
    assert later["c"].result(timeout=0).spoken_text == "Never said."  # the next script
    assert len(h.engine.prompts) == 2 and "second" in h.engine.prompts[1]
    assert "first" not in h.engine.prompts[1].split("count")[-1]  # B never reached the model
    assert sched.dropped == 1 and h.cancelled == [("A", "new utterance")]


def test_a_cancel_between_marking_the_turn_current_and_the_runner_read_is_not_lost():
    """The window the issue found: the turn is current, the runner has not read its
    generation yet, a cancel lands. Driven deterministically through make_request, which runs
    exactly there."""
    h = Harness(["one two three four five."])
    sched = h.scheduler

    def make_request(turn_id, text, knobs):
        assert sched.current_turn == turn_id
        assert sched.cancel("teleop mute") == turn_id
        return TurnRequest(turn_id, text, NO_THINK, "none")

    sched._make_request = make_request
    sched.start()
    done = sched.submit("t1", "talk", NO_THINK, RecordingSink())
    sched.run_pending()
    result = done.result(timeout=0)
    assert result.cancelled and result.spoken_text == "" and result.completion_tokens == 0
    assert h.cancelled == [("t1", "teleop mute")]


def test_a_cancel_while_queued_drops_the_turn_and_later_turns_still_run():
    h = Harness(["Later answer."])
    sched = h.scheduler
    sched.start()
    muted = sched.submit("t1", "talk", NO_THINK, RecordingSink())
    assert sched.cancel("teleop mute") == ""  # nothing in progress, but t1 is now stale
    sched.run_pending()
    assert muted.result(timeout=0).cancelled and h.engine.prompts == []
    later = sched.submit("t2", "again", NO_THINK, RecordingSink())
    sched.run_pending()
    assert later.result(timeout=0).spoken_text == "Later answer."


def test_a_failed_turn_ends_clearly_with_the_apology_and_is_counted():
    h = Harness(["unused."])
    failures: list[tuple[str, str]] = []
    sched = TurnScheduler(
        h.runner,
        lambda *a: (_ for _ in ()).throw(RuntimeError("llama_decode returned -1")),
        on_failure=lambda kind, message: failures.append((kind, message)),
        failure_reply="Sorry, I lost my train of thought.",
    )
    sink = RecordingSink()
    sched.start()
    done = sched.submit("t1", "hi", NO_THINK, sink)
    sched.run_pending()
    with pytest.raises(RuntimeError, match="llama_decode"):
        done.result(timeout=0)
    assert sink.events == [("sentence", 0, "Sorry, I lost my train of thought."), ("end", 1)]
    assert turn_outcome(sink.results[0]) == "failed: llama_decode returned -1"
    assert failures and failures[0][0] == "turn" and "llama_decode" in failures[0][1]
    assert sched.current_turn == ""


def test_a_new_turn_cancels_the_one_in_progress():
    h = Harness(["one two three four five six seven eight.", "Fine."])
    sched = h.scheduler
    later: list = []

    def on_token(n: int) -> None:  # the user speaks again while t1 is decoding
        if n == 2 and not later:
            assert sched.current_turn == "t1"
            later.append(sched.submit("t2", "stop that", NO_THINK, RecordingSink()))

    h.engine.on_token = on_token
    sched.start()
    first = sched.submit("t1", "count", NO_THINK, RecordingSink())
    sched.run_pending()
    assert h.cancelled == [("t1", "new utterance")]
    assert first.result().cancelled
    assert later[0].result().spoken_text == "Fine." and not later[0].result().cancelled


def test_a_turn_is_either_cancelled_or_ended_never_both():
    """A cancel while the last sentence goes out (decoding over, end marker not yet sent) stops
    the turn: no end marker, a cancelled result. A cancel after the end stops nothing and says
    so: the canceller is never told a turn was cancelled whose end marker is out."""
    h = Harness(["Here is the whole story.", "Short.", "Third."])
    sched = h.scheduler
    answers: list[str] = []

    class CancelAtLastSentence(RecordingSink):
        def on_sentence(self, turn_id, seq, text):
            super().on_sentence(turn_id, seq, text)
            answers.append(sched.cancel("llm/cancel"))

    class CancelAfterEnd(RecordingSink):
        def on_turn_end(self, turn_id, seq, result):
            super().on_turn_end(turn_id, seq, result)
            answers.append(sched.cancel("llm/cancel"))

    sched.start()
    late, after = CancelAtLastSentence(), CancelAfterEnd()
    first = sched.submit("t1", "a story", NO_THINK, late)
    sched.run_pending()
    assert answers == ["t1"] and h.cancelled == [("t1", "llm/cancel")]
    assert first.result().cancelled
    assert late.results[0].cancelled  # the turn's end says so: no end marker goes out
    second = sched.submit("t2", "again", NO_THINK, after)
    sched.run_pending()
    assert answers == ["t1", ""] and not second.result().cancelled  # over before the cancel
    assert not after.results[0].cancelled and len(h.cancelled) == 1
    third = sched.submit("t3", "once more", NO_THINK, RecordingSink())  # a new generation's
    sched.run_pending()  # job is not taken as ended by the last one's finish
    assert third.result().spoken_text == "Third."


def test_inactive_scheduler_refuses_new_and_queued_turns():
    h = Harness(["never said."])
    refused = h.scheduler.submit("t0", "hi", NO_THINK, RecordingSink())
    with pytest.raises(NotActiveError):
        refused.result(timeout=0)
    h.scheduler.start()
    queued = h.scheduler.submit("t1", "hi", NO_THINK, RecordingSink())
    h.scheduler.stop()  # deactivation: the queued turn is refused, not run
    h.scheduler.run_pending()
    with pytest.raises(NotActiveError):
        queued.result(timeout=0)
    assert h.engine.prompts == []


def test_prewarm_is_skipped_when_a_newer_job_waits_and_while_a_turn_runs():
    h = Harness(["Answer."])
    sched = h.scheduler
    sched.start()
    sched.prewarm("u1", "what is")
    sched.submit("u1", "what is that", NO_THINK, RecordingSink())
    sched.run_pending()
    # the scripted engine has no cache: a prewarm that ran would still start no session, so
    # the evidence is the single prompt of the turn itself
    assert len(h.engine.prompts) == 1 and h.engine.prompts[0].count("what is that") == 1
    seen: list[bool] = []
    h.engine._scripts.append("Another.")
    h.engine.on_token = lambda n: seen.append(sched.current_turn == "u2")
    sched.submit("u2", "more", NO_THINK, RecordingSink())
    sched.prewarm("u3", "ignored")  # queued behind a turn that has not started: allowed
    sched.run_pending()
    assert seen and all(seen)


def test_a_prewarm_says_when_it_is_over_whether_it_ran_was_skipped_failed_or_stopped():
    """llm_node's start-up prefill: the stack waits on this event before the first user turn."""
    h = Harness(["Answer."])
    sched = h.scheduler
    assert sched.prewarm("startup", "") is None  # not started: nothing queued, nothing to wait
    sched.start()
    ran = sched.prewarm("startup", "")
    assert ran is not None and not ran.is_set()
    calls: list[str] = []
    real = h.runner.prewarm
    h.runner.prewarm = lambda request: calls.append(request.turn_id) or real(request)
    sched.run_pending()
    assert ran.is_set() and calls == ["startup"]
    skipped = sched.prewarm("u1", "what")  # a turn waits behind it: it gives way, and is over
    sched.submit("u1", "what is that", NO_THINK, RecordingSink())
    sched.run_pending()
    assert skipped.is_set() and calls == ["startup"]

    def fail(request):
        raise RuntimeError("no memory")

    h.runner.prewarm = fail
    failed = sched.prewarm("u2", "")
    sched.run_pending()
    assert failed.is_set()
    stopped = sched.prewarm("u3", "")
    sched.stop()  # deactivated before the worker got to it
    sched.run_pending()
    assert stopped.is_set()


def test_interrupted_turn_keeps_only_what_was_said_in_the_history():
    h = Harness(["First sentence here. Second sentence never heard."])
    h.scheduler.start()
    h.scheduler.submit("t1", "talk", NO_THINK, RecordingSink())
    h.scheduler.run_pending()
    h.scheduler.interrupted("t1", "First sentence here.")
    h.scheduler.run_pending()
    said = h.runner.dialogue.turns[-1].steps[-1].content
    assert said == f"First sentence here. {INTERRUPTED_MARKER}"


def test_a_failing_turn_is_reported_and_the_worker_goes_on():
    h = Harness(["Fine."])
    calls = {"n": 0}

    def make_request(turn_id, text, knobs):
        calls["n"] += 1
        if turn_id == "bad":
            raise ValueError("no such tool choice")
        return TurnRequest(turn_id, text, NO_THINK, "none")

    h.scheduler._make_request = make_request
    h.scheduler.start()
    bad = h.scheduler.submit("bad", "x", NO_THINK, RecordingSink())
    h.scheduler.run_pending()
    good = h.scheduler.submit("good", "y", NO_THINK, RecordingSink())
    h.scheduler.run_pending()
    with pytest.raises(ValueError, match="no such tool choice"):
        bad.result(timeout=0)
    assert good.result().spoken_text == "Fine." and calls["n"] == 2


def test_a_reset_cancels_the_turn_in_progress_and_forgets_the_conversation():
    h = Harness(["First answer.", "one two three four five six seven eight.", "Fresh."])
    sched = h.scheduler
    resets: list = []

    def on_token(n: int) -> None:  # a reset (llm/reset) lands while t2 is decoding
        if sched.current_turn == "t2" and not resets:
            resets.append(sched.reset("llm/reset"))

    h.engine.on_token = on_token
    sched.start()
    sched.submit("t1", "hi", NO_THINK, RecordingSink())
    sched.run_pending()
    assert [t.turn_id for t in h.runner.dialogue.turns] == ["t1"]
    second = sched.submit("t2", "count", NO_THINK, RecordingSink())
    sched.run_pending()
    assert second.result().cancelled and h.cancelled == [("t2", "llm/reset")]
    assert resets[0].result(timeout=0) == 2  # t1 and the cut-off t2 forgotten
    assert h.runner.dialogue.turns == [] and h.runner.dialogue.messages()[0]["role"] == "system"
    third = sched.submit("t3", "hello again", NO_THINK, RecordingSink())
    sched.run_pending()
    assert third.result().spoken_text == "Fresh."
    assert [t.turn_id for t in h.runner.dialogue.turns] == ["t3"]
    sched.stop()
    assert sched.reset().result(timeout=0) == 1  # inactive: at once, no worker needed

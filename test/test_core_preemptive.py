"""Preemptive answers and the end-of-turn probe, synchronously (core/llm/held_turn.py and the
scheduler's speculative jobs): the worker runs on this thread, the final transcript or the user's
resumption is injected between two tokens (the scripted engine's hook). No ROS, no sleeps."""

from __future__ import annotations

from bolt_agent.core.llm.chat_template import Knobs
from bolt_agent.core.llm.dialogue import Dialogue
from bolt_agent.core.llm.held_turn import COMMITTED, DISCARDED, HeldTurn
from bolt_agent.core.llm.profile import load_profile
from bolt_agent.core.llm.scripted_engine import ScriptedEngine
from bolt_agent.core.llm.turn_runner import RunnerConfig, TurnRequest, TurnRunner
from bolt_agent.core.llm.turn_scheduler import TurnScheduler
from turn_sinks import RecordingSink

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
    def __init__(self, scripts: list[str], on_token=None, nearest=None):
        profile = load_profile("reachy_mini")
        self.engine = ScriptedEngine(scripts, on_token=on_token)
        config = RunnerConfig(constrained=False, max_steps=2)
        self.dialogue = Dialogue(profile.persona, nearest=nearest)
        self.runner = TurnRunner(self.engine, self.dialogue, profile.registry, config)
        self.hints: list[tuple[str, str, float]] = []
        self.cancelled: list[tuple[str, str]] = []
        self.scheduler = TurnScheduler(
            self.runner,
            lambda turn_id, text, knobs: TurnRequest(turn_id, text, knobs or NO_THINK, "auto"),
            on_cancel=lambda turn_id, why: self.cancelled.append((turn_id, why)),
            on_hint=lambda *hint: self.hints.append(hint),
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
    done = h.scheduler.speculate("u1", "Can you nod for me?", NO_THINK, held, probe=False)
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
    done = h.scheduler.speculate("u1", "I would like to buy", NO_THINK, held, probe=False)
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
    done = h.scheduler.speculate("u1", "I would like", NO_THINK, held, probe=False)
    assert held.discard()
    h.scheduler.run_pending()
    assert h.engine.prompts == [] and done.result(timeout=0).cancelled
    assert sink.events == [("discard",)]  # the gate told the TTS; the end never comes out
    assert h.dialogue.turns == []


def test_a_goal_waits_for_the_decision_and_a_lost_final_discards_the_turn():
    """No final within the hold time (timeout 0 here): the goal is refused, never sent."""
    h = Harness([NOD, "Left unsaid."])
    held, sink = h.held("u1", "Can you nod", timeout_s=0.0)
    done = h.scheduler.speculate("u1", "Can you nod", NO_THINK, held, probe=False)
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
    h.scheduler.speculate("u1", "Can you nod for me?", NO_THINK, held, probe=True)
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
        h.scheduler.speculate(
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
        h.scheduler.speculate("u1", "Can you nod", NO_THINK, first, probe=True)
        if prefilled:
            assert h.scheduler.prewarm("u1", "Can you nod") is not None
        h.scheduler.run_pending()
        assert "Here is my nod." not in h.engine.probes[0][0]  # nothing cached it yet
        # the second pause: the whole request
        held, _sink = h.held("u1", "Can you nod for me?")
        held.commit()
        h.scheduler.speculate("u1", "Can you nod for me?", NO_THINK, held, probe=True)
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
    assert h.scheduler.speculate("u1", "Hi there.", NO_THINK, None, probe=True) is None
    h.scheduler.run_pending()
    assert not first.result(timeout=0).cancelled and h.cancelled == []
    assert h.hints == [("u1", "Hi there.", 0.9)]
    # a probe queued before a cancel is stale: no hint for words that no longer matter
    h.scheduler.speculate("u2", "Old words.", NO_THINK, None, probe=True)
    h.scheduler.cancel("barge-in")
    h.scheduler.run_pending()
    assert [hint[0] for hint in h.hints] == ["u1"]


def test_an_engine_without_probabilities_gives_no_hint():
    h = Harness([])
    h.scheduler.speculate("u1", "Hi there.", NO_THINK, None, probe=True)
    h.scheduler.run_pending()
    assert h.hints == [] and len(h.engine.probes) == 1

"""Semantic end of turn (core/asr/end_of_turn.py and the listener's use of it), synchronously:
a scripted VAD, a transcriber whose text is chosen per call, hints pushed as the LLM node would.
No ROS, no sleeps."""

from __future__ import annotations

import numpy as np
import pytest

from bolt_agent.core.asr.asr_engine import AsrResult
from bolt_agent.core.asr.end_of_turn import EndOfTurn, EndOfTurnSettings, text_looks_complete
from bolt_agent.core.asr.listener import (
    FinalMetrics,
    Listener,
    ListenerSettings,
    TranscriptEvent,
    VoiceActivityEvent,
)
from bolt_agent.core.asr.vad_segmenter import WINDOW, VadConfig, VadSegmenter
from support.listener import ByPosition, block_stamp

SEMANTIC = EndOfTurnSettings(
    "semantic",
    complete_silence_ms=250,
    incomplete_silence_ms=1200,
    threshold=0.05,
    hint_timeout_ms=500,
)
# the VAD's own silence is the longest wait in semantic mode
CAP = VadConfig(min_speech_ms=150, min_silence_ms=1200, speech_pad_ms=64, start_pad_ms=0)


class Words:
    """A transcriber that says ``text`` for every call (the words the user said so far), with
    ``confidence``."""

    def __init__(self, *texts: str, confidence: float = 0.9, last_word: float = 1.0) -> None:
        self.texts = list(texts)
        self.calls = 0
        self.confidence = confidence
        self.last_word = last_word

    def transcribe(self, audio: np.ndarray, final: bool = True) -> AsrResult:
        text = self.texts[min(self.calls, len(self.texts) - 1)]
        self.calls += 1
        return AsrResult(text, self.confidence, "en", 0.0, self.last_word)


def listener(probs, asr, settings=SEMANTIC, config=CAP) -> Listener:
    vad = VadSegmenter(config, ByPosition(probs))
    return Listener(
        asr,
        ListenerSettings(partial_interval_s=0.0, early_final=True, end_of_turn=settings),
        vad,
    )


def run(lis: Listener, blocks: range, on_block=None) -> list[tuple[int, object]]:
    out = []
    for k in blocks:
        if on_block is not None:
            on_block(k, out)
        a = k * WINDOW
        block = np.arange(a, a + WINDOW, dtype=np.float32)
        out += [(k, e) for e in lis.push(block, block_stamp(k))]
    return out


def ends(events) -> list[tuple[int, FinalMetrics]]:
    return [(k, e) for k, e in events if isinstance(e, FinalMetrics)]


def hint_after_early(lis: Listener, p: float):
    """The LLM's answer to each early transcript, one block after it was published."""

    def on_block(k, events):
        for _, e in events:
            if isinstance(e, TranscriptEvent) and e.early and not getattr(e, "_hinted", 0):
                object.__setattr__(e, "_hinted", 1)
                lis.end_of_turn_hint(e.utterance_id, e.text, p)

    return on_block


SPEECH = [0.0] * 4 + [0.9] * 30 + [0.0] * 60  # speech until window 34, then 1.9 s of silence


def test_words_judged_complete_end_the_turn_after_the_short_silence():
    lis = listener(SPEECH, Words("Can you nod for me"))  # no punctuation: only the hint decides
    events = run(lis, range(len(SPEECH)), hint_after_early(lis, 0.4))
    ((k, metrics),) = ends(events)
    assert metrics.ended_by == "hint"
    # silence began at window 34: 250 ms (8 windows) later, not after the 1.2 s cap (38)
    assert 34 + 7 <= k <= 34 + 8
    assert 250 <= metrics.silence_ms < 300
    finals = [e for _, e in events if isinstance(e, TranscriptEvent) and e.is_final]
    specs = [e for _, e in events if isinstance(e, TranscriptEvent) and e.early]
    assert len(finals) == len(specs) == 1
    # the final is the early transcript confirmed: same text, same span
    assert (finals[0].text, finals[0].audio_end_ns) == (specs[0].text, specs[0].audio_end_ns)
    assert lis.vad.in_speech is False


def test_words_judged_incomplete_wait_for_the_longest_silence():
    lis = listener(SPEECH, Words("I would like to buy"))
    events = run(lis, range(len(SPEECH)), hint_after_early(lis, 0.01))
    ((k, metrics),) = ends(events)
    assert metrics.ended_by == "silence" and metrics.silence_ms == 1200
    assert k >= 34 + 37  # the cap: 1.2 s of silence


def test_finished_looking_words_the_model_is_less_sure_of_end_after_the_middle_silence():
    # p between likely_threshold (0.03) and the threshold (0.05), and the text looks finished
    lis = listener(SPEECH, Words("What I really want to know is how old you are."))
    events = run(lis, range(len(SPEECH)), hint_after_early(lis, 0.04))
    ((k, metrics),) = ends(events)
    assert metrics.ended_by == "likely" and 600 <= metrics.silence_ms < 650
    assert 34 + 18 <= k <= 34 + 20  # 600 ms: 19 windows of 32 ms, well before the cap (38)
    # the same score on words that only whisper's punctuation makes look finished: the cap
    for text in ("What I really want to know is.", "I would like to buy a...", "Well, I think"):
        lis = listener(SPEECH, Words(text))
        ((_k, metrics),) = ends(run(lis, range(len(SPEECH)), hint_after_early(lis, 0.04)))
        assert metrics.ended_by == "silence", text
    # below likely_threshold: the cap, however finished the text looks
    lis = listener(SPEECH, Words("I would like to buy."))
    ((_k, metrics),) = ends(run(lis, range(len(SPEECH)), hint_after_early(lis, 0.005)))
    assert metrics.ended_by == "silence"


def test_without_a_hint_the_text_decides_after_the_hint_timeout():
    lis = listener(SPEECH, Words("Can you nod for me?"))
    ((_, metrics),) = ends(run(lis, range(len(SPEECH))))
    assert metrics.ended_by == "text" and 500 <= metrics.silence_ms < 540
    lis = listener(SPEECH, Words("I would like to buy a"))  # whisper's period cannot save it
    ((_k, metrics),) = ends(run(lis, range(len(SPEECH))))
    assert metrics.ended_by == "silence"


def test_words_it_may_have_misheard_wait_longer():
    """Below ``trust_confidence`` a complete hint waits the middle silence (600 ms, not 250),
    and the text alone never ends the turn (the cap does); above it, as before."""
    from dataclasses import replace

    careful = replace(SEMANTIC, trust_confidence=0.6)
    lis = listener(SPEECH, Words("Can you nod for me", confidence=0.4), careful)
    ((_k, metrics),) = ends(run(lis, range(len(SPEECH)), hint_after_early(lis, 0.4)))
    assert metrics.ended_by == "hint" and 600 <= metrics.silence_ms < 650
    lis = listener(SPEECH, Words("Caught you.", confidence=0.4), careful)
    ((_k, metrics),) = ends(run(lis, range(len(SPEECH))))
    assert metrics.ended_by == "silence" and metrics.silence_ms == 1200
    lis = listener(SPEECH, Words("Can you nod for me", confidence=0.8), careful)
    ((_k, metrics),) = ends(run(lis, range(len(SPEECH)), hint_after_early(lis, 0.4)))
    assert metrics.ended_by == "hint" and 250 <= metrics.silence_ms < 300


def test_a_last_word_it_may_have_misheard_leaves_the_end_to_the_cap():
    """Below ``last_word_confidence`` neither a complete hint nor the text ends the turn, however
    sure whisper was of the other words ("… and then" heard as "… and earn."); above it, as
    before; 0 turns the rule off."""
    from dataclasses import replace

    careful = replace(SEMANTIC, last_word_confidence=0.4)
    lis = listener(SPEECH, Words("Please look at me and earn.", last_word=0.27), careful)
    ((_k, metrics),) = ends(run(lis, range(len(SPEECH)), hint_after_early(lis, 0.4)))
    assert metrics.ended_by == "silence" and metrics.silence_ms == 1200
    lis = listener(SPEECH, Words("Please look at me and earn.", last_word=0.27), careful)
    ((_k, metrics),) = ends(run(lis, range(len(SPEECH))))  # no hint: the text would decide
    assert metrics.ended_by == "silence" and metrics.silence_ms == 1200
    lis = listener(SPEECH, Words("Can you nod for me", last_word=0.8), careful)
    ((_k, metrics),) = ends(run(lis, range(len(SPEECH)), hint_after_early(lis, 0.4)))
    assert metrics.ended_by == "hint" and 250 <= metrics.silence_ms < 300
    off = replace(SEMANTIC, last_word_confidence=0.0)
    lis = listener(SPEECH, Words("Please look at me and earn.", last_word=0.27), off)
    ((_k, metrics),) = ends(run(lis, range(len(SPEECH)), hint_after_early(lis, 0.4)))
    assert metrics.ended_by == "hint" and 250 <= metrics.silence_ms < 300


def test_a_hint_about_other_words_or_another_utterance_is_ignored():
    lis = listener(SPEECH, Words("Can you nod for me"))

    def wrong(k, events):
        if k == 37:
            uid = events[0][1].utterance_id
            lis.end_of_turn_hint(uid, "Can you nod", 0.9)  # an older transcript
            lis.end_of_turn_hint("u-other", "Can you nod for me", 0.9)

    ((_k, metrics),) = ends(run(lis, range(len(SPEECH)), wrong))
    assert metrics.ended_by == "silence"


# "I would like to buy" … 0.7 s pause … "a long sword and a shield." then silence
PAUSED = [0.0] * 4 + [0.9] * 30 + [0.0] * 22 + [0.9] * 30 + [0.0] * 60


def test_a_paused_sentence_stays_one_turn_and_the_resume_is_announced():
    words = Words("I would like to buy", "I would like to buy a long sword and a shield.")
    lis = listener(PAUSED, words)
    p_for = {"I would like to buy": 0.01, "I would like to buy a long sword and a shield.": 0.5}

    def hints(k, events):
        for _, e in events:
            if isinstance(e, TranscriptEvent) and e.early and e.text in p_for:
                lis.end_of_turn_hint(e.utterance_id, e.text, p_for.pop(e.text))

    events = run(lis, range(len(PAUSED)), hints)
    voice = [e for _, e in events if isinstance(e, VoiceActivityEvent)]
    assert [(e.speaking, e.resumed) for e in voice] == [(True, False), (True, True), (False, False)]
    assert len({e.utterance_id for e in voice}) == 1
    finals = [e.text for _, e in events if isinstance(e, TranscriptEvent) and e.is_final]
    assert finals == ["I would like to buy a long sword and a shield."]
    ((_k, metrics),) = ends(events)
    assert metrics.ended_by == "hint"

    # the same audio with a fixed 500 ms silence: two turns, the robot answers half a sentence
    fixed = VadConfig(min_speech_ms=150, min_silence_ms=500, speech_pad_ms=64, start_pad_ms=0)
    words = Words("I would like to buy", "a long sword and a shield.")
    lis = listener(PAUSED, words, EndOfTurnSettings("fixed"), fixed)
    finals = [
        e.text
        for _, e in run(lis, range(len(PAUSED)))
        if isinstance(e, TranscriptEvent) and e.is_final
    ]
    assert finals == ["I would like to buy", "a long sword and a shield."]


def test_fixed_mode_never_ends_early():
    lis = listener(SPEECH, Words("Can you nod for me?"), EndOfTurnSettings("fixed"))
    ((k, metrics),) = ends(run(lis, range(len(SPEECH)), hint_after_early(lis, 0.9)))
    assert metrics.ended_by == "silence" and k >= 34 + 37


@pytest.mark.parametrize(
    "text, complete",
    [
        ("Can you nod for me?", True),
        ("I would like to buy a long sword and a shield.", True),
        ("Thank you!", True),
        ("I would like to buy", False),
        ("I would like to buy...", False),
        ("So yesterday I went to the market and", False),
        ("Could you turn your head towards the", False),
        ("I want to buy a.", False),
        ("What I really want to know is.", False),
        ("I need something to protect me from.", False),
        # an auxiliary after its subject can close a sentence (embedded question, elided verb)
        ("What I really want to know is how old you are.", True),
        ("Yes, I can.", True),
        ("I was wondering if you could.", True),  # (the model scores this one low: 0.002)
        ("Well,", False),
        ("", False),
    ],
)
def test_text_alone(text, complete):
    assert text_looks_complete(text) is complete


def test_decisions_and_settings():
    eot = EndOfTurn(SEMANTIC)
    eot.start("u1")
    assert eot.should_end("Hello.", 100) is None  # shorter than complete_silence_ms
    assert eot.should_end("Hello.", 300) is None  # no hint yet, within hint_timeout_ms
    assert eot.hint("u1", "Hello.", 0.3) and not eot.hint("u2", "Hello.", 0.3)
    assert not eot.hint("u1", "Hello.", float("nan"))
    decision = eot.should_end("Hello.", 300)
    assert decision is not None and (decision.source, decision.p_complete) == ("hint", 0.3)
    assert eot.should_end(None, 1000) is None  # no transcript yet: the VAD's cap decides
    eot.start("u2")  # a new utterance forgets the hints
    assert eot.judge("Hello.", 300) is None
    with pytest.raises(ValueError, match="mode"):
        EndOfTurnSettings("smart")
    with pytest.raises(ValueError, match="complete_silence_ms"):
        EndOfTurnSettings("semantic", complete_silence_ms=900, incomplete_silence_ms=800)
    with pytest.raises(ValueError, match="likely_silence_ms"):
        EndOfTurnSettings("semantic", likely_silence_ms=1500)
    with pytest.raises(ValueError, match="likely_silence_ms"):
        EndOfTurnSettings("semantic", complete_silence_ms=300, likely_silence_ms=200)
    with pytest.raises(ValueError, match="likely_threshold"):
        EndOfTurnSettings("semantic", threshold=0.05, likely_threshold=0.1)
    # the middle band: complete after likely_silence_ms, not before
    eot = EndOfTurn(SEMANTIC)
    eot.start("u3")
    eot.hint("u3", "Yes, I can.", 0.04)
    assert eot.should_end("Yes, I can.", 300) is None
    decision = eot.should_end("Yes, I can.", 600)
    assert decision is not None and (decision.source, decision.silence_ms) == ("likely", 600)
    eot.hint("u3", "Can you nod for me", 0.04)  # no final punctuation: incomplete
    assert eot.should_end("Can you nod for me", 1100) is None


def test_the_calibration_benchmark_applies_the_listeners_rule():
    from bolt_agent.benchmarks.end_of_turn_calibration import ended_after, sweep

    rows = [
        {"heard": "Could you look at the door?", "p_complete": 0.2, "complete": True},
        {"heard": "What I really want to know is how old you are.", "p_complete": 0.04,
         "complete": True},
        {"heard": "Could you look at the", "p_complete": 0.3, "complete": False},  # ends open
        {"heard": "I would like to buy.", "p_complete": 0.0003, "complete": False},
        {"heard": "Can you show me how?", "p_complete": 0.035, "complete": False},
        {"heard": "Can you guess how old?", "p_complete": 0.02, "complete": False},
    ]  # fmt: skip
    assert [ended_after(r["heard"], r["p_complete"], SEMANTIC) for r in rows] == [
        250, 600, None, None, 600, None,
    ]  # fmt: skip
    (row,) = sweep(rows, (0.05,))
    assert row["finished_ended_early"] == row["finished_ended_likely"] == 0.5
    assert (row["unfinished_ended"], row["unfinished_ended_likely"]) == (0.0, 1 / 4)
    (row,) = sweep(rows, (0.05,), likely_threshold=0.05)  # no middle band
    assert row["finished_ended_likely"] == row["unfinished_ended_likely"] == 0.0

"""The TTS stage's turn and stop bookkeeping (core.tts.speaker), driven synchronously: a fake
synthesiser, a fake sink whose progress the test sets, no threads, no ROS."""

from __future__ import annotations

import numpy as np
import pytest

from bolt_agent.core.audio.playback import StopReport
from bolt_agent.core.tts.speaker import (
    CUT_HELD,
    MAX_TURNS,
    NO_OUTPUT,
    NOT_ACTIVE,
    Discarded,
    Dropped,
    Failed,
    FirstAudio,
    Speaker,
    SpeechState,
    StopInfo,
    Stopped,
)

SAMPLES_PER_WORD = 1000


class FakeSynth:
    """SAMPLES_PER_WORD samples per word; raises for the sentences in ``fail``."""

    def __init__(self, fail: tuple[str, ...] = ()) -> None:
        self.texts: list[str] = []
        self.fail = fail
        self.during = None  # called while synthesising (a concurrent stop)

    def __call__(self, text: str) -> np.ndarray:
        self.texts.append(text)
        if self.during is not None:
            self.during(text)
        if text in self.fail:
            raise RuntimeError("boom")
        return np.full(SAMPLES_PER_WORD * len(text.split()), 7, dtype=np.int16)


class FakeSink:
    """Records writes; the test says how far each segment has played."""

    def __init__(self, is_open: bool = True) -> None:
        self.is_open = is_open
        self.writes: list = []  # tags (Sentence jobs) in write order
        self.audio: list[np.ndarray] = []
        self.progresses: dict = {}
        self.forgotten: list = []
        self.dropped: list = []  # taken out unstarted (drop)
        self.kept: list = []  # left queued by the last stop
        self.stops = 0

    def write(self, tag, audio) -> None:
        self.writes.append(tag)
        self.audio.append(audio)
        self.progresses[tag] = (0, len(audio))

    def progress(self, tag) -> tuple[int, int]:
        return self.progresses.get(tag, (0, 0))

    def forget(self, tag) -> None:
        self.forgotten.append(tag)
        self.progresses.pop(tag, None)

    def drop(self, tags) -> bool:
        """As the real queue: segments not started leave it, all or none."""
        if any(self.progresses.get(tag, (1, 1))[0] for tag in tags):
            return False
        for tag in tags:
            self.progresses.pop(tag)
            self.dropped.append(tag)
        return True

    def stop(self, keep=None) -> StopReport:
        self.stops += 1
        # as the real queue: asked of every queued segment in order (started or not)
        queued = [t for t in self.writes if t in self.progresses and not self._finished(t)]
        asked = [t for t in queued if keep is not None and keep(t, self.progresses[t][0] > 0)]
        self.kept = [t for t in asked if self.progresses[t][0] == 0]
        return StopReport(stop_s=0.002, last_audio_s=0.001, dropped_tags=1)

    def _finished(self, tag) -> bool:
        played, total = self.progresses[tag]
        return total > 0 and played >= total

    # --- the test's side: the device clock --------------------------------------------------
    def play_words(self, tag, words: float) -> None:
        self.progresses[tag] = (int(words * SAMPLES_PER_WORD), self.progresses[tag][1])

    def finish(self, tag):
        """The segment played to its end: what ``on_done`` reports."""
        total = self.progresses[tag][1]
        self.progresses[tag] = (total, total)
        return tag


def make(is_open: bool = True, fail: tuple[str, ...] = (), start: bool = True, **kwargs):
    events: list = []
    synth, sink = FakeSynth(fail), FakeSink(is_open)
    speaker = Speaker(synth, emit=events.append, **kwargs)
    if start:
        speaker.start(sink)
    return speaker, synth, sink, events


def of_type(events: list, cls: type) -> list:
    return [e for e in events if isinstance(e, cls)]


def test_a_turn_is_synthesised_in_order_and_its_state_follows_playback():
    speaker, synth, sink, events = make()
    assert events == [SpeechState()]  # start reports the idle state
    turn = speaker.say("t1", "Hello there. How are you today?", False)
    assert speaker.say("t1", "Fine thanks.", True) is turn  # same open turn
    assert turn.outstanding == 3 and events == [SpeechState()]

    assert [speaker.synthesize_next() for _ in range(4)] == [True, True, True, False]
    assert synth.texts == ["Hello there.", "How are you today?", "Fine thanks."]
    assert [s.text for s in sink.writes] == synth.texts
    assert [len(a) for a in sink.audio] == [2000, 4000, 2000]
    assert all(s.turn is turn and s.gen == 0 for s in sink.writes)
    assert events[1:] == [FirstAudio("t1"), SpeechState("t1", True, "", False)]

    first, second, third = sink.writes
    del events[:]
    assert speaker.played(sink.finish(first)) is False
    assert turn.spoken == ["Hello there."]
    assert speaker.played(sink.finish(second)) is False
    assert not turn.done.is_set()
    assert speaker.played(sink.finish(third)) is True  # the turn is over: release memory
    assert events == [
        SpeechState("t1", True, "Hello there.", False),
        SpeechState("t1", True, "Hello there. How are you today?", False),
        SpeechState("t1", False, "Hello there. How are you today? Fine thanks.", False),
    ]
    assert turn.done.is_set() and not turn.interrupted and turn.outstanding == 0
    assert sink.forgotten == [first, second, third] and sink.stops == 0
    assert speaker.played(third) is False  # a repeated report changes nothing
    assert turn.spoken_text == "Hello there. How are you today? Fine thanks."


def test_a_turn_not_yet_complete_is_not_finished_when_its_sentences_have_played():
    speaker, _, sink, events = make()
    turn = speaker.say("t1", "Part one.", False)
    speaker.synthesize_next()
    assert speaker.played(sink.finish(sink.writes[0])) is False  # more may come
    assert events[-1] == SpeechState("t1", False, "Part one.", False)
    assert not turn.done.is_set()
    assert speaker.say("t1", "Part two.", True) is turn
    speaker.synthesize_next()
    assert speaker.played(sink.finish(sink.writes[1])) is True
    assert turn.done.is_set() and turn.spoken == ["Part one.", "Part two."]


def test_a_stop_mid_sentence_reports_whole_sentences_then_the_cut_prefix():
    speaker, synth, sink, events = make()
    text = "One two three. Four five six seven eight. Nine ten."
    turn = speaker.say("t1", text, True)
    speaker.synthesize_next()
    speaker.synthesize_next()  # "Nine ten." stays queued
    first, second = sink.writes
    sink.finish(first)  # played to its end, its on_done not handled yet
    sink.play_words(second, 2.5)  # "Four five" heard, "six" half way
    del events[:]

    info = speaker.stop("", reason="barge-in")

    assert info == StopInfo("t1", "barge-in", "One two three. Four five", 2.0, 1.0)
    assert info.as_dict() == {
        "turn_id": "t1",
        "reason": "barge-in",
        "spoken": "One two three. Four five",
        "stop_ms": 2.0,
        "last_audio_ms": 1.0,
    }
    assert events == [
        SpeechState("t1", False, "One two three. Four five", True),
        Stopped(info),
    ]
    assert turn.interrupted and turn.done.is_set() and turn.outstanding == 0
    assert sink.stops == 1 and sink.forgotten == [first, second]
    assert speaker.generation == 1
    assert speaker.synthesize_next() is False  # the queued sentence was dropped
    assert synth.texts == ["One two three.", "Four five six seven eight."]
    assert speaker.played(first) is False  # the late on_done of a stopped sentence
    assert turn.spoken == ["One two three.", "Four five"]
    assert speaker.stop("") is None  # nothing left to stop
    assert sink.stops == 1


def test_a_stop_before_any_word_reports_nothing_spoken_and_no_output_timing():
    speaker, _, sink, events = make()
    speaker.say("t1", "Hello there.", True)
    speaker.synthesize_next()
    sink.is_open = False  # the device went away: no stop report from it
    info = speaker.stop("t1")
    assert info == StopInfo("t1", "stop request", "", None, None)
    assert info.as_dict() == {"turn_id": "t1", "reason": "stop request", "spoken": ""}
    assert sink.stops == 0 and events[-2] == SpeechState("t1", False, "", True)


def test_sentences_queued_before_a_stop_are_never_synthesised():
    speaker, synth, sink, _ = make()
    old = speaker.say("t1", "First one. Second one. Third one.", True)
    speaker.synthesize_next()
    speaker.stop("")
    new = speaker.say("t2", "New words.", True)
    while speaker.synthesize_next():
        pass
    assert synth.texts == ["First one.", "New words."]
    assert [(s.turn.turn_id, s.text, s.gen) for s in sink.writes] == [
        ("t1", "First one.", 0),
        ("t2", "New words.", 1),
    ]
    assert old.interrupted and not new.interrupted and new.outstanding == 1


def test_a_sentence_being_synthesised_during_a_stop_is_not_played():
    speaker, synth, sink, events = make()
    turn = speaker.say("t1", "First one. Second one.", True)
    speaker.synthesize_next()
    synth.during = lambda text: speaker.stop("") if text == "Second one." else None
    assert speaker.synthesize_next() is True
    assert synth.texts == ["First one.", "Second one."]
    assert [s.text for s in sink.writes] == ["First one."]  # the stale audio went nowhere
    assert turn.interrupted and turn.outstanding == 0
    assert len(of_type(events, Stopped)) == 1 and of_type(events, Failed) == []


def test_stopping_a_turn_id_that_is_not_current():
    speaker, _, sink, events = make()
    t1 = speaker.say("t1", "Playing now.", True)
    speaker.synthesize_next()
    n = len(events)

    assert speaker.stop("unknown") is None  # not current, not known: nothing happens
    assert events[n:] == [] and sink.stops == 0 and speaker.generation == 0
    assert not t1.interrupted and t1.outstanding == 1

    t2 = speaker.say("t2", "Waiting here.", True)  # queued behind t1, not playing yet
    info = speaker.stop("t2", reason="action cancelled")
    assert info is not None and info.turn_id == "t2" and info.spoken == ""
    assert t2.interrupted and t2.done.is_set()
    # only t2 stops: t1 plays on, the sink untouched, and its state stays the last one out
    assert not t1.interrupted and t1.outstanding == 1 and sink.stops == 0
    assert of_type(events[n:], SpeechState) == [
        SpeechState("t2", False, "", True),
        SpeechState("t1", True, "", False),
    ]
    assert of_type(events[n:], Stopped)[0].info == StopInfo("t2", "action cancelled", "")
    assert speaker.synthesize_next() is False  # t2's sentence left the queue
    assert speaker.played(sink.finish(sink.writes[-1])) and t1.spoken == ["Playing now."]
    assert not t1.interrupted and t1.done.is_set()

    speaker.say("t3", "Another turn.", True)
    speaker.synthesize_next()
    speaker.played(sink.finish(sink.writes[-1]))
    speaker.say("t4", "Still going.", True)
    speaker.synthesize_next()
    assert speaker.stop("t3") is None  # finished and no longer current
    assert speaker.stop("t1") is None  # finished already
    assert speaker.turn("t4").outstanding == 1 and not speaker.turn("t4").interrupted


def test_stopping_the_playing_turn_lets_the_turns_queued_behind_it_play():
    """A cancelled Speak goal ends its own speech: the next client's turn, queued behind it
    (including the sentence being synthesised when the stop came), still plays whole."""
    speaker, synth, sink, events = make()
    t1 = speaker.say("t1", "First turn here. Second part.", True)
    speaker.synthesize_next()
    sink.play_words(sink.writes[0], 1)
    t2 = speaker.say("t2", "Next client. Its end.", True)
    speaker.synthesize_next()  # t1's second sentence, written behind the first
    stops = []
    synth.during = lambda text: stops.append(speaker.stop("t1", reason="action cancelled"))
    speaker.synthesize_next()  # t2's first sentence: the stop comes while it is synthesised
    assert stops[0] == StopInfo("t1", "action cancelled", "First", 2.0, 1.0)
    assert t1.interrupted and t1.done.is_set() and t1.spoken == ["First"]
    assert sink.stops == 1 and not t2.interrupted
    assert sink.writes[-1].turn is t2 and sink.writes[-1].text == "Next client."
    synth.during = None
    while speaker.synthesize_next():
        pass
    for tag in [w for w in sink.writes if w.turn is t2]:
        speaker.played(sink.finish(tag))
    assert t2.spoken == ["Next client.", "Its end."] and t2.done.is_set()
    assert not t2.interrupted
    assert of_type(events, SpeechState)[-1] == SpeechState("t2", False, t2.spoken_text, False)


def test_a_waiting_turn_stopped_while_its_sentence_is_synthesised_is_never_played():
    speaker, synth, sink, events = make()
    t1 = speaker.say("t1", "Playing now.", True)
    speaker.synthesize_next()
    t2 = speaker.say("t2", "Waiting here.", True)
    synth.during = lambda text: speaker.stop("t2")
    speaker.synthesize_next()
    assert t2.interrupted and t2.done.is_set() and t2.outstanding == 0
    assert [w.turn for w in sink.writes] == [t1] and sink.stops == 0
    assert [e.info.turn_id for e in of_type(events, Stopped)] == ["t2"]
    assert speaker.played(sink.finish(sink.writes[0])) and not t1.interrupted


def test_interrupting_say_stops_the_current_turn_then_speaks():
    speaker, synth, sink, events = make()
    t1 = speaker.say("t1", "A long sentence here. And more.", True)
    speaker.synthesize_next()
    sink.play_words(sink.writes[0], 2)
    teleop = speaker.say("teleop-1", "Stop right there.", True, interrupt=True)
    assert t1.interrupted and t1.spoken == ["A long"]
    assert [e.info.reason for e in of_type(events, Stopped)] == ["stop request"]
    while speaker.synthesize_next():
        pass
    assert synth.texts == ["A long sentence here.", "Stop right there."]
    assert sink.writes[-1].turn is teleop and sink.writes[-1].gen == 1
    assert events[-2:] == [FirstAudio("teleop-1"), SpeechState("teleop-1", True, "", False)]


def test_a_failed_sentence_is_reported_and_the_turn_still_finishes():
    speaker, synth, sink, events = make(fail=("Bad one.",))
    turn = speaker.say("t1", "Good one. Bad one.", True)
    speaker.synthesize_next()
    assert speaker.played(sink.finish(sink.writes[0])) is False
    assert events[-1] == SpeechState("t1", True, "Good one.", False)
    assert speaker.synthesize_next() is True
    assert synth.texts == ["Good one.", "Bad one."]
    assert events[-2:] == [
        Failed("t1", "Bad one.", "RuntimeError('boom')"),
        SpeechState("t1", False, "Good one.", False),
    ]
    assert len(sink.writes) == 1
    assert turn.done.is_set() and not turn.interrupted and turn.spoken == ["Good one."]
    speaker.say("t2", "Next turn.", True)  # the synthesis loop goes on
    assert speaker.synthesize_next() is True and sink.writes[-1].text == "Next turn."


def test_saying_while_not_active_is_refused():
    speaker, synth, sink, events = make(start=False)
    turn = speaker.say("t1", "Hello there.", True)
    assert turn.interrupted and turn.done.is_set() and turn.outstanding == 0
    assert events == [Dropped("t1", "Hello there.", NOT_ACTIVE)]
    assert speaker.synthesize_next() is False and synth.texts == [] and sink.writes == []

    speaker.start(sink)
    speaker.say("t2", "Playing now.", True)
    speaker.synthesize_next()
    del events[:]
    speaker.shutdown()
    assert not speaker.active
    assert of_type(events, Stopped)[0].info.turn_id == "t2"
    assert speaker.synthesize_next(timeout=None) is False  # the synthesis thread ends
    later = speaker.say("t3", "Too late.", True)
    assert later.interrupted and events[-1] == Dropped("t3", "Too late.", NOT_ACTIVE)


def test_sentences_without_an_open_output_are_dropped_and_the_turn_finishes():
    speaker, synth, sink, events = make(is_open=False)
    turn = speaker.say("t1", "Nobody hears this.", True)
    assert speaker.synthesize_next() is True
    assert synth.texts == ["Nobody hears this."] and sink.writes == []
    assert events[-2:] == [
        Dropped("t1", "Nobody hears this.", NO_OUTPUT),
        SpeechState("t1", False, "", False),
    ]
    assert turn.done.is_set() and not turn.interrupted
    assert of_type(events, FirstAudio) == []


def test_first_audio_is_reported_once_per_turn():
    speaker, _, sink, events = make()
    speaker.say("t1", "One. Two.", True)
    speaker.say("t2", "Three. Four.", True)
    while speaker.synthesize_next():
        pass
    for tag in list(sink.writes):
        speaker.played(sink.finish(tag))
    assert speaker.turn("t1").done.is_set()
    speaker.say("t1", "Again.", True)  # t1 was done: a new turn under the same id
    speaker.synthesize_next()
    assert of_type(events, FirstAudio) == [FirstAudio("t1"), FirstAudio("t2"), FirstAudio("t1")]


@pytest.mark.parametrize("extra", [1, 3])
def test_only_the_latest_turns_are_kept(extra):
    speaker, _, _, _ = make()
    for i in range(MAX_TURNS + extra):
        speaker.say(f"t{i}", "Hi.", False)
    assert MAX_TURNS == 64
    assert [speaker.turn(f"t{i}") for i in range(extra)] == [None] * extra
    assert speaker.turn(f"t{extra}") is not None
    assert speaker.turn(f"t{MAX_TURNS + extra - 1}").outstanding == 1


def test_a_late_stop_for_a_turn_already_cut_off_does_not_stop_the_newer_one():
    """llm_node sends tts/stop(<its turn>) when an operator's say cancels that turn; the say has
    already cut it off (interrupt), so the late stop must leave the say alone."""
    speaker, synth, sink, events = make()
    llm = speaker.say("teleop-1", "A long sentence here. And more.", True)
    speaker.synthesize_next()
    sink.play_words(sink.writes[0], 2)
    say = speaker.say("teleop-say-1", "Hello, I am being driven by a human now.", True, True)
    assert llm.interrupted and not say.done.is_set()
    assert speaker.stop("teleop-1", reason="llm cancel") is None  # nothing of it is left
    assert not say.interrupted and [e.info.reason for e in of_type(events, Stopped)] == [
        "stop request"
    ]
    while speaker.synthesize_next():
        pass
    assert synth.texts[-1] == "Hello, I am being driven by a human now."


# --- held turns (a preemptive answer) ----------------------------------------------------------
def test_a_held_turn_is_synthesised_at_once_and_played_only_when_released():
    speaker, synth, sink, events = make()
    speaker.say("t1", "Hello there. I can nod.", False, held=True)
    assert speaker.synthesize_next() and speaker.synthesize_next()
    assert synth.texts == ["Hello there.", "I can nod."]  # the work is done ahead
    assert sink.writes == [] and of_type(events, FirstAudio) == []
    # never "speaking" while held: the echo gate must not close the mic on a user who goes on
    assert all(not s.speaking for s in of_type(events, SpeechState))
    speaker.say("t1", "", False)  # the release: the same turn, not held
    assert [w.text for w in sink.writes] == ["Hello there.", "I can nod."]
    assert of_type(events, FirstAudio) == [FirstAudio("t1")]
    assert of_type(events, SpeechState)[-1] == SpeechState("t1", True, "", False)
    speaker.say("t1", "Bye.", True)  # later sentences of the released turn play as usual
    speaker.synthesize_next()
    assert [w.text for w in sink.writes][-1] == "Bye."
    for tag in list(sink.writes):
        speaker.played(sink.finish(tag))
    assert speaker.turn("t1").done.is_set()
    assert speaker.turn("t1").spoken_text == "Hello there. I can nod. Bye."


def test_a_discarded_held_turn_is_never_heard_nor_reported_as_interrupted():
    speaker, _, sink, events = make()
    speaker.say("t1", "Hello there. I can nod.", False, held=True)
    speaker.synthesize_next()  # one synthesised, one still queued
    assert speaker.discard("t1")  # llm_node's discard (speech/say, behind the held sentences)
    assert speaker.synthesize_next() is False  # nothing left to synthesise
    assert not speaker.discard("t1")  # nothing held any more
    assert sink.writes == [] and sink.stops == 0
    assert of_type(events, Stopped) == []
    assert [s for s in of_type(events, SpeechState) if s.turn_id == "t1" and s.interrupted] == []
    assert of_type(events, Discarded) == [Discarded("t1", 2)]
    # the user pauses again: a new preemptive answer of the same utterance, released this time
    speaker.say("t1", "Sure.", False, held=True)
    speaker.synthesize_next()
    assert sink.writes == []
    speaker.say("t1", "", False)
    assert [w.text for w in sink.writes] == ["Sure."]


def test_a_held_turn_discarded_while_its_sentence_is_synthesised_keeps_nothing_of_it():
    speaker, synth, sink, events = make()
    turn = speaker.say("t1", "Hello there.", False, held=True)
    synth.during = lambda text: speaker.discard("t1")
    assert speaker.synthesize_next() is True
    assert turn.held_audio == [] and turn.done.is_set()  # the audio went nowhere
    assert of_type(events, Discarded) == [Discarded("t1", 1)]
    synth.during = None
    speaker.say("t1", "Sure.", False, held=True)  # the next preemptive answer of the utterance
    speaker.synthesize_next()
    speaker.say("t1", "", True)
    assert [w.text for w in sink.writes] == ["Sure."]


def test_tts_stop_naming_a_held_turn_discards_it_and_a_release_of_nothing_is_refused():
    speaker, _, sink, events = make()
    assert not speaker.release("t1") and not speaker.discard("t1")  # no such held turn
    speaker.say("t1", "Hello.", True, held=True)
    assert speaker.stop("t1") is None  # nothing was heard: no stop info
    assert speaker.synthesize_next() is False and sink.writes == []
    assert of_type(events, Discarded) == [Discarded("t1", 1)]


def test_a_held_turn_never_released_is_discarded_after_max_hold_s():
    now = [0.0]
    speaker, _, sink, events = make(max_hold_s=10.0, clock=lambda: now[0])
    speaker.say("t1", "Lost release.", True, held=True)
    speaker.synthesize_next()
    now[0] = 11.0
    speaker.say("t2", "Next turn.", True)  # any later say drops what waited too long
    assert of_type(events, Discarded) == [Discarded("t1", 1)]
    speaker.synthesize_next()
    assert [w.text for w in sink.writes] == ["Next turn."]


def test_a_barge_in_stop_discards_a_held_turn_and_interrupts_the_playing_one():
    speaker, _, sink, events = make()
    speaker.say("t1", "One two three four.", True)
    speaker.synthesize_next()
    speaker.say("t2", "Held answer.", True, held=True)
    speaker.synthesize_next()
    sink.play_words(sink.writes[0], 2)
    info = speaker.stop("", reason="barge-in")
    assert info is not None and info.turn_id == "t1" and info.spoken == "One two"
    assert of_type(events, Discarded) == [Discarded("t2", 1)]
    assert [w.text for w in sink.writes] == ["One two three four."]


def test_a_turn_with_nothing_to_say_does_not_tell_the_asr_the_robot_fell_silent():
    """A tool-only turn's end while the previous answer still plays: its own idle state, then
    the playing turn's again (the ASR keeps the latest state for its echo gate)."""
    speaker, _, sink, events = make()
    speaker.say("t1", "One long sentence here. And a second one.", False)
    speaker.synthesize_next()
    speaker.synthesize_next()
    speaker.say("t2", "", True)
    states = of_type(events, SpeechState)
    assert states[-2:] == [SpeechState("t2", False, "", False), SpeechState("t1", True, "", False)]
    for tag in list(sink.writes):
        speaker.played(sink.finish(tag))
    speaker.say("t1", "", True)
    assert of_type(events, SpeechState)[-1] == SpeechState(
        "t1", False, "One long sentence here. And a second one.", False
    )


def test_a_stop_naming_another_turn_leaves_a_held_turn_held_and_whole():
    """A cancelled Speak goal (tts/stop for its turn) while a preemptive answer waits: the held
    turn is neither interrupted nor emptied; released, it plays from its start."""
    speaker, _, sink, events = make()
    speaker.say("speak-1", "Operator line one.", True)
    speaker.synthesize_next()
    speaker.say("u7", "Sure, I can nod. Here it comes.", False, held=True)
    speaker.synthesize_next()  # one held sentence synthesised, one still queued
    info = speaker.stop("speak-1", reason="action cancelled")
    assert info is not None and info.turn_id == "speak-1"
    held = speaker.turn("u7")
    assert held is not None and held.held and not held.interrupted
    assert of_type(events, Discarded) == []
    assert speaker.synthesize_next()  # the queued held sentence survives the stop
    speaker.say("u7", "", False, seq=0)  # the release
    speaker.say("u7", "Done.", True, seq=2)
    speaker.synthesize_next()
    said = [w.text for w in sink.writes]
    assert said == ["Operator line one.", "Sure, I can nod.", "Here it comes.", "Done."]
    for tag in list(sink.writes)[1:]:  # (speak-1 was stopped)
        speaker.played(sink.finish(tag))
    assert speaker.turn("u7").done.is_set()
    assert speaker.turn("u7").spoken_text == "Sure, I can nod. Here it comes. Done."


def test_the_rest_of_a_held_turn_that_a_stop_discarded_here_is_dropped_not_half_played():
    """An interrupting say (a Speak goal with interrupt) discards the held answer; llm_node does
    not know and releases it: the release and the rest are dropped (counted), and a new answer
    under the same id (seq 0, with text) plays."""
    speaker, _, sink, events = make()
    speaker.say("u8", "Yes, I can.", False, held=True, seq=0)
    speaker.synthesize_next()
    speaker.say("speak-2", "Operator says hi.", True, interrupt=True)
    assert of_type(events, Discarded) == [Discarded("u8", 1)]
    speaker.say("u8", "", False, seq=0)  # llm_node's release
    speaker.say("u8", "Watch me nod.", False, seq=1)
    speaker.say("u8", "", True, seq=2)  # its end: the cut turn is over
    while speaker.synthesize_next():
        pass
    assert [w.text for w in sink.writes] == ["Operator says hi."]
    dropped = [d for d in of_type(events, Dropped) if d.reason == CUT_HELD]
    assert [d.text for d in dropped] == ["", "Watch me nod.", ""]
    speaker.say("u8", "A new answer.", True, seq=0)  # the same utterance id, a new turn
    speaker.synthesize_next()
    assert [w.text for w in sink.writes][-1] == "A new answer."
    # llm_node's own discard also ends the mark: what follows it is new
    speaker.say("u9", "Held.", False, held=True, seq=0)
    speaker.stop("")
    assert speaker.discard("u9") is False  # (already discarded here: the mark goes)
    speaker.say("u9", "", False, seq=0)
    assert [d.text for d in of_type(events, Dropped) if d.reason == CUT_HELD][-1] == ""
    assert len([d for d in of_type(events, Dropped) if d.reason == CUT_HELD]) == 3


def test_phrase_cache_keeps_short_phrases_and_evicts_the_least_recent():
    from bolt_agent.core.tts.phrase_cache import PhraseCache

    calls: list[str] = []

    def synth(text: str) -> np.ndarray:
        calls.append(text)
        if text == "boom":
            raise RuntimeError("unsayable")
        return np.full(len(text) * 10, len(calls), dtype=np.int16)  # new audio every call

    cache = PhraseCache(synth, max_chars=8, max_entries=2)
    first = cache("Yes,")
    again = cache("Yes,")
    assert calls == ["Yes,"] and again is first and not again.flags.writeable
    with pytest.raises(ValueError):
        again[0] = 1  # a consumer cannot change what later turns will play
    assert not np.array_equal(cache("Yes."), first)  # the exact text: "Yes." is another phrase
    long_text = "This sentence is longer than eight characters."
    cache(long_text), cache(long_text)
    assert calls.count(long_text) == 2  # long texts are never kept
    cache("Sure!")  # a third short phrase: "Yes," (least recently used) goes
    assert len(cache) == 2
    cache("Yes,")
    assert calls.count("Yes,") == 2
    with pytest.raises(RuntimeError):
        cache("boom")  # a failure is the caller's (the speaker reports it), and not kept
    assert cache.stats() == {"phrase_hits": 1, "phrase_misses": 4, "phrases_kept": 2}
    cache.clear()
    off = PhraseCache(synth, max_chars=0)
    off("Yes,"), off("Yes,")
    assert calls.count("Yes,") == 4 and len(off) == 0


def test_a_speaker_on_a_phrase_cache_plays_a_repeated_opening_without_synthesising_it():
    from bolt_agent.core.tts.phrase_cache import PhraseCache

    synthesised: list[str] = []

    def synth(text: str) -> np.ndarray:
        synthesised.append(text)
        return np.ones(100, dtype=np.int16)

    sink = FakeSink()
    speaker = Speaker(PhraseCache(synth), emit=lambda event: None)
    speaker.start(sink)
    for turn in ("a", "b"):  # llm_node sends the opening clause on its own
        speaker.say(turn, "Yes,", is_last=False)
        speaker.say(turn, "I will turn my head to the window.", is_last=True)
        while speaker.synthesize_next():
            pass
    rest = "I will turn my head to the window."  # over 24 characters: synthesised each time
    assert synthesised == ["Yes,", rest, rest]
    assert [tag.text for tag in sink.writes] == ["Yes,", rest] * 2


def test_a_turns_first_audio_starts_near_its_first_audible_sample():
    """Piper opens "Yes," with 65 ms below -50 dBFS: heard as latency, so the first audio of a
    turn (held or not) keeps only ``lead_keep`` samples of it; later sentences keep their lead
    (the pause between sentences), and silent audio is never cut to nothing."""
    lead = np.concatenate([np.full(600, 50, np.int16), np.full(400, 3000, np.int16)])

    def synth(text: str) -> np.ndarray:
        return np.zeros(500, np.int16) if text == "Hmm." else lead

    sink = FakeSink()
    speaker = Speaker(synth, emit=lambda event: None)
    speaker.lead_keep = 100
    speaker.start(sink)
    for text, last in (("Yes,", False), ("I see.", False), ("Hmm.", True)):
        speaker.say("a", text, is_last=last)
    while speaker.synthesize_next():
        pass
    first, second, silent = sink.audio
    assert len(first) == 500 and first[99] == 50 and first[100] == 3000
    assert len(second) == 1000 and len(silent) == 500
    speaker.say("b", "Hmm.", is_last=False, held=True)  # a held turn: trimmed when released
    speaker.say("b", "I see.", is_last=True, held=True)
    while speaker.synthesize_next():
        pass
    speaker.release("b")
    assert [len(a) for a in sink.audio[3:]] == [500, 1000]  # its first audio was silent
    speaker.lead_keep = None  # off: audio as synthesised
    speaker.say("c", "I see.", is_last=True)
    while speaker.synthesize_next():
        pass
    assert len(sink.audio[-1]) == 1000


def test_trim_leading_silence_is_a_view_and_bounded_by_the_start():
    from bolt_agent.core.tts.speaker import trim_leading_silence

    audio = np.array([0, 0, -5000, 1], np.int16)
    audio.setflags(write=False)
    trimmed = trim_leading_silence(audio, keep=1)
    assert trimmed.tolist() == [0, -5000, 1] and not trimmed.flags.writeable
    assert trim_leading_silence(audio, keep=10).tolist() == audio.tolist()
    assert trim_leading_silence(np.zeros(3, np.int16), keep=0).tolist() == [0, 0, 0]
    assert trim_leading_silence(np.array([-32768, 0], np.int16), keep=0).tolist() == [-32768, 0]


def test_a_stopped_sentence_is_not_revived_by_a_later_stop():
    """A sentence a stop ended while it was being synthesised stays ended when another stop
    comes before synthesis returns (the later stop re-stamps only what was still current)."""
    speaker, synth, sink, _ = make()
    t1 = speaker.say("t1", "Playing now.", True)
    speaker.synthesize_next()
    t2 = speaker.say("t2", "Waiting here.", True)
    synth.during = lambda text: (speaker.stop("t2"), speaker.stop(""))
    speaker.synthesize_next()
    assert [w.turn for w in sink.writes] == [t1] and t2.outstanding == 0

    speaker, synth, sink, _ = make()
    t1 = speaker.say("t1", "One here. Two here.", True)
    speaker.synthesize_next()
    synth.during = lambda text: (speaker.stop("t1"), speaker.stop(""))
    speaker.synthesize_next()  # "Two here." is being synthesised when both stops come
    assert [w.text for w in sink.writes] == ["One here."] and t1.outstanding == 0


def test_a_held_turn_released_after_a_stop_of_another_turn_plays_whole():
    speaker, synth, sink, _ = make()
    speaker.say("t1", "Playing now.", True)
    speaker.synthesize_next()
    h = speaker.say("h", "Held one. Held two.", True, held=True)
    speaker.stop("t1")
    speaker.release("h")
    while speaker.synthesize_next():
        pass
    assert [w.text for w in sink.writes][-2:] == ["Held one.", "Held two."]
    for tag in sink.writes[-2:]:
        speaker.played(sink.finish(tag))
    assert h.done.is_set() and h.spoken == ["Held one.", "Held two."] and not h.interrupted

    speaker, synth, sink, _ = make()  # the stop and the release while h's first is synthesised
    speaker.say("t1", "Playing now.", True)
    speaker.synthesize_next()
    h = speaker.say("h", "Held one.", True, held=True)
    synth.during = lambda text: (speaker.stop("t1"), speaker.release("h"))
    speaker.synthesize_next()
    synth.during = None
    speaker.played(sink.finish(sink.writes[-1]))
    assert sink.writes[-1].text == "Held one." and h.done.is_set() and h.outstanding == 0


def two_turns_in_the_sink(first: str, second: str, first_played: bool = False):
    """Two turns' first sentences written to the sink (the synthesis thread writes the next
    sentence while one plays): the first playing its first word and the second not started,
    or (``first_played``) the first played to its end, its on_done not in yet, and the second
    at its first word. Returns (speaker, synth, sink, events, turn 1, turn 2)."""
    speaker, synth, sink, events = make()
    t1 = speaker.say("t1", first, True)
    t2 = speaker.say("t2", second, True)
    speaker.synthesize_next()
    speaker.synthesize_next()
    if first_played:
        sink.finish(sink.writes[0])
    sink.play_words(sink.writes[1 if first_played else 0], 1)
    return speaker, synth, sink, events, t1, t2


def test_the_next_turns_sentence_already_in_the_sink_stays_there_after_a_stop():
    """The next client's turn is often in the sink when the playing turn is stopped: not yet
    started, it stays queued in the sink and plays next, in order (also with its next sentence
    being synthesised when the stop comes). A turn before the stopped one that played to its
    end is over, not cut."""
    speaker, synth, sink, events, t1, t2 = two_turns_in_the_sink(
        "Mine here.", "Yours here. And more."
    )
    n = len(events)
    synth.during = lambda text: speaker.stop("t1", reason="action cancelled")
    speaker.synthesize_next()  # t2's second sentence: the stop comes while it is synthesised
    assert t1.interrupted and t1.spoken == ["Mine"] and not t2.interrupted
    assert sink.kept == [sink.writes[1]] and sink.stops == 1
    assert of_type(events[n:], SpeechState) == [
        SpeechState("t1", False, "Mine", True),
        SpeechState("t2", True, "", False),  # the sink plays t2 next: the latest state
    ]
    assert [w.text for w in sink.writes] == ["Mine here.", "Yours here.", "And more."]
    assert synth.texts == ["Mine here.", "Yours here.", "And more."]  # nothing said twice
    for tag in sink.writes[1:]:
        speaker.played(sink.finish(tag))
    assert t2.done.is_set() and t2.spoken == ["Yours here.", "And more."]
    assert of_type(events, FirstAudio) == [FirstAudio("t1"), FirstAudio("t2")]

    # a turn before the stopped one played to its end (its on_done not in yet): it is over,
    # not cut; the stopped one is
    speaker, _, sink, events, before, mine = two_turns_in_the_sink("Before.", "Mine here.", True)
    n = len(events)
    speaker.stop("t2")
    assert before.done.is_set() and not before.interrupted and before.spoken == ["Before."]
    assert mine.interrupted and mine.spoken == ["Mine"] and sink.stops == 1 and sink.kept == []
    assert of_type(events[n:], SpeechState) == [
        SpeechState("t1", False, "Before.", False),
        SpeechState("t2", True, "", False),  # (the end of t1 says who still speaks)
        SpeechState("t2", False, "Mine", True),
    ]
    assert speaker.played(sink.writes[0]) is False  # accounted for by the stop
    assert speaker.synthesize_next() is False


def test_a_waiting_turn_already_in_the_sink_is_taken_out_and_the_playing_one_plays_on():
    speaker, _, sink, events, t1, t2 = two_turns_in_the_sink("Playing now.", "Waiting here.")
    n = len(events)
    info = speaker.stop("t2", reason="action cancelled")
    assert info == StopInfo("t2", "action cancelled", "")
    assert sink.stops == 0 and sink.dropped == [sink.writes[1]]  # out of the sink, t1 untouched
    assert t2.interrupted and t2.done.is_set() and not t1.interrupted
    assert of_type(events[n:], SpeechState) == [
        SpeechState("t2", False, "", True),
        SpeechState("t1", True, "", False),
    ]
    assert speaker.played(sink.finish(sink.writes[0])) and t1.spoken == ["Playing now."]

    # the named turn has played to its end (its on_done not in yet), the next one has started:
    # nothing of t1 is left to stop, and t2 plays on
    speaker, _, sink, events, t1, t2 = two_turns_in_the_sink("Mine here.", "Yours here.", True)
    speaker.stop("t1")
    assert sink.stops == 0 and t1.spoken == ["Mine here."] and not t2.interrupted
    assert speaker.played(sink.writes[0]) is False  # accounted for by the stop
    assert speaker.played(sink.finish(sink.writes[1])) and t2.spoken == ["Yours here."]

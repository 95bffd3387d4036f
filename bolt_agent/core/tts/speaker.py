"""The TTS stage without ROS: turns of sentences, synthesised in order, played, interruptible.

``Speaker`` queues the sentences of each turn (``say``), synthesises them one at a time
(``synthesize_next``: the caller's synthesis thread loops on it) and writes their audio to an
injected sink (``Player`` or ``PacedSink`` from ``playback``: write/progress/forget/stop under a
tag, the queued ``Sentence``). The sink reports each finished sentence through its ``on_done``;
the caller hands it to ``played`` (from a thread of its own: ``on_done`` runs in the audio
callback). ``stop`` bumps a generation counter stamped on every queued sentence, so whatever of
the stopped turns was queued or being synthesised is never played, and reports exactly what was
heard: the whole sentences, then the words of the cut one in proportion to the samples played.
A stop of everything ends every turn. A stop that names a turn ends that turn only (a
cancelled Speak goal ends its own speech, not another client's): one not heard yet leaves the
queue, and the sink if its sentence is there unstarted (``drop``), while the sink plays on; one
that plays stops the sink but for the sentences of turns not heard yet (``stop(keep=…)``), and
the turns behind it go on, stamped with the new generation.

**Held turns** (a preemptive answer, started before the user's turn was confirmed over):
``say(…, held=True)`` synthesises the sentences at once but keeps their audio; ``release``
(or a ``say`` of the same turn that is not held) plays it in order, ``discard`` (or a ``stop``
naming the turn) drops it without a sound, without an interruption and without a state: a held
turn is never "speaking", so the echo gate does not close the mic while the user may go on. A
held turn not released within ``max_hold_s`` is discarded (its release was lost).

What happens is reported as typed events through ``emit``, called in order with the speaker's
lock held (it must not call back into the speaker): ``SpeechState`` (the ``tts/state`` of a
turn), ``FirstAudio``, ``Stopped``, ``Dropped`` and ``Failed``.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from bolt_agent.core.tts.tts_engine import split_sentences, spoken_prefix

MAX_TURNS = 64  # turns remembered (for their spoken text and ``done``); the oldest go first
MAX_HOLD_S = 10.0  # a held turn not released by then is discarded
MAX_CUT_HELD = 16  # held turns a stop discarded here, whose later messages are dropped
NOT_ACTIVE = "not active"
NO_OUTPUT = "no audio output"
CUT_HELD = "its held start was discarded by a stop"
#: |sample| at or below this is silence when a turn's first audio is trimmed (-50 dBFS)
LEAD_SILENCE = 104


def trim_leading_silence(audio: np.ndarray, keep: int, level: int = LEAD_SILENCE) -> np.ndarray:
    """``audio`` (int16) from ``keep`` samples before its first sample above ``level``: a voice
    opens a sentence with tens of ms of silence (Piper: 65 ms before "Yes,"), which the user
    hears as latency at the start of an answer, not as a pause. Silent audio is left whole.
    A view, not a copy (read-only cached phrases stay read-only)."""
    loud = np.flatnonzero((audio > level) | (audio < -level))  # (abs(-32768) overflows)
    if not len(loud):
        return audio
    return audio[max(0, int(loud[0]) - max(0, keep)) :]


class AudioSink(Protocol):
    """What the speaker needs of ``playback.Player`` / ``playback.PacedSink``."""

    @property
    def is_open(self) -> bool: ...

    def write(self, tag: Hashable, audio: np.ndarray) -> None: ...

    def progress(self, tag: Hashable) -> tuple[int, int]: ...

    def forget(self, tag: Hashable) -> None: ...

    def drop(self, tags: set[Hashable]) -> bool: ...  # unstarted segments out, all or none

    # a StopReport (stop_s, last_audio_s); ``keep(tag, started)`` is asked of every queued
    # segment in order, and the unstarted ones it accepts stay queued
    def stop(self, keep: Callable[[Hashable, bool], bool] | None = None) -> Any: ...


# --- state shared with the caller ------------------------------------------------------------
@dataclass(eq=False)
class Turn:
    """One turn's sentences; ``spoken`` grows as they play, ``done`` is set when it is over."""

    turn_id: str
    spoken: list[str] = field(default_factory=list)
    outstanding: int = 0  # sentences queued, being synthesised or playing
    last_received: bool = False
    interrupted: bool = False
    first_audio: bool = False
    held: bool = False  # synthesised but kept until released (a preemptive answer)
    held_since: float = 0.0
    held_audio: list[tuple[Sentence, np.ndarray]] = field(default_factory=list, repr=False)
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def spoken_text(self) -> str:
        return " ".join(self.spoken)


@dataclass(eq=False)
class Sentence:
    """A queued sentence: the job passed from ``say`` to synthesis to the sink (its tag) and
    back through ``played``. ``gen`` is the speaker's generation when it was queued."""

    turn: Turn
    text: str
    gen: int


# --- events ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class SpeechState:
    """What ``tts/state`` says: the turn, whether it is still speaking, what was heard."""

    turn_id: str = ""
    speaking: bool = False
    spoken_text: str = ""
    interrupted: bool = False

    @classmethod
    def of(cls, turn: Turn) -> SpeechState:
        speaking = turn.outstanding > 0 and not turn.interrupted and not turn.held
        return cls(turn.turn_id, speaking, turn.spoken_text, turn.interrupted)


@dataclass(frozen=True)
class FirstAudio:
    """The first audio of a turn went to the sink (once per turn)."""

    turn_id: str


@dataclass(frozen=True)
class StopInfo:
    turn_id: str  # the turn reported (the one named, else the current one, else the first cut)
    reason: str
    spoken: str  # what that turn had said: whole sentences, then the cut one's prefix
    stop_ms: float | None = None  # stop request → output silenced (None: no open output)
    last_audio_ms: float | None = None  # stop request → end of the last audible block

    def as_dict(self) -> dict[str, Any]:
        info: dict[str, Any] = {"turn_id": self.turn_id, "reason": self.reason}
        info["spoken"] = self.spoken
        if self.stop_ms is not None:
            info |= {"stop_ms": self.stop_ms, "last_audio_ms": self.last_audio_ms}
        return info


@dataclass(frozen=True)
class Stopped:
    info: StopInfo


@dataclass(frozen=True)
class Dropped:
    """A sentence that was not said: ``NOT_ACTIVE`` (refused) or ``NO_OUTPUT``."""

    turn_id: str
    text: str
    reason: str


@dataclass(frozen=True)
class Discarded:
    """A held turn was dropped unheard (the user went on talking): ``sentences`` never played."""

    turn_id: str
    sentences: int


@dataclass(frozen=True)
class Failed:
    """Synthesis of a sentence raised; the turn goes on without it."""

    turn_id: str
    text: str
    reason: str  # repr of the exception


def _set() -> threading.Event:
    event = threading.Event()
    event.set()
    return event


SpeakerEvent = SpeechState | FirstAudio | Stopped | Dropped | Failed | Discarded


class Speaker:
    """Turn and stop bookkeeping of the TTS stage; thread-safe, driven by the caller's threads.

    ``synthesize(text) -> int16 array`` says one sentence; ``start(sink)`` makes the speaker
    active on a sink, ``shutdown()`` stops what is playing and makes it inactive.
    """

    def __init__(
        self,
        synthesize: Callable[[str], np.ndarray],
        emit: Callable[[SpeakerEvent], None] = lambda event: None,
        max_turns: int = MAX_TURNS,
        max_hold_s: float = MAX_HOLD_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._synthesize, self._emit, self._max_turns = synthesize, emit, max_turns
        self._max_hold_s, self._clock = max_hold_s, clock
        self._lock = threading.RLock()
        self._ready = threading.Condition(self._lock)  # a sentence was queued, or shut down
        self._gen = 0
        self._turns: dict[str, Turn] = {}
        self._current: Turn | None = None  # the turn whose audio went to the sink last
        self._queue: deque[Sentence] = deque()
        self._synthesizing: Sentence | None = None  # taken from the queue, outside the lock
        self._playing: list[Sentence] = []  # written to the sink, in play order
        # held turns a stop or an interrupting say discarded here: the LLM does not know, and
        # its release and the rest of the answer would play without their start
        self._cut_held: dict[str, None] = {}
        self._sink: AudioSink | None = None
        self._active = False
        # samples kept before the first audible one of a turn's first audio (None: untouched)
        self.lead_keep: int | None = None

    @property
    def active(self) -> bool:
        return self._active

    @property
    def generation(self) -> int:
        return self._gen

    def turn(self, turn_id: str) -> Turn | None:
        with self._lock:
            return self._turns.get(turn_id)

    def queued(self) -> tuple[int, int]:
        """(sentences waiting for synthesis, sentences written to the sink and still playing)."""
        with self._lock:
            return len(self._queue), len(self._playing)

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self, sink: AudioSink | None) -> None:
        """Accept sentences, played on ``sink`` (which may open later); reports the idle state."""
        with self._lock:
            self._sink, self._active = sink, True
            self._emit(SpeechState())

    def shutdown(self, reason: str = "stop request") -> None:
        """Stop everything, refuse new sentences, release the sink and wake the synthesis
        thread (``synthesize_next`` returns False)."""
        with self._lock:
            self.stop("", reason)
            self._active = False
            self._queue.clear()
            self._sink = None
            self._ready.notify_all()

    # --- speaking ----------------------------------------------------------------------------
    def say(
        self,
        turn_id: str,
        text: str,
        is_last: bool,
        interrupt: bool = False,
        held: bool = False,
        seq: int | None = None,
    ) -> Turn:
        """Queue the sentences of ``text`` under ``turn_id`` (a new turn unless that one is still
        open); ``interrupt`` stops what is playing first; ``held``: synthesise, play only when
        released. A ``say`` that is not held releases a held turn. ``seq``: the sentence's
        number in its turn (``speech/say``), which tells a new turn (0, with text) from the rest
        of a held turn that a stop discarded here (dropped: ``Dropped(…, CUT_HELD)``). Returns
        the turn."""
        with self._lock:
            if interrupt:
                self.stop("")
            if turn_id in self._cut_held:
                if seq == 0 and text:
                    del self._cut_held[turn_id]  # a new answer under the same id
                else:
                    if is_last:
                        del self._cut_held[turn_id]  # the cut turn is over
                    self._emit(Dropped(turn_id, text, CUT_HELD))
                    return Turn(turn_id, interrupted=True, last_received=True, done=_set())
            now = self._clock()
            for stale in [t.turn_id for t in self._turns.values() if t.held]:
                if now - self._turns[stale].held_since > self._max_hold_s:
                    self.discard(stale)  # its release never came
            turn = self._turns.get(turn_id)
            if turn is None or turn.done.is_set():
                turn = self._turns[turn_id] = Turn(turn_id, held=held, held_since=now)
                while len(self._turns) > self._max_turns:
                    self._turns.pop(next(iter(self._turns)))
            elif turn.held and not held:
                self._release(turn)
            turn.last_received = turn.last_received or is_last
            if not self._active:
                self._emit(Dropped(turn_id, text, NOT_ACTIVE))
                turn.interrupted = True
                turn.done.set()
                return turn
            for sentence in split_sentences(text):
                turn.outstanding += 1
                self._queue.append(Sentence(turn, sentence, self._gen))
            self._ready.notify()
            self._finish_if_idle(turn)
        return turn

    def synthesize_next(self, timeout: float | None = 0.0) -> bool:
        """Synthesise the next queued sentence (outside the lock) and write it to the sink.
        Waits up to ``timeout`` s for one (None: until one comes or the speaker shuts down);
        False when none was taken."""
        with self._lock:
            if not self._ready.wait_for(lambda: self._queue or not self._active, timeout):
                return False
            if not self._active:
                return False
            item = self._queue.popleft()
            if not self._current_gen(item):
                return True  # queued before a stop: never said
            self._synthesizing = item  # (a stop naming another turn stamps it again)
        failure = None
        try:
            audio = self._synthesize(item.text)
        except Exception as exc:  # one unsayable sentence must not end the speech thread
            failure, audio = repr(exc), np.zeros(0, dtype=np.int16)
        with self._lock:
            self._synthesizing = None
            turn, sink = item.turn, self._sink
            if failure is not None:
                self._emit(Failed(turn.turn_id, item.text, failure))
            if not self._current_gen(item):
                return True  # stopped while it was being synthesised
            if turn.held and len(audio):
                turn.held_audio.append((item, audio))  # played when released
                return True
            if sink is None or not sink.is_open or not len(audio):
                if len(audio):
                    self._emit(Dropped(turn.turn_id, item.text, NO_OUTPUT))
                turn.outstanding -= 1
                self._finish_if_idle(turn)
                return True
            self._write(item, audio)
        return True

    def _write(self, item: Sentence, audio: np.ndarray) -> None:
        """Play ``item`` (the lock held): to the sink, or dropped when there is no output."""
        turn, sink = item.turn, self._sink
        if sink is None or not sink.is_open:
            self._emit(Dropped(turn.turn_id, item.text, NO_OUTPUT))
            turn.outstanding -= 1
            self._finish_if_idle(turn)
            return
        self._current = turn
        self._playing.append(item)
        if not turn.first_audio and self.lead_keep is not None:
            audio = trim_leading_silence(audio, self.lead_keep)
        sink.write(item, audio)
        if not turn.first_audio:
            turn.first_audio = True
            self._emit(FirstAudio(turn.turn_id))
            self._emit(SpeechState.of(turn))

    # --- held turns --------------------------------------------------------------------------
    def release(self, turn_id: str) -> bool:
        """Play a held turn: what was synthesised at once, the rest as it comes. False when
        no such turn is held."""
        with self._lock:
            turn = self._turns.get(turn_id)
            if turn is None or not turn.held:
                return False
            self._release(turn)
            return True

    def _release(self, turn: Turn) -> None:
        turn.held = False
        held, turn.held_audio = turn.held_audio, []
        for item, audio in held:
            item.gen = self._gen  # (a stop of another turn since: its audio is still to play)
            self._write(item, audio)
        self._finish_if_idle(turn)

    def _current_gen(self, item: Sentence) -> bool:
        """Whether ``item`` is still to be said: queued since the last stop, or a held turn's
        (a stop naming another turn leaves a held turn as it is; one that discards it removes
        it from the queue and ends it)."""
        if item.turn.held and item.turn.done.is_set():
            return False  # discarded (a discard leaves the generation as it is)
        if item.gen == self._gen:
            return True
        if item.turn.held:
            item.gen = self._gen
            return True
        return False

    def discard(self, turn_id: str) -> bool:
        """Drop a held turn unheard: queued and synthesised sentences are never played. No
        interruption is reported (nobody heard anything); a later sentence under the same id
        starts a new turn. False when the turn is not held (nothing done)."""
        with self._lock:
            self._cut_held.pop(turn_id, None)  # the LLM knows now: what follows is new
            turn = self._turns.get(turn_id)
            if turn is None or not turn.held:
                return False
            n = turn.outstanding
            self._queue = deque(q for q in self._queue if q.turn is not turn)
            turn.held_audio.clear()
            turn.outstanding, turn.last_received = 0, True
            turn.done.set()
            self._turns.pop(turn_id, None)
            self._emit(Discarded(turn_id, n))
            return True

    def played(self, item: Sentence) -> bool:
        """The sink finished playing ``item``: it joins its turn's spoken text. True when that
        ended a turn whose last sentence had come (the moment to give memory back)."""
        with self._lock:
            if item.gen != self._gen or item not in self._playing:
                return False  # stopped meanwhile: the stop reported it
            return self._played(item)

    def _played(self, item: Sentence) -> bool:
        self._playing.remove(item)
        if self._sink is not None:
            self._sink.forget(item)
        item.turn.spoken.append(item.text)
        item.turn.outstanding -= 1
        done = self._finish_if_idle(item.turn)
        if not done:
            self._emit(SpeechState.of(item.turn))
        return done and item.turn.last_received

    def _finish_if_idle(self, turn: Turn) -> bool:
        if turn.outstanding > 0 or turn.held:
            return False
        if turn.last_received:
            turn.done.set()
        self._report_quiet(turn)  # speaking=False: nothing of this turn is left to play
        return True

    def _report_quiet(self, turn: Turn) -> None:
        """The state of ``turn``, which has nothing left to play; then, if another turn still
        speaks (this one had nothing left, or was cut short), that one's state again, last, so
        whoever keeps only the latest state (the ASR's echo gate) does not take this one for the
        robot falling silent."""
        self._emit(SpeechState.of(turn))
        other = self._speaking_turn()
        if other is not None and other is not turn:
            self._emit(SpeechState.of(other))

    def _speaking_turn(self) -> Turn | None:
        """The turn whose audio plays (the current one first), None when the robot is quiet
        (a turn only queued, with no audio out yet, is not heard)."""
        turns = [self._current, *self._turns.values()]
        audible = (t for t in turns if t is not None and t.first_audio)
        return next((t for t in audible if SpeechState.of(t).speaking), None)

    def stop(self, turn_id: str = "", reason: str = "stop request") -> StopInfo | None:
        """Stop everything (``turn_id`` empty), or the turn ``turn_id`` only: one not heard yet
        (queued, or in the sink but not started) is taken out while the playing turn plays on;
        one that plays is cut, and the turns behind it go on (what the sink holds of them stays
        there, in order). Every turn cut gets its interrupted state, the reported one last.
        Returns what was said, or None if nothing was playing or queued."""
        with self._lock:
            if self._discard_held_for_stop(turn_id):
                return None  # the named turn was held: nobody heard it, nothing to stop
            current = self._current
            # (a held turn left is not busy: it is not playing, and it stays held)
            busy = [t for t in self._turns.values() if t.outstanding > 0 and not t.held]
            named = None
            if turn_id:
                # a stop names one turn: if that turn is over (finished, or already cut off by a
                # newer one), there is nothing to stop, even while it is still the last current
                named = self._turns.get(turn_id)
                if named is None or named.done.is_set() or named.outstanding == 0:
                    return None
                current = named
                for item in [i for i in self._playing if i.turn is not named]:
                    if self._played_whole(item):  # other turns' sentences: as played()
                        self._played(item)
                if self._take_unheard(named):
                    return self._stop_waiting(named, reason)
                busy = [t for t in busy if t.outstanding > 0]
            if not busy:
                return None
            old, self._gen = self._gen, self._gen + 1
            report, kept, busy = self._stop_sink(named, busy)
            self._carry_on(old, kept, cut=set(busy))
            self._record_what_was_heard(kept)
            return self._end_cut_turns(busy, current, kept, reason, report)

    def _discard_held_for_stop(self, turn_id: str) -> bool:
        """Held turns go without an interruption (nobody heard them): a stop of everything
        discards them all, and remembers them so that their later release is dropped; a stop
        naming one discards that one. True when the named turn was held."""
        held = [t.turn_id for t in self._turns.values() if t.held]
        for held_id in held:
            if not turn_id and self.discard(held_id):
                # the LLM will release it and go on: drop that (no start, no sense)
                self._cut_held[held_id] = None
                while len(self._cut_held) > MAX_CUT_HELD:
                    del self._cut_held[next(iter(self._cut_held))]
            elif held_id == turn_id:
                self.discard(held_id)
        return bool(turn_id) and turn_id in held

    def _stop_sink(
        self, named: Turn | None, busy: list[Turn]
    ) -> tuple[Any, list[Sentence], list[Turn]]:
        """Stop the sink: (its stop report or None, the sentences it keeps playing, the turns
        cut). A stop of everything keeps nothing; a stop naming a turn keeps the sentences of
        turns not heard yet, and cuts only the named turn and those whose audio was heard."""
        sink = self._sink
        if named is None:
            return (sink.stop() if sink is not None and sink.is_open else None), [], busy
        report, kept = self._stop_sink_keeping_unheard(named)
        cut_turns = {item.turn for item in self._playing if item not in kept}
        return report, kept, [t for t in busy if t is named or t in cut_turns]

    def _carry_on(self, old: int, kept: list[Sentence], cut: set[Turn]) -> None:
        """What goes on after a stop: held turns and, for a stop naming a turn, the turns
        behind it, stamped with the new generation if they had the old one (a sentence a stop
        ended stays so)."""
        self._queue = deque(q for q in self._queue if q.turn.held or q.turn not in cut)
        going_on = [*kept, *self._queue]
        if self._synthesizing is not None and self._synthesizing.turn not in cut:
            going_on.append(self._synthesizing)
        for item in going_on:
            if item.gen == old:
                item.gen = self._gen

    def _record_what_was_heard(self, kept: list[Sentence]) -> None:
        """The sentences taken out of the sink join their turns' spoken text: whole ones as
        they are, the one cut as the words played of it (in play order; nothing after it)."""
        sink = self._sink
        for item in self._playing:
            if item in kept:
                continue
            played, total = sink.progress(item) if sink is not None else (0, 1)
            if total and played >= total:
                item.turn.spoken.append(item.text)
                continue
            words = spoken_prefix(item.text, played / total if total else 0.0)
            if words:
                item.turn.spoken.append(words)
            break
        if sink is not None:
            for item in self._playing:
                if item not in kept:
                    sink.forget(item)
        self._playing = kept

    def _end_cut_turns(
        self,
        busy: list[Turn],
        current: Turn | None,
        kept: list[Sentence],
        reason: str,
        report: Any,
    ) -> StopInfo:
        """Every turn cut is over and interrupted, and says so; the one reported goes last,
        then the turn the sink plays next (speaking) as the latest state."""
        for turn in busy:
            turn.outstanding, turn.interrupted, turn.last_received = 0, True, True
            turn.done.set()
        shown = current if current in busy else busy[0]
        for turn in busy:
            if turn is not shown:
                self._emit(SpeechState.of(turn))
        self._emit(SpeechState.of(shown))
        if kept:
            self._current = kept[-1].turn
            self._emit(SpeechState.of(kept[0].turn))
        info = StopInfo(shown.turn_id, reason, shown.spoken_text)
        if report is not None:
            info = StopInfo(
                shown.turn_id,
                reason,
                shown.spoken_text,
                report.stop_s * 1e3,
                report.last_audio_s * 1e3,
            )
        self._emit(Stopped(info))
        return info

    def _stop_sink_keeping_unheard(self, named: Turn) -> tuple[Any, list[Sentence]]:
        """Stop the sink (the lock held) but for the sentences of turns nothing of which has
        been heard: (the stop report or None, those sentences in play order). The sink asks
        about every queued segment under its own lock, so one that starts meanwhile counts."""
        sink = self._sink
        if sink is None or not sink.is_open:
            return None, []
        heard = {named} | {i.turn for i in self._playing if sink.progress(i)[0]}
        playing = set(self._playing)  # (sentences and turns compare by identity)
        kept: list[Sentence] = []

        def keep(tag: Hashable, started: bool) -> bool:
            if tag not in playing:
                return False
            item: Sentence = tag  # type: ignore[assignment]
            if started:
                heard.add(item.turn)
            if item.turn in heard:
                return False
            kept.append(item)
            return True

        return sink.stop(keep=keep), kept

    def _take_unheard(self, turn: Turn) -> bool:
        """Take ``turn``'s sentences out of the sink if none has started (the lock held): those
        it already played to their end join its spoken text. False when one plays or played
        partly (it was heard: the sink must stop)."""
        mine = [item for item in self._playing if item.turn is turn]
        sink = self._sink
        if not mine:
            return True
        if sink is None:
            return False
        done = {item for item in mine if self._played_whole(item)}
        waiting = {item for item in mine if item not in done}
        if waiting and not sink.drop(waiting):
            return False
        for item in mine:
            if item in done:
                turn.spoken.append(item.text)
            self._playing.remove(item)
            sink.forget(item)
        return True

    def _played_whole(self, item: Sentence) -> bool:
        """The sink has played ``item`` to its end (its ``on_done`` may not have come yet)."""
        if self._sink is None:
            return False
        played, total = self._sink.progress(item)
        return 0 < total <= played

    def _stop_waiting(self, turn: Turn, reason: str) -> StopInfo:
        """Stop a turn none of whose audio is in the sink (the lock held): its sentences leave
        the queue (the one being synthesised is never written), the sink plays on."""
        self._queue = deque(q for q in self._queue if q.turn is not turn)
        if self._synthesizing is not None and self._synthesizing.turn is turn:
            self._synthesizing.gen = -1  # never current again
        turn.outstanding, turn.interrupted, turn.last_received = 0, True, True
        turn.done.set()
        self._report_quiet(turn)  # the robot still speaks: that state stays the last one
        info = StopInfo(turn.turn_id, reason, turn.spoken_text)
        self._emit(Stopped(info))
        return info

"""The ASR stage without ROS: 16 kHz audio blocks in, voice activity and transcripts out.

``Listener.push(chunk, stamp_ns)`` runs the VAD segmenter on one block and decides everything the
ASR node used to decide inline:

* **echo** (``echo_mode``): while the robot speaks (``robot_speaking(True)``) and for
  ``echo_tail_ms`` after it stops, ``gate`` ignores the mic (an open utterance is closed and
  dropped); ``barge_in`` raises the VAD's threshold and minimum speech length instead, and an
  utterance started while the robot speaks is flagged ``barge_in``; ``aec`` takes the robot's
  voice out of the mic first (``core.audio.echo_canceller``, fed by ``reference``), listens
  with ``aec_threshold``/``aec_min_ms`` while the robot speaks, and flags an utterance
  ``barge_in`` only once ``core.asr.barge_in`` judges it an interruption, from quick
  transcripts of the words so far (every ``barge_in_probe_ms``), the voice's length and the
  early or final transcript; a backchannel ("uh-huh") never stops the robot and its transcript
  says ``backchannel``. A change takes effect from
  the next pushed block, and the tail is counted in audio, not in wall time: audio that
  arrives in a burst (a publisher that stalled, a bag played faster) gets the same 300 ms, not
  a tail stretched over the user's first words;
* **partials** every ``partial_interval_s`` of speech, skipped while more than ``backlog_s`` of
  audio waits behind the block or while the transcriber is still busy;
* **early final** (``early_final``): as soon as a silence begins
  (``VadSegmenter.pending_end``), the utterance is transcribed; the result is published as a
  partial at once, reused for the final when the VAD confirms that very end, and discarded
  (never published) if speech resumes first;
* **end of turn** (``end_of_turn``, ``core.asr.end_of_turn``): in ``semantic`` mode the VAD's
  ``min_silence_ms`` is only the longest wait; the utterance ends as soon as the silence reaches
  ``complete_silence_ms`` and the words of the early transcript are judged complete (a
  hint from the LLM, ``end_of_turn_hint``, or the text itself). When speech resumes after a
  early transcript was started, ``VoiceActivityEvent(speaking=True)`` is emitted again
  with the same utterance id (``resumed``): whatever was started from it must be discarded;
* **stamps**: sample offsets become nanosecond stamps through the latest block's stamp.

The transcriber (``AsrEngine`` or anything with ``transcribe(audio, final) -> result | None``,
the result having ``text``, ``confidence`` and ``language``) runs in jobs handed to a *runner*:
anything with ``submit(fn) -> handle`` whose handle has ``done()`` and that runs the jobs one at a
time, in order (a one-thread ``ThreadPoolExecutor`` in the node; ``InlineRunner``, the default,
runs each job at once inside ``submit``). Nothing a job raises is lost in a future nobody reads:
a transcription error, or any other error of the job (a failing ``emit``), becomes a
``TranscriptionFailed`` event (logged when delivering it fails too); the listener keeps going.

Input hygiene: ``push`` takes any block (NaN/inf are zeroed, any shape flattened); what
reaches it was checked and queued by ``core.asr.audio_ingest``.

Delivery of events, in the order they happen:

* with ``emit`` (the node): every event is passed to ``emit`` when it happens, on the thread that
  produced it (voice activity on the pushing thread, before any job of that block is submitted;
  transcripts on the runner's thread); ``push`` then returns an empty list;
* without ``emit`` (tests): ``push`` returns the events produced during the call, which with the
  inline runner includes those of the jobs it ran; events a job produces outside a ``push``
  (another runner) are kept and returned by the next ``push`` (or ``take_events``).

``push`` and ``update_settings`` are called from one thread; ``robot_speaking`` from any.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from bolt_agent.core.asr.barge_in import (
    BACKCHANNEL,
    ECHO,
    INTERRUPT,
    UNDECIDED,
    BargeInJudge,
    BargeInSettings,
    RobotLines,
    words_of,
)
from bolt_agent.core.asr.end_of_turn import EndOfTurn, EndOfTurnSettings
from bolt_agent.core.asr.vad_segmenter import (
    SAMPLE_RATE,
    WINDOW,
    SpeechEnd,
    SpeechStart,
    VadSegmenter,
)

ECHO_MODES = ("off", "gate", "barge_in", "aec")
ROBOT_LINES_KEPT = 3  # aec: the robot's latest lines, whose words in order are its echo
_NS = 1_000_000_000
#: a robot's stop stamped further ahead of the audio than this is on another clock: applied at once
ROBOT_STOP_MAX_LEAD_S = 10
log = logging.getLogger(__name__)


def clean_block(chunk: Any) -> np.ndarray:
    """Any block as flat float32; NaN and inf become 0 (the VAD's model would turn one NaN into
    NaN probabilities for the rest of the stream). Values are not clipped: a loud block is
    still audio."""
    x = np.asarray(chunk, dtype=np.float32).reshape(-1)
    if not np.isfinite(x).all():
        x = np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)
    return x


@dataclass(frozen=True)
class ListenerSettings:
    echo_mode: str = "barge_in"  # off | gate | barge_in | aec
    barge_in_threshold: float = 0.8  # VAD probability needed while the robot speaks
    barge_in_min_ms: int = 300  # speech needed while the robot speaks
    aec_threshold: float = 0.6  # the same two with the echo cancelled (aec)
    aec_min_ms: int = 150
    #: aec, while the robot speaks: 32 ms windows of the cleaned signal quieter than this
    #: (dB full scale) are silence to the VAD (the canceller's residue; the words keep them)
    aec_residual_db: float = -40.0
    aec_residual_ratio_db: float = -18.0  # ... or this far below the microphone's window
    barge_in_probe_ms: int = 250  # aec: a quick transcript this often while judging a barge-in
    judge: BargeInSettings = field(default_factory=BargeInSettings)  # aec: the barge-in judge
    echo_tail_ms: int = 300  # gate: keep ignoring the mic this long after the robot stops
    partial_interval_s: float = 1.0  # of speech between partial transcripts (0 = no partials)
    early_final: bool = True  # transcribe when a silence begins, reuse when it is confirmed
    backlog_s: float = 0.5  # queued audio above which partials are skipped to catch up
    #: when the turn ends (fixed: the VAD's min_silence_ms; semantic: from the words)
    end_of_turn: EndOfTurnSettings = field(default_factory=lambda: EndOfTurnSettings("fixed"))

    def __post_init__(self) -> None:
        if self.echo_mode not in ECHO_MODES:
            raise ValueError(f"echo_mode must be one of {list(ECHO_MODES)}, not {self.echo_mode!r}")


def residual_gate(
    cleaned: np.ndarray, mic: np.ndarray | None, floor_db: float, ratio_db: float
) -> np.ndarray:
    """``cleaned`` with each VAD window zeroed where it is the canceller's residue: quieter
    than ``floor_db`` (dB full scale), or ``ratio_db`` or more below the microphone's window
    (the canceller explained that much of it by the robot's voice; the user's voice over the
    robot keeps the two within a few dB). What is left of the robot's voice is quiet but still
    speech-shaped, and Silero judges speech almost regardless of level. ``mic`` None: the
    input came cancelled (an external canceller), and only the floor applies."""
    out = cleaned.copy()
    floor = 10.0 ** (floor_db / 10.0)  # (powers)
    ratio = 10.0 ** (ratio_db / 10.0)
    for i in range(0, len(out), WINDOW):
        w = out[i : i + WINDOW]
        if not len(w):
            continue
        power = float(np.mean(w * w))
        mic_power = 0.0 if mic is None else float(np.mean(np.square(mic[i : i + WINDOW])))
        if power < floor or power < ratio * mic_power:
            w[:] = 0.0
    return out


# --- events ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class VoiceActivityEvent:
    """Speech started (``speaking``) or stopped; ``stamp_ns`` of the utterance's onset / end."""

    utterance_id: str
    speaking: bool
    barge_in: bool  # the user spoke over the robot (barge_in: at once; aec: once judged)
    stamp_ns: int
    resumed: bool = False  # speaking again after an early end (same utterance)


@dataclass(frozen=True)
class TranscriptEvent:
    utterance_id: str
    text: str
    is_final: bool
    confidence: float
    language: str
    audio_start_ns: int  # where speech was detected
    audio_end_ns: int  # the end of the transcribed audio
    early: bool = False  # the early transcript, published as a partial
    backchannel: bool = False  # aec: said over the robot and judged a backchannel ("uh-huh")
    # diagnostics (not part of the event's identity): from the job's submission to its start
    # (behind other jobs), and the transcription itself (0 for a final that reused one)
    queued_s: float = field(default=0.0, compare=False)
    transcribe_s: float = field(default=0.0, compare=False)


@dataclass(frozen=True)
class FinalMetrics:
    """Follows an utterance's final transcript (the node adds the time it publishes it)."""

    utterance_id: str
    speech_end_ns: int
    #: how the end was decided: "silence" (the VAD's wait ran out), "hint" or "text" (semantic)
    ended_by: str = "silence"
    silence_ms: float = 0.0  # the silence waited before the end was decided


@dataclass(frozen=True)
class NoSpeech:
    """The final transcription of an utterance found no speech (``reason`` "no_speech"), or
    only the robot's own words ("echo", aec): the utterance is dropped."""

    utterance_id: str
    reason: str = "no_speech"


@dataclass(frozen=True)
class TranscriptionFailed:
    utterance_id: str
    stage: str  # partial | early | final
    error: str


ListenerEvent = VoiceActivityEvent | TranscriptEvent | FinalMetrics | NoSpeech | TranscriptionFailed


# --- injected collaborators --------------------------------------------------------------------
class Transcriber(Protocol):
    def transcribe(self, audio: np.ndarray, final: bool = True) -> Any: ...


class JobHandle(Protocol):
    def done(self) -> bool: ...

    def result(self, timeout: float | None = None) -> Any: ...


class JobRunner(Protocol):
    """Runs submitted jobs one at a time, in submission order."""

    def submit(self, fn: Callable[[], None]) -> JobHandle: ...


class InlineRunner:
    """Runs each job at once, inside ``submit`` (tests, offline use)."""

    def submit(self, fn: Callable[[], None]) -> futures.Future:
        future: futures.Future = futures.Future()
        future.set_result(fn())
        return future


# --- jobs --------------------------------------------------------------------------------------
@dataclass(eq=False)
class _Early:
    """A final transcribed before the VAD confirmed the end: its span and its result."""

    utt_id: str
    start: int  # padded start (the audio), compared with the SpeechEnd's
    onset: int  # where speech was detected (the stamps)
    end: int
    start_ns: int = 0  # the stamps of onset and end when it was made: a final that reuses the
    end_ns: int = 0  # early transcript reports the very same span (not a later, jittered mapping)
    ended_by: str = "silence"  # set when the words ended the utterance early
    silence_ms: float = 0.0
    stale: bool = False  # speech resumed: the result must not be used or published
    ran: bool = False  # its job has run (result is its outcome, unless failed)
    failed: bool = False
    result: Any = None


@dataclass(eq=False)
class _Judging:
    """An utterance begun over the robot (aec): is it an interruption? Decided once; the
    pushing thread and the runner's both decide, under ``Listener._judge_lock``."""

    utt_id: str
    onset: int  # the voice's onset (sample offset)
    onset_ns: int
    last_probe: int  # the stream offset of the latest quick transcript's audio
    robot_turn: int  # Listener._robot_turns when it began: the speech it may interrupt
    verdict: str = UNDECIDED
    #: no words heard yet, or the latest were the robot's own or only backchannels: the
    #: voice's length alone proves nothing then ("Oh, wow." with its pause lasts a second; a
    #: stretch of residual echo lasts as long as whisper, busy on 2 cores, takes to hear it)
    words_so_far_harmless: bool = True
    #: the latest transcript held a stop word (one heard unsurely needs a second hearing)
    stop_word_heard: bool = False


@dataclass
class _Timing:
    """Where a job's time went (runner thread): waiting behind other jobs, transcribing."""

    queued_s: float = 0.0
    transcribe_s: float = 0.0


@dataclass(frozen=True)
class _Job:
    """One transcription, handed from the pushing thread to the runner's."""

    kind: str  # partial | early | final | probe (aec: a quick transcript for the judge)
    utt_id: str
    audio: np.ndarray = field(repr=False)
    start_ns: int
    end_ns: int
    early: _Early | None = None  # early: its own; final: the one to reuse
    ended: tuple[str, float] = ("silence", 0.0)  # final: how the end was decided, silence ms
    submitted: float = 0.0  # the listener's clock when it was handed to the runner
    judging: _Judging | None = None  # aec: the barge-in still being judged, if any
    voiced_ms: float = 0.0  # judging: how long the voice had lasted at the job's audio end


def _confidence(result: Any) -> float:
    """A transcription's confidence (0..1); 1 for a transcriber that gives none."""
    return float(getattr(result, "confidence", 1.0)) if result is not None else 1.0


class Listener:
    def __init__(
        self,
        transcriber: Transcriber,
        settings: ListenerSettings | None = None,
        vad: VadSegmenter | None = None,
        runner: JobRunner | None = None,
        emit: Callable[[ListenerEvent], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        canceller: Any = None,
    ) -> None:
        self.settings = settings or ListenerSettings()
        # aec: anything with reference(samples, stamp_ns) and process(block, stamp_ns) -> block
        # (core.audio.echo_canceller.SpeexCanceller in the node); None: the input is cancelled
        # before it comes here (PulseAudio's module-echo-cancel, a microphone array's own
        # canceller), and only the barge-in judge runs
        self.canceller = canceller
        self.judge = BargeInJudge(self.settings.judge)
        self._judging: _Judging | None = None
        self._judge_lock = threading.Lock()
        self.barge_in_verdicts = {INTERRUPT: 0, BACKCHANNEL: 0, ECHO: 0}  # aec: the judge's
        self._robot_lines: list[tuple[str, ...]] = []  # its latest lines' words (any thread)
        self._robot_lines_lock = threading.Lock()
        self._sensitivity_set: tuple[float, int] | None = None
        self.vad = vad if vad is not None else VadSegmenter()
        self._transcriber = transcriber
        self._runner: JobRunner = runner if runner is not None else InlineRunner()
        self._emit = emit
        self._clock = clock
        self._collected: list[ListenerEvent] = []
        self._collected_lock = threading.Lock()
        self._anchor = (0, 0)  # (sample offset, stamp ns) of the latest block
        self._utt_id, self._utt_barge, self._last_partial = "", False, 0
        self._barge_mode = False
        self._early: _Early | None = None
        # an early transcript is made stale (pushing thread) and published (whisper thread) under
        # it: a stale early transcript never follows the "resumed" that made it stale
        self._spec_lock = threading.Lock()
        self.delivery_failures = 0  # voice activity events that could not be delivered
        self.lost_samples = 0  # audio dropped upstream, skipped over (``audio_lost``)
        self._last_job: JobHandle | None = None  # the latest job (partials wait for it)
        self._robot_speaking = False  # as the pushing thread applies it, block by block
        self._robot_said = False  # the latest robot_speaking (any thread)
        self._robot_turns = 0  # times it started speaking: a barge-in is for one of them
        self._robot_stopped = False  # it went from speaking to quiet since the last block
        self._robot_quiet_ns: int | None = None  # the stop's stamp (audio from before it: speech)
        self._robot_lock = threading.Lock()
        self._quiet_from: int | None = None  # stream offset of the first block after the stop
        self.end_of_turn = EndOfTurn(self.settings.end_of_turn)
        self._hints: list[tuple[str, str, float]] = []  # from any thread, taken by push
        self._hints_lock = threading.Lock()

    # --- inputs ----------------------------------------------------------------------------
    def robot_speaking(self, speaking: bool, stamp_ns: int = 0) -> None:
        """The robot started or stopped speaking (any thread). A start applies from the next
        pushed block. A stop stamped ``stamp_ns`` (its last sample's time, on the audio's
        clock) applies from the first block stamped at or after it: audio that lags behind
        (whisper busy on 2 cores) still holds the robot's voice, and is judged as such. An
        unstamped stop, or one more than ``ROBOT_STOP_MAX_LEAD_S`` ahead of the audio (another
        clock), applies from the next block. The echo tail runs over ``echo_tail_ms`` of audio
        from there."""
        with self._robot_lock:
            if self._robot_said and not speaking:
                self._robot_stopped = True
                self._robot_quiet_ns = stamp_ns or None
            if speaking and not self._robot_said:
                self._robot_turns += 1
            self._robot_said = bool(speaking)

    def reference(self, samples: np.ndarray, stamp_ns: int) -> None:
        """The robot played ``samples`` from ``stamp_ns`` (any thread): the echo canceller's
        reference (aec; ignored in the other modes)."""
        if self.canceller is not None:
            self.canceller.reference(clean_block(samples), stamp_ns)

    def robot_said(self, text: str) -> None:
        """A line the robot is about to say (any thread): words of an utterance heard over it
        that follow its own in order are its echo (aec). The last ``ROBOT_LINES_KEPT`` are
        kept."""
        words = tuple(words_of(text))
        if words:
            with self._robot_lines_lock:
                self._robot_lines = [*self._robot_lines[-(ROBOT_LINES_KEPT - 1) :], words]

    def robot_lines(self) -> tuple[tuple[str, ...], ...]:
        with self._robot_lines_lock:
            return tuple(self._robot_lines)

    def end_of_turn_hint(self, utterance_id: str, text: str, p_complete: float) -> None:
        """The LLM's judgement of an early transcript (any thread; used by the next push)."""
        with self._hints_lock:
            self._hints.append((utterance_id, text, p_complete))
            del self._hints[:-8]

    def update_settings(self, settings: ListenerSettings) -> None:
        """New settings from the next block on (a barge-in sensitivity applies at once)."""
        self.settings = settings
        self.end_of_turn.settings = settings.end_of_turn
        self.judge = BargeInJudge(settings.judge)
        if self._barge_mode:
            self._set_sensitivity()

    def push(
        self, chunk: np.ndarray, stamp_ns: int, queued: int = 0, reference_ready: bool = True
    ) -> list[ListenerEvent]:
        """Process one 16 kHz mono float32 block whose first sample was at ``stamp_ns``;
        ``queued``: samples already waiting behind it (partials are skipped above backlog_s);
        ``reference_ready``: False when what the robot played over this block has not come
        (aec): the block is neither cancelled (the filter would learn from a wrong reference)
        nor heard by the VAD while the robot speaks (its echo is whole)."""
        chunk = clean_block(chunk)
        seg, s = self.vad, self.settings
        self._anchor = (seg.offset, stamp_ns)
        self._apply_robot_state(stamp_ns)
        vad_input = None
        if s.echo_mode == "aec":
            chunk, vad_input = self._cancel(chunk, stamp_ns, reference_ready)
        gated = self._echo_gated(len(chunk)) if s.echo_mode == "gate" else 0
        if gated:
            if seg.in_speech:
                self._voice(False, seg.offset)
            self._drop_early()  # its utterance is dropped
            seg.skip(gated)
            if gated == len(chunk):
                return self.take_events()
            # the tail ends inside this block (a long block from a topic): the rest is heard
            chunk = chunk[gated:]
            self._anchor = (seg.offset, stamp_ns + gated * _NS // SAMPLE_RATE)
        barge = s.echo_mode in ("barge_in", "aec") and self._robot_speaking
        if barge != self._barge_mode:
            self._barge_mode = barge
            if not barge:
                seg.reset_sensitivity()
                self._sensitivity_set = None
        if barge:
            self._set_sensitivity()  # (aec: stricter until the canceller has converged)
        for event in seg.push(chunk, vad_input):
            if isinstance(event, SpeechStart):
                # aec: also within echo_tail_ms of audio after the robot stopped (the
                # microphone's audio comes later than tts/state; the room rings on)
                judged = s.echo_mode == "aec" and (barge or self._in_echo_tail())
                self._utt_id, self._utt_barge = f"u{uuid.uuid4().hex[:10]}", barge and not judged
                self._judging = None
                if judged:
                    onset_ns = self.stamp(event.onset)
                    # the first quick transcript at once: "wait" or "stop" is often all
                    # there is to hear, and every 250 ms waited is 250 ms more of the robot
                    first_probe = event.onset - s.barge_in_probe_ms * SAMPLE_RATE // 1000
                    self._judging = _Judging(
                        self._utt_id, event.onset, onset_ns, first_probe, self._robot_turns
                    )
                self._last_partial = event.offset
                self.end_of_turn.start(self._utt_id)
                self._voice(True, event.onset)
            elif isinstance(event, SpeechEnd):
                self._final(event)
        if seg.in_speech:
            self._judge_barge_in()
            self._transcribe_early()
            self._end_from_words()
        interval = int(s.partial_interval_s * SAMPLE_RATE)
        judging = self._judging
        if (
            (judging is None or judging.verdict == INTERRUPT)  # (no partials of an echo)
            and seg.in_speech
            and interval > 0
            and seg.offset - self._last_partial >= interval
            and queued < s.backlog_s * SAMPLE_RATE
            and self._idle()
        ):
            self._last_partial = seg.offset
            onset = seg.speech_onset
            assert onset is not None
            audio = seg.current_audio()
            self._submit(
                _Job("partial", self._utt_id, audio, self.stamp(onset), self.stamp(seg.offset))
            )
        return self.take_events()

    def _cancel(
        self, chunk: np.ndarray, stamp_ns: int, reference_ready: bool
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """aec: the block with the robot's echo taken out (by our canceller; an external one
        has done it already), and what the VAD hears of it while the robot speaks (None: the
        block itself)."""
        s, speaking = self.settings, self._robot_speaking
        if self.canceller is None:
            # cancelled elsewhere (PulseAudio's WebRTC canceller left 17-30 dB less echo here):
            # its residue is speech-shaped too, and only its level tells it from the user
            if not speaking:
                return chunk, None
            return chunk, residual_gate(chunk, None, s.aec_residual_db, s.aec_residual_ratio_db)
        if not reference_ready and speaking:
            return chunk, np.zeros_like(chunk)  # deaf for this block, rather than fooled
        mic, chunk = chunk, self.canceller.process(chunk, stamp_ns)
        if not speaking:
            return chunk, None
        return chunk, residual_gate(chunk, mic, s.aec_residual_db, s.aec_residual_ratio_db)

    def audio_stopped(self, why: str = "audio_stopped") -> list[ListenerEvent]:
        """No audio has come for a while (a bag or file ended, the device or its publisher went
        away; ``why``: "deactivated" when the node stops listening) with an utterance open: end
        it with what was heard, rather than hold the user's words until audio comes back,
        which may be never. Returns the events (as ``push``)."""
        self._end_open(why)
        return self.take_events()

    def audio_lost(self, samples: int) -> list[ListenerEvent]:
        """``samples`` of audio were dropped before they reached the listener (a flood beyond
        the node's queue): an open utterance ends with what was heard (``audio_lost``) rather
        than splice the words on both sides of the gap into one, and the stream position moves
        over the gap (the VAD starts afresh after it). Returns the events (as ``push``)."""
        if samples > 0:
            self._end_open("audio_lost")
            self._drop_early()
            self.vad.skip(samples)
            self.lost_samples += samples
        return self.take_events()

    def _end_open(self, why: str) -> None:
        seg = self.vad
        if seg.in_speech:
            silence_ms = seg.silence_samples * 1000 / SAMPLE_RATE
            # the silence in progress, if any, ends it where the VAD would have; else the buffer
            # (flush: the one SpeechEnd of the open utterance)
            self._final(seg.end_now() or seg.flush()[0], (why, silence_ms))

    def drain(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the transcriptions already submitted (a final owed to
        the user); they run in order, so the latest one done means all are. False when they
        are still running (a transcription cannot be stopped midway)."""
        job = self._last_job
        if job is None:
            return True
        try:
            job.result(timeout)
        except (TimeoutError, futures.TimeoutError):  # (two classes before Python 3.11)
            return False
        except futures.CancelledError:
            pass
        return True

    def take_events(self) -> list[ListenerEvent]:
        """Events produced since the last call (only without ``emit``)."""
        with self._collected_lock:
            events, self._collected = self._collected, []
        return events

    def stamp(self, offset: int) -> int:
        """Nanosecond stamp of sample ``offset``, through the latest block's stamp."""
        anchor_offset, anchor_ns = self._anchor
        return anchor_ns + (offset - anchor_offset) * _NS // SAMPLE_RATE

    # --- decisions (pushing thread) ----------------------------------------------------------
    def _cold(self) -> bool:
        """The echo canceller is still learning the room (aec, our own canceller; an external
        one has learnt it)."""
        return not getattr(self.canceller, "converged", True)

    def _voiced_ms(self, end: int) -> float:
        """How long the voice of the utterance being judged has lasted at sample ``end``."""
        judging = self._judging
        return 0.0 if judging is None else (end - judging.onset) * 1000 / SAMPLE_RATE

    def _set_sensitivity(self) -> None:
        s = self.settings
        if s.echo_mode == "aec" and not self._cold():
            wanted = (s.aec_threshold, s.aec_min_ms)
        else:
            wanted = (s.barge_in_threshold, s.barge_in_min_ms)
        if wanted != self._sensitivity_set:
            self.vad.set_sensitivity(*wanted)
            self._sensitivity_set = wanted

    def _judge_barge_in(self) -> None:
        """aec, an utterance begun over the robot and not yet judged: interrupt once the voice
        is long enough, else ask for a quick transcript of the words so far (when the runner is
        free; its job judges them)."""
        judging, seg = self._judging, self.vad
        if judging is None or judging.verdict != UNDECIDED:
            return
        # the voice's length: a silence in progress (the VAD waiting for the end) is no voice
        voiced_ms = self._voiced_ms(seg.offset - seg.silence_samples)
        verdict = self.judge.judge(
            None,
            voiced_ms,
            False,
            echo_so_far=judging.words_so_far_harmless,
            stop_words_only=self._cold(),
        )
        if verdict == INTERRUPT:
            self._decide(judging, INTERRUPT, f"{voiced_ms / 1000:.1f} s of voice")
            return
        probe = self.settings.barge_in_probe_ms * SAMPLE_RATE // 1000
        if probe > 0 and seg.offset - judging.last_probe >= probe and self._idle():
            judging.last_probe = seg.offset
            onset = seg.speech_onset
            assert onset is not None
            job = _Job(
                "probe",
                self._utt_id,
                seg.current_audio(),
                self.stamp(onset),
                self.stamp(seg.offset),
                judging=judging,
                voiced_ms=voiced_ms,
            )
            self._submit(job)

    def _decide(self, judging: _Judging, verdict: str, why: str) -> None:
        """Settle ``judging`` (either thread; once); an interruption is announced as a barge-in
        (``speaking``, ``barge_in``, the onset's stamp)."""
        with self._judge_lock:
            if judging.verdict != UNDECIDED:
                return
            judging.verdict = verdict
            self.barge_in_verdicts[verdict] += 1
        with self._robot_lock:  # the speech it was said over still going on?
            ongoing = self._robot_said and self._robot_turns == judging.robot_turn
        late = "" if ongoing or verdict != INTERRUPT else " (the robot's speech is over)"
        log.info(f"utterance {judging.utt_id} over the robot: {verdict}, from {why}{late}")
        if verdict == INTERRUPT and ongoing:
            # (decided after the robot finished, nothing is left to stop: a barge-in then
            # would stop the robot's next turn instead; the words still come as a turn)
            event = VoiceActivityEvent(judging.utt_id, True, True, judging.onset_ns)
            self._deliver_voice(event)

    def _apply_robot_state(self, stamp_ns: int) -> None:
        with self._robot_lock:
            speaking, stopped = self._robot_said, self._robot_stopped
            quiet_ns = self._robot_quiet_ns
            lead_ns = (quiet_ns - stamp_ns) if stopped and quiet_ns is not None else 0
            if 0 < lead_ns <= ROBOT_STOP_MAX_LEAD_S * _NS and self._robot_speaking:
                return  # this block was recorded before the robot stopped: still its voice
            self._robot_stopped, self._robot_quiet_ns = False, None
        if stopped:
            self._quiet_from = self.vad.offset
        self._robot_speaking = speaking

    def _in_echo_tail(self) -> bool:
        quiet = self._quiet_from
        tail = self.settings.echo_tail_ms * SAMPLE_RATE // 1000
        return quiet is not None and self.vad.offset - quiet < tail

    def _echo_gated(self, samples: int) -> int:
        """How many of the next ``samples`` are the robot's: all while it speaks, then those
        within the tail (``echo_tail_ms`` of audio from the first block pushed after the stop),
        so a long block is gated for the tail only, not to its end."""
        if self._robot_speaking:
            return samples
        quiet = self._quiet_from
        if quiet is None:
            return 0
        tail = self.settings.echo_tail_ms * SAMPLE_RATE // 1000
        left = tail - (self.vad.offset - quiet)
        if left <= 0:
            return 0
        # whole VAD windows: the windows stay in step with the blocks (a skip restarts them;
        # 512-sample blocks are gated whole, as before), at most one window past the tail
        return min(samples, -(-left // WINDOW) * WINDOW)

    def _drop_early(self) -> _Early | None:
        """Make the early transcript in progress stale (None if there was none), under the lock the
        whisper thread publishes it under."""
        with self._spec_lock:
            spec, self._early = self._early, None
            if spec is not None:
                spec.stale = True
        return spec

    def _idle(self) -> bool:
        return self._last_job is None or self._last_job.done()

    def _submit(self, job: _Job) -> None:
        job = replace(job, submitted=self._clock())
        self._last_job = self._runner.submit(lambda: self._run_guarded(job))

    def _transcribe_early(self) -> None:
        """Start (or invalidate) the early final for the silence in progress."""
        seg = self.vad
        spec, end = self._early, seg.pending_end
        if spec is not None and spec.end != end:
            self._drop_early()  # speech resumed (or a new silence began): forget it
            spec = None
            # what was started from it (a preemptive answer) must be discarded
            self._resumed(seg.offset)
        if spec is None and end is not None and self.settings.early_final:
            start, onset = seg.speech_start, seg.speech_onset
            assert start is not None and onset is not None
            audio = seg.audio_between(start, end)
            spec = _Early(self._utt_id, start, onset, end, self.stamp(onset), self.stamp(end))
            self._early = spec
            job = _Job(
                "early",
                spec.utt_id,
                audio,
                spec.start_ns,
                spec.end_ns,
                spec,
                judging=self._judging,
                voiced_ms=self._voiced_ms(end),
            )
            self._submit(job)

    def _end_from_words(self) -> None:
        """Semantic end of turn: end the utterance now if the words before this silence are
        complete and the silence has lasted ``complete_silence_ms``."""
        with self._hints_lock:
            hints, self._hints = self._hints, []
        for hint in hints:
            self.end_of_turn.hint(*hint)
        spec, seg = self._early, self.vad
        confidence = last_word = 1.0
        if spec is None or spec.stale or not spec.ran or spec.failed or spec.result is None:
            text = None
        else:
            text = spec.result.text
            confidence = float(getattr(spec.result, "confidence", 1.0))
            last_word = float(getattr(spec.result, "last_word_confidence", 1.0))
        silence_ms = seg.silence_samples * 1000 / SAMPLE_RATE
        decision = self.end_of_turn.should_end(text, silence_ms, confidence, last_word)
        if decision is None:
            return
        event = seg.end_now()
        if event is None:
            return
        assert spec is not None
        spec.ended_by, spec.silence_ms = decision.source, silence_ms
        self._final(event)

    def _final(self, event: SpeechEnd, ended: tuple[str, float] | None = None) -> None:
        """The end of speech now; the transcript follows from the runner. ``ended``: (why,
        silence ms) when neither the silence nor the words ended it."""
        with self._spec_lock:
            spec, self._early = self._early, None
            same = spec is not None and (spec.start, spec.end) == (event.start, event.end)
            reuse = same and not spec.stale
            if spec is not None and not reuse:
                spec.stale = True
        if spec is not None and not same and not event.forced:
            # the user went on after the early transcript's silence and the utterance ended within
            # the same block (a long one): what was started from it must be discarded too (a
            # forced end, max_speech_s in the pause, is no resumption)
            self._resumed(spec.end)
        self._voice(False, event.end)
        if reuse:
            start_ns, end_ns = spec.start_ns, spec.end_ns
        else:
            start_ns, end_ns = self.stamp(event.onset), self.stamp(event.end)
        if ended is None and reuse and spec.ended_by != "silence":
            ended = (spec.ended_by, spec.silence_ms)
        elif ended is None:
            ended = ("silence", 0.0 if event.forced else float(self.vad.config.min_silence_ms))
        job = _Job(
            "final",
            self._utt_id,
            event.audio,
            start_ns,
            end_ns,
            spec if reuse else None,
            ended,
            judging=self._judging,
            voiced_ms=self._voiced_ms(event.end),
        )
        self._submit(job)

    def _voice(self, speaking: bool, offset: int) -> None:
        stamp = self.stamp(offset)
        self._deliver_voice(VoiceActivityEvent(self._utt_id, speaking, self._utt_barge, stamp))

    def _resumed(self, offset: int) -> None:
        stamp = self.stamp(offset)
        self._deliver_voice(
            VoiceActivityEvent(self._utt_id, True, self._utt_barge, stamp, resumed=True)
        )

    def _deliver_voice(self, event: VoiceActivityEvent) -> None:
        """A voice event that cannot be delivered is logged and counted, and the utterance goes
        on: raising here would lose its final (the end of speech is already decided)."""
        try:
            self._deliver(event)
        except Exception as exc:
            self.delivery_failures += 1
            log.error(f"utterance {event.utterance_id}: voice activity not delivered ({exc!r})")

    # --- jobs (runner thread) -----------------------------------------------------------------
    def _run_guarded(self, job: _Job) -> None:
        """A job that never raises into its runner's future (nobody reads it): whatever fails
        is reported as ``TranscriptionFailed``, and logged when even that cannot be delivered."""
        try:
            self._run(job)
        except Exception as exc:
            if job.early is not None and job.kind == "early":
                job.early.failed = job.early.ran = True
            try:
                self._deliver(TranscriptionFailed(job.utt_id, job.kind, repr(exc)))
            except Exception as again:
                log.error(
                    f"utterance {job.utt_id}: {job.kind} job failed ({exc!r}) and the "
                    f"failure could not be reported ({again!r})"
                )

    def _run(self, job: _Job) -> None:
        spec = job.early
        timing = _Timing(self._clock() - job.submitted)
        if job.kind == "early":
            assert spec is not None
            if spec.stale:
                spec.ran = True
                return
            ok, result = self._transcribe(job, final=True, timing=timing)
            spec.result, spec.failed, spec.ran = result, not ok, True
            # the words before the pause: an interruption stops the robot before the LLM sees
            # them; a backchannel is flagged (if the user goes on, the final judges again)
            verdict = self._judge_words(job, result, settle=False)
            with self._spec_lock:  # (published before any "resumed" that makes it stale)
                heard = result is not None and verdict != ECHO  # the LLM never answers its echo
                if heard and not spec.stale and self._early is spec:
                    backchannel = verdict == BACKCHANNEL
                    self._transcript(job, result, False, timing, True, backchannel)
        elif job.kind == "probe":
            judging = job.judging
            if judging is None or judging.verdict != UNDECIDED:
                return  # settled while it waited
            ok, result = self._transcribe(job, final=False, timing=timing)
            text = result.text if ok and result is not None else None
            lines = self.robot_lines()
            self._note_words(judging, text, lines, job.voiced_ms)
            verdict = self.judge.judge(
                text,
                job.voiced_ms,
                False,
                lines,
                echo_so_far=judging.words_so_far_harmless,
                stop_words_only=self._cold(),
                confidence=_confidence(result),
                stop_word_before=judging.stop_word_heard,
            )
            if text is not None:  # (a failed or empty probe heard nothing either way)
                judging.stop_word_heard = self.judge.has_stop_word(text, lines)
            if verdict == INTERRUPT:
                why = f"quick transcript {text!r} (confidence {_confidence(result):.2f})"
                self._decide(judging, INTERRUPT, why)
        elif job.kind == "partial":
            ok, result = self._transcribe(job, final=False, timing=timing)
            if result is not None:
                self._transcript(job, result, False, timing)
        else:
            if spec is not None and spec.ran and not spec.failed:
                ok, result = True, spec.result  # its job ran before this one
            else:
                ok, result = self._transcribe(job, final=True, timing=timing)
            if not ok:
                return
            verdict = self._judge_words(job, result, settle=True)
            if result is None or verdict == ECHO:
                self._deliver(NoSpeech(job.utt_id, "echo" if result is not None else "no_speech"))
                return
            self._transcript(job, result, True, timing, backchannel=verdict == BACKCHANNEL)
            ended_by, silence_ms = job.ended
            self._deliver(FinalMetrics(job.utt_id, job.end_ns, ended_by, silence_ms))

    def _judge_words(self, job: _Job, result: Any, settle: bool) -> str:
        """The verdict on the words of an early or final transcript of an utterance being
        judged (aec; UNDECIDED for any other): an interruption is announced now. ``settle``:
        the final, whose verdict stands (the early one's may change if the user goes on)."""
        judging = job.judging
        if judging is None:
            return UNDECIDED
        text = result.text if result is not None else None
        lines = self.robot_lines()
        if judging.verdict not in (UNDECIDED, ECHO):
            # an interruption stays one, whatever the words say, except that a final heard as
            # the robot's own words (no stop word of the user's) is dropped: the quick
            # transcript that judged it had misheard the echo
            if settle and judging.verdict == INTERRUPT and text is not None:
                again = self.judge.judge(text, job.voiced_ms, True, lines)
                if again == ECHO:
                    log.info(f"utterance {job.utt_id}: judged an interruption, heard as echo")
                    return ECHO
            return judging.verdict
        confidence = _confidence(result)
        verdict = self.judge.judge(
            text, job.voiced_ms, True, lines, stop_words_only=self._cold(), confidence=confidence
        )
        self._note_words(judging, text, lines, job.voiced_ms)
        if text is not None:
            judging.stop_word_heard = self.judge.has_stop_word(text, lines)
        if verdict == INTERRUPT or settle:
            why = (
                f"{job.kind} transcript {text!r} (confidence {confidence:.2f}) over "
                f"{job.voiced_ms / 1000:.1f} s of voice"
            )
            self._decide(judging, verdict, why)
        return verdict

    def _note_words(
        self, judging: _Judging, text: str | None, lines: RobotLines, voiced_ms: float
    ) -> None:
        """Whether the latest words leave the voice's length meaningless: the robot's echo,
        backchannels, or words heard in noise (the residue around a "yeah" is no request)."""
        if text is None:
            return
        judge = self.judge
        harmless = (
            judge.is_echo(text, lines)
            or not judge.new_words(text, lines)
            or judge.heard_in_noise(text, voiced_ms)
        )
        judging.words_so_far_harmless = harmless

    def _transcribe(self, job: _Job, final: bool, timing: _Timing) -> tuple[bool, Any]:
        t0 = self._clock()
        try:
            return True, self._transcriber.transcribe(job.audio, final=final)
        except Exception as exc:  # a failed transcription must not end the listener
            self._deliver(TranscriptionFailed(job.utt_id, job.kind, repr(exc)))
            return False, None
        finally:
            timing.transcribe_s = self._clock() - t0

    def _transcript(
        self,
        job: _Job,
        result: Any,
        final: bool,
        timing: _Timing,
        early: bool = False,
        backchannel: bool = False,
    ) -> None:
        event = TranscriptEvent(
            job.utt_id,
            result.text,
            final,
            float(result.confidence),
            result.language,
            job.start_ns,
            job.end_ns,
            early,
            backchannel,
            timing.queued_s,
            timing.transcribe_s,
        )
        self._deliver(event)

    def _deliver(self, event: ListenerEvent) -> None:
        if self._emit is not None:
            self._emit(event)
        else:
            with self._collected_lock:
                self._collected.append(event)

"""The ASR stage's logic (core/asr/listener.py), synchronously: audio pushed block by block,
events asserted; a scripted VAD model and a fake transcriber (the real Silero VAD on the Piper
speech fixture in the last test). No ROS, no sleeps."""

from __future__ import annotations

import time
from concurrent.futures import Future

import numpy as np
import pytest

from bolt_agent.core.asr.asr_engine import AsrResult
from bolt_agent.core.asr.audio_ingest import StreamGaps
from bolt_agent.core.asr.listener import (
    FinalMetrics,
    Listener,
    ListenerSettings,
    NoSpeech,
    TranscriptEvent,
    TranscriptionFailed,
    VoiceActivityEvent,
)
from bolt_agent.core.asr.vad_segmenter import WINDOW, VadConfig, VadSegmenter
from support.audio_fixtures import speech_wav  # noqa: F401 - fixture
from support.listener import BASE, NS_PER_SAMPLE, ByPosition, at, block_stamp


class FakeAsr:
    """Records (final, first sample, last sample + 1) of each call; the text names the span.
    ``script``: per call, None (no speech), an exception to raise, or ... (a result)."""

    def __init__(self, script: list | None = None) -> None:
        self.calls: list[tuple[bool, int, int]] = []
        self.script = list(script or [])

    def transcribe(self, audio: np.ndarray, final: bool = True) -> AsrResult | None:
        span = (int(audio[0]), int(audio[-1]) + 1)
        self.calls.append((final, *span))
        outcome = self.script.pop(0) if self.script else ...
        if isinstance(outcome, Exception):
            raise outcome
        if outcome is None:
            return None
        return AsrResult(f"{span[0]}-{span[1]}", 0.75, "en", 0.0)


class ManualRunner:
    """Holds jobs until ``run_all`` (a busy transcriber)."""

    def __init__(self) -> None:
        self.jobs: list[tuple] = []

    def submit(self, fn) -> Future:
        future: Future = Future()
        self.jobs.append((fn, future))
        return future

    def run_all(self) -> None:
        while self.jobs:
            fn, future = self.jobs.pop(0)
            future.set_result(fn())


def make(
    probs: list[float],
    config: VadConfig,
    asr: FakeAsr | None = None,
    runner: ManualRunner | None = None,
    emit=None,
    clock=time.monotonic,
    **settings,
) -> tuple[Listener, FakeAsr]:
    """A listener over the scripted VAD; ``settings``: ListenerSettings fields."""
    asr = asr or FakeAsr()
    vad = VadSegmenter(config, ByPosition(probs))
    listener = Listener(asr, ListenerSettings(**settings), vad, runner, emit, clock)
    return listener, asr


def feed(listener: Listener, blocks: range, queued: int = 0) -> list[tuple[int, object]]:
    """(block index, event) for every event the blocks produced."""
    out = []
    for k in blocks:
        a = k * WINDOW
        block = np.arange(a, a + WINDOW, dtype=np.float32)
        out += [(k, e) for e in listener.push(block, block_stamp(k), queued=queued)]
    return out


def at2(k: int, a: int, b: int) -> tuple[int, int]:
    return at(k, a), at(k, b)


def text(a: int, b: int) -> str:
    return f"{a}-{b}"


def test_voice_activity_final_and_metrics_with_stamps_from_sample_offsets():
    probs = [0.0] * 10 + [0.9] * 20 + [0.0] * 30
    config = VadConfig(min_speech_ms=150, min_silence_ms=300, speech_pad_ms=64, start_pad_ms=128)
    listener, asr = make(probs, config, early_final=False, partial_interval_s=0.0)
    events = feed(listener, range(len(probs)))
    uid = events[0][1].utterance_id
    assert uid.startswith("u") and len(uid) == 11
    onset, start, end = 10 * WINDOW, 10 * WINDOW - 2048, 30 * WINDOW + 1024
    assert events == [
        (14, VoiceActivityEvent(uid, True, False, at(14, onset))),  # 5 windows = 150 ms found
        (39, VoiceActivityEvent(uid, False, False, at(39, end))),  # 300 ms of silence confirmed
        (39, TranscriptEvent(uid, text(start, end), True, 0.75, "en", at(39, onset), at(39, end))),
        (39, FinalMetrics(uid, at(39, end), "silence", 300.0)),
    ]
    assert asr.calls == [(True, start, end)]  # the padded audio, once


def test_audio_that_stops_mid_utterance_ends_it_with_what_was_heard():
    config = VadConfig(min_speech_ms=150, min_silence_ms=300, speech_pad_ms=64, start_pad_ms=128)
    onset, start = 10 * WINDOW, 10 * WINDOW - 2048

    # the source stops while the user speaks: the final holds everything up to the last block
    listener, asr = make([0.0] * 10 + [0.9] * 20, config, early_final=False)
    events = feed(listener, range(30))
    uid = events[0][1].utterance_id
    end = 30 * WINDOW
    assert listener.audio_stopped() == [
        VoiceActivityEvent(uid, False, False, at(29, end)),
        TranscriptEvent(uid, text(start, end), True, 0.75, "en", at(29, onset), at(29, end)),
        FinalMetrics(uid, at(29, end), "audio_stopped", 0.0),
    ]
    assert asr.calls == [(True, start, end)]
    assert listener.audio_stopped() == []  # said once; nothing open any more

    # it stops 160 ms into a silence: the end is where the VAD would have put it (padded)
    listener, asr = make([0.0] * 10 + [0.9] * 20 + [0.0] * 5, config, early_final=False)
    events = feed(listener, range(35))
    uid = events[0][1].utterance_id
    end = 30 * WINDOW + 1024
    assert listener.audio_stopped() == [
        VoiceActivityEvent(uid, False, False, at(34, end)),
        TranscriptEvent(uid, text(start, end), True, 0.75, "en", at(34, onset), at(34, end)),
        FinalMetrics(uid, at(34, end), "audio_stopped", 5 * WINDOW * 1000 / 16000),
    ]

    # no utterance open: nothing to end, and the next speech is heard as usual
    listener, asr = make([0.0] * 10 + [0.9] * 20 + [0.0] * 30, config, early_final=False)
    assert feed(listener, range(5)) == [] and listener.audio_stopped() == []
    events = feed(listener, range(5, 60))
    finals = [e for _, e in events if isinstance(e, FinalMetrics)]
    assert [e.ended_by for e in finals] == ["silence"]


def test_audio_dropped_upstream_ends_the_utterance_and_is_skipped_over():
    """A flood beyond the node's queue drops blocks: the words on both sides of the gap are
    not spliced into one utterance, and what follows keeps its true stream position."""
    config = VadConfig(min_speech_ms=150, min_silence_ms=300, speech_pad_ms=64, start_pad_ms=128)
    probs = [0.0] * 10 + [0.9] * 30 + [0.0] * 30
    listener, asr = make(probs, config, early_final=False, partial_interval_s=0.0)
    events = feed(listener, range(20))  # blocks 20..29 are dropped before the listener
    assert asr.calls == []
    uid = events[0][1].utterance_id
    onset, start, cut = 10 * WINDOW, 10 * WINDOW - 2048, 20 * WINDOW
    assert listener.audio_lost(10 * WINDOW) == [
        VoiceActivityEvent(uid, False, False, at(19, cut)),
        TranscriptEvent(uid, text(start, cut), True, 0.75, "en", at(19, onset), at(19, cut)),
        FinalMetrics(uid, at(19, cut), "audio_lost", 0.0),
    ]
    assert listener.lost_samples == 10 * WINDOW and listener.vad.offset == 30 * WINDOW
    events = feed(listener, range(30, 70))  # speech again right after the gap: a new utterance
    second = events[0][1].utterance_id
    assert second != uid
    end = 40 * WINDOW + 1024
    assert [e for _, e in events if isinstance(e, TranscriptEvent)] == [
        TranscriptEvent(second, text(30 * WINDOW, end), True, 0.75, "en", at(49, 30 * WINDOW),
                        at(49, end)),
    ]  # fmt: skip
    assert asr.calls == [(True, start, cut), (True, 30 * WINDOW, end)]  # never across the gap
    assert listener.audio_lost(0) == [] and listener.audio_lost(WINDOW) == []  # nothing open


def test_partials_every_interval_of_speech_and_skipped_under_backlog():
    probs = [0.0] * 4 + [0.9] * 120 + [0.0] * 40
    config = VadConfig(min_speech_ms=150, min_silence_ms=300, speech_pad_ms=0, start_pad_ms=0)
    onset = 4 * WINDOW

    def partials(events):
        return [
            (k, e.audio_start_ns, e.audio_end_ns, e.text)
            for k, e in events
            if isinstance(e, TranscriptEvent) and not e.is_final
        ]

    listener, asr = make(probs, config, early_final=False, partial_interval_s=1.0)
    events = feed(listener, range(len(probs)))
    # 1 s (16000 samples) of speech after the start, at the first block boundary past it
    expected = [(k, (k + 1) * WINDOW) for k in (35, 67, 99, 131)]
    assert partials(events) == [
        (k, at(k, onset), at(k, end), text(onset, end)) for k, end in expected
    ]
    assert [c for c in asr.calls if not c[0]] == [(False, onset, end) for _, end in expected]
    finals = [e for _, e in events if isinstance(e, TranscriptEvent) and e.is_final]
    assert len(finals) == 1 and finals[0].audio_end_ns == at(133, 124 * WINDOW)

    # half a second of audio queued behind the blocks: no partial until the backlog drains
    listener, asr = make(probs, config, early_final=False, partial_interval_s=1.0)
    behind = feed(listener, range(51), queued=8000)
    assert not partials(behind) and asr.calls == []
    events = behind + feed(listener, range(51, len(probs)), queued=7999)
    expected = [(k, (k + 1) * WINDOW) for k in (51, 83, 115)]
    assert [(k, end) for k, _, end, _ in partials(events)] == [(k, at(k, e)) for k, e in expected]


def test_no_partial_while_the_transcriber_is_busy():
    probs = [0.0] * 4 + [0.9] * 120 + [0.0] * 40
    config = VadConfig(min_speech_ms=150, min_silence_ms=300, speech_pad_ms=0, start_pad_ms=0)
    runner, seen = ManualRunner(), []
    listener, asr = make(
        probs,
        config,
        early_final=False,
        partial_interval_s=1.0,
        runner=runner,
        emit=seen.append,
    )
    assert feed(listener, range(81)) == []  # with emit, events go there, not back from push
    assert len(runner.jobs) == 1 and asr.calls == []  # the partial of block 35, still waiting
    runner.run_all()
    assert asr.calls == [(False, 4 * WINDOW, 36 * WINDOW)]
    assert isinstance(seen[-1], TranscriptEvent) and not seen[-1].is_final
    feed(listener, range(81, 82))  # idle again, and more than 1 s since block 35
    runner.run_all()
    assert asr.calls[-1] == (False, 4 * WINDOW, 82 * WINDOW)


def test_early_final_is_published_early_and_reused_when_the_end_is_confirmed():
    probs = [0.0] * 4 + [0.9] * 30 + [0.0] * 30
    config = VadConfig(min_speech_ms=150, min_silence_ms=300, speech_pad_ms=64, start_pad_ms=0)
    listener, asr = make(probs, config, early_final=True, partial_interval_s=0.0)
    events = feed(listener, range(len(probs)))
    onset, end = 4 * WINDOW, 34 * WINDOW + 1024  # the first silent window + 64 ms
    uid = events[0][1].utterance_id
    assert events == [
        (8, VoiceActivityEvent(uid, True, False, at(8, onset))),
        # as soon as the padded end is buffered, 8 blocks before the VAD confirms it
        (
            35,
            TranscriptEvent(
                uid, text(onset, end), False, 0.75, "en", at(35, onset), at(35, end), True
            ),
        ),
        (43, VoiceActivityEvent(uid, False, False, at(43, end))),
        # the final reuses the early transcript: its result and its very span (stamps of block 35)
        (43, TranscriptEvent(uid, text(onset, end), True, 0.75, "en", at(35, onset), at(35, end))),
        (43, FinalMetrics(uid, at(35, end), "silence", 300.0)),
    ]
    assert asr.calls == [(True, onset, end)]  # whisper ran once: the final reused it


# speech, a 6-window pause (shorter than min_silence), speech again, then a long silence
PAUSE = [0.0] * 4 + [0.9] * 20 + [0.0] * 6 + [0.9] * 10 + [0.0] * 30
PAUSE_CONFIG = VadConfig(min_speech_ms=150, min_silence_ms=400, speech_pad_ms=64, start_pad_ms=0)
ONSET, PAUSE_END, REAL_END = 4 * WINDOW, 24 * WINDOW + 1024, 40 * WINDOW + 1024


def test_early_transcript_for_a_pause_is_dropped_when_speech_resumes():
    listener, asr = make(PAUSE, PAUSE_CONFIG, early_final=True, partial_interval_s=0.0)
    events = feed(listener, range(len(PAUSE)))
    texts = [
        (k, e.text, e.is_final, e.audio_end_ns) for k, e in events if isinstance(e, TranscriptEvent)
    ]
    assert texts == [
        (25, text(ONSET, PAUSE_END), False, at(25, PAUSE_END)),  # the pause looked like an end
        (41, text(ONSET, REAL_END), False, at(41, REAL_END)),  # the real end
        (52, text(ONSET, REAL_END), True, at(41, REAL_END)),  # the early transcript's span
    ]
    assert asr.calls == [(True, ONSET, PAUSE_END), (True, ONSET, REAL_END)]
    stop = [e for _, e in events if isinstance(e, VoiceActivityEvent) and not e.speaking]
    assert [e.stamp_ns for e in stop] == [at(52, REAL_END)]


def test_stale_early_transcript_is_never_transcribed_nor_published_by_a_busy_transcriber():
    runner, seen = ManualRunner(), []
    listener, asr = make(
        PAUSE,
        PAUSE_CONFIG,
        early_final=True,
        partial_interval_s=0.0,
        runner=runner,
        emit=seen.append,
    )
    feed(listener, range(len(PAUSE)))
    assert len(runner.jobs) == 3 and asr.calls == []  # pause, real end, final: all queued
    runner.run_all()
    assert asr.calls == [(True, ONSET, REAL_END)]  # the stale one skipped; the final reused
    uid = seen[0].utterance_id
    assert seen == [
        VoiceActivityEvent(uid, True, False, at(8, ONSET)),
        # speech resumed after the pause's early transcript was started: whatever was started from
        # it (a preemptive answer) must be discarded
        VoiceActivityEvent(uid, True, False, at(30, 31 * WINDOW), resumed=True),
        VoiceActivityEvent(uid, False, False, at(52, REAL_END)),
        # the early result came after the end: published once, as the final
        TranscriptEvent(
            uid, text(ONSET, REAL_END), True, 0.75, "en", at(41, ONSET), at(41, REAL_END)
        ),
        FinalMetrics(uid, at(41, REAL_END), "silence", 400.0),
    ]


def test_echo_gate_ignores_the_mic_while_the_robot_speaks_and_for_the_tail():
    # two utterances: windows 4-33 (robot speaking) and 64-93 (the robot stops at 64)
    probs = [0.0] * 4 + [0.9] * 30 + [0.0] * 30 + [0.9] * 30 + [0.0] * 30
    config = VadConfig(min_speech_ms=150, min_silence_ms=300, speech_pad_ms=0, start_pad_ms=0)
    # the wall clock stands still: all the audio comes in one burst (a stalled publisher, a bag
    # played fast), and the tail is still 300 ms of it
    listener, asr = make(
        probs,
        config,
        echo_mode="gate",
        echo_tail_ms=300,
        partial_interval_s=0.0,
        clock=lambda: 100.0,
    )
    listener.robot_speaking(True)
    assert feed(listener, range(64)) == [] and asr.calls == []
    assert listener.vad.offset == 64 * WINDOW  # skipped, the stream position kept
    listener.robot_speaking(False)
    # the tail: 300 ms = 4800 samples from block 64's start, so blocks 64-73 (73 starts 4608
    # samples in) are ignored and 74 is heard (whole VAD windows are gated)
    assert feed(listener, range(64, 70)) == []
    listener.robot_speaking(False)  # said again (a latched state re-sent): no new tail
    assert feed(listener, range(70, 74)) == []
    events = feed(listener, range(74, len(probs)))
    uid = events[0][1].utterance_id
    # heard from block 74 only: the VAD's onset is there, not at the speech's true start (64)
    assert [(k, e) for k, e in events if isinstance(e, VoiceActivityEvent)] == [
        (78, VoiceActivityEvent(uid, True, False, at(78, 74 * WINDOW))),
        (103, VoiceActivityEvent(uid, False, False, at(103, 94 * WINDOW))),
    ]
    assert asr.calls == [(True, 74 * WINDOW, 94 * WINDOW)]

    # the robot starts speaking in the middle of an utterance: it is closed and dropped
    listener, asr = make(probs, config, echo_mode="gate", partial_interval_s=0.0)
    events = feed(listener, range(12))
    listener.robot_speaking(True)
    events += feed(listener, range(12, len(probs)))
    uid = events[0][1].utterance_id
    assert events == [
        (8, VoiceActivityEvent(uid, True, False, at(8, 4 * WINDOW))),
        (12, VoiceActivityEvent(uid, False, False, at(12, 12 * WINDOW))),
    ]
    assert asr.calls == []


NO_PARTIALS = {"partial_interval_s": 0.0}


def push_span(listener: Listener, a: int, b: int) -> list:
    """One block of samples a..b (a long block, as a topic may carry: up to max_chunk_s)."""
    return listener.push(np.arange(a, b, dtype=np.float32), BASE + a * NS_PER_SAMPLE)


def test_echo_gate_on_a_long_block_gates_the_tail_only():
    """The tail ends inside a 1 s block: the rest of that block is heard (it was gated to the
    block's end: the user's first 0.7 s were lost), with stamps from the samples' offsets."""
    probs = [0.0] * 40 + [0.9] * 30 + [0.0] * 60  # the user speaks at 1.28-2.24 s
    config = VadConfig(min_speech_ms=150, min_silence_ms=300, speech_pad_ms=0, start_pad_ms=0)
    for block in (WINDOW, 16000):
        listener, asr = make(probs, config, echo_mode="gate", echo_tail_ms=300, **NO_PARTIALS)
        listener.robot_speaking(True)
        events = push_span(listener, 0, 16000)  # the robot speaks for the first second
        listener.robot_speaking(False)  # the tail: 300 ms of audio, to 1.3 s
        for a in range(16000, len(probs) * WINDOW, block):
            events += push_span(listener, a, min(a + block, len(probs) * WINDOW))
        # from the tail's end, 1.3 s, rounded up to whole VAD windows (5120 samples: 1.32 s),
        # whichever the block size; the windows start there (the speech ends in window 69's)
        heard = 16000 + 10 * WINDOW
        assert asr.calls == [(True, heard, heard + 29 * WINDOW)], block
        start = next(e for e in events if isinstance(e, VoiceActivityEvent) and e.speaking)
        assert start.stamp_ns == BASE + heard * NS_PER_SAMPLE, block


def test_a_resumption_and_an_end_in_one_long_block_still_say_the_user_went_on():
    """The pause's early transcript was published; the next block (1.4 s) holds the resumption and
    the end: "resumed" comes before the end of speech, as with short blocks."""
    seen: list = []
    listener, _ = make(PAUSE, PAUSE_CONFIG, emit=seen.append, **NO_PARTIALS)
    push_span(listener, 0, 26 * WINDOW)
    assert [e.early for e in seen if isinstance(e, TranscriptEvent)] == [True]
    push_span(listener, 26 * WINDOW, 70 * WINDOW)
    voice = [(e.speaking, e.resumed) for e in seen if isinstance(e, VoiceActivityEvent)]
    assert voice == [(True, False), (True, True), (False, False)]
    final = [e for e in seen if isinstance(e, TranscriptEvent) and e.is_final]
    assert [e.text for e in final] == [text(ONSET, REAL_END)]


def test_a_voice_event_that_cannot_be_delivered_loses_no_final():
    seen, failed = [], []

    def emit(event) -> None:
        if isinstance(event, VoiceActivityEvent) and not event.speaking and not failed:
            failed.append(event)
            raise RuntimeError("publisher gone")
        seen.append(event)

    listener, asr = make(PAUSE, PAUSE_CONFIG, emit=emit, early_final=False, **NO_PARTIALS)
    feed(listener, range(len(PAUSE)))  # never raises
    assert failed and listener.delivery_failures == 1
    assert [e.text for e in seen if isinstance(e, TranscriptEvent) and e.is_final] == [
        text(ONSET, REAL_END)
    ]
    assert asr.calls == [(True, ONSET, REAL_END)]


def test_echo_gate_drops_a_pending_early_transcript_with_its_utterance():
    runner, seen = ManualRunner(), []
    listener, asr = make(
        PAUSE,
        PAUSE_CONFIG,
        echo_mode="gate",
        partial_interval_s=0.0,
        runner=runner,
        emit=seen.append,
    )
    feed(listener, range(26))  # the pause's early transcript is queued (block 25)
    listener.robot_speaking(True)
    feed(listener, range(26, len(PAUSE)))
    runner.run_all()
    uid = seen[0].utterance_id
    assert seen == [
        VoiceActivityEvent(uid, True, False, at(8, ONSET)),
        VoiceActivityEvent(uid, False, False, at(26, 26 * WINDOW)),
    ]  # no partial after the utterance was closed
    assert asr.calls == []


def test_barge_in_needs_louder_longer_speech_and_flags_it():
    probs = (
        [0.7] * 20  # 0-19: speech-like but below the barge-in threshold
        + [0.0] * 5
        + [0.9] * 6  # 25-30: loud but shorter than 300 ms
        + [0.0] * 10
        + [0.9] * 15  # 41-55: a barge-in
        + [0.0] * 30
        + [0.7] * 15  # 86-100: after the robot stopped, 0.7 is speech again
        + [0.0] * 30
    )
    config = VadConfig(min_speech_ms=150, min_silence_ms=300, speech_pad_ms=0, start_pad_ms=0)
    listener, asr = make(
        probs,
        config,
        echo_mode="barge_in",
        barge_in_threshold=0.8,
        barge_in_min_ms=300,
        partial_interval_s=0.0,
        early_final=False,
    )
    listener.robot_speaking(True)
    events = feed(listener, range(86))
    listener.robot_speaking(False)
    events += feed(listener, range(86, len(probs)))
    va = [
        (k, e.speaking, e.barge_in, e.stamp_ns)
        for k, e in events
        if isinstance(e, VoiceActivityEvent)
    ]
    assert va == [
        (50, True, True, at(50, 41 * WINDOW)),  # 10 windows (320 ms) of speech over 0.8
        (65, False, True, at(65, 56 * WINDOW)),
        (90, True, False, at(90, 86 * WINDOW)),  # the normal 0.5 / 150 ms again
        (110, False, False, at(110, 101 * WINDOW)),
    ]
    finals = [e for _, e in events if isinstance(e, TranscriptEvent) and e.is_final]
    assert [e.text for e in finals] == [
        text(41 * WINDOW, 56 * WINDOW),
        text(86 * WINDOW, 101 * WINDOW),
    ]  # the barge-in is transcribed too
    assert asr.calls == [(True, 41 * WINDOW, 56 * WINDOW), (True, 86 * WINDOW, 101 * WINDOW)]

    # echo_mode off: the robot's speaking changes nothing
    listener, _ = make(probs, config, echo_mode="off", partial_interval_s=0.0)
    listener.robot_speaking(True)
    starts = [
        (k, e.barge_in)
        for k, e in feed(listener, range(len(probs)))
        if isinstance(e, VoiceActivityEvent) and e.speaking and not e.resumed
    ]
    assert starts == [(4, False), (45, False), (90, False)]  # 0-30 is one utterance


def test_a_transcription_error_is_an_event_and_the_listener_keeps_working():
    probs = ([0.0] * 4 + [0.9] * 20 + [0.0] * 16) * 3
    config = VadConfig(min_speech_ms=150, min_silence_ms=300, speech_pad_ms=0, start_pad_ms=0)
    asr = FakeAsr([RuntimeError("CUDA out of memory"), None])  # fails, then hears nothing
    listener, _ = make(probs, config, asr, early_final=False, partial_interval_s=0.0)
    events = [e for _, e in feed(listener, range(len(probs)))]
    uids = [e.utterance_id for e in events if isinstance(e, VoiceActivityEvent) and e.speaking]
    assert len(set(uids)) == 3
    after_stops = [e for e in events if not isinstance(e, VoiceActivityEvent)]
    third = 80 * WINDOW + 4 * WINDOW
    assert after_stops == [
        TranscriptionFailed(uids[0], "final", "RuntimeError('CUDA out of memory')"),
        NoSpeech(uids[1]),
        TranscriptEvent(
            uids[2],
            text(third, third + 20 * WINDOW),
            True,
            0.75,
            "en",
            at(113, third),
            at(113, third + 20 * WINDOW),
        ),
        FinalMetrics(uids[2], at(113, third + 20 * WINDOW), "silence", 300.0),
    ]

    # a failed early final: reported, and the final is transcribed again
    asr = FakeAsr([ValueError("bad audio")])
    listener, _ = make(probs[:40], config, asr, early_final=True, partial_interval_s=0.0)
    events = [e for _, e in feed(listener, range(40))]
    uid = events[0].utterance_id
    assert [type(e) for e in events] == [
        VoiceActivityEvent,
        TranscriptionFailed,
        VoiceActivityEvent,
        TranscriptEvent,
        FinalMetrics,
    ]
    assert events[1] == TranscriptionFailed(uid, "early", "ValueError('bad audio')")
    assert events[3].is_final and events[3].text == text(4 * WINDOW, 24 * WINDOW)
    assert asr.calls == [(True, 4 * WINDOW, 24 * WINDOW)] * 2


def test_a_job_that_fails_outside_the_transcriber_is_reported_not_lost_in_its_future():
    """The node's whisper futures are never read: an error after the transcription (here the
    publisher of the transcript raising) must still come out as an event."""
    probs = [0.0] * 4 + [0.9] * 20 + [0.0] * 16
    config = VadConfig(min_speech_ms=150, min_silence_ms=300, speech_pad_ms=0, start_pad_ms=0)
    delivered: list = []

    def emit(event) -> None:
        if isinstance(event, TranscriptEvent):
            raise RuntimeError("publisher gone")
        delivered.append(event)

    runner = ManualRunner()
    listener, _ = make(
        probs, config, runner=runner, emit=emit, early_final=False, partial_interval_s=0.0
    )
    feed(listener, range(len(probs)))
    runner.run_all()  # would raise here if the job's error escaped into its future
    uid = delivered[0].utterance_id
    assert delivered[-1] == TranscriptionFailed(uid, "final", "RuntimeError('publisher gone')")
    assert listener.push(np.zeros(WINDOW, np.float32), block_stamp(99)) == []  # goes on


def test_nan_and_inf_samples_never_reach_the_vad_or_the_transcriber():
    seen: list[np.ndarray] = []

    class Recording(ByPosition):
        def __call__(self, windows):
            seen.append(windows.copy())
            return super().__call__(np.zeros_like(windows))

    vad = VadSegmenter(VadConfig(), Recording([0.0]))
    listener = Listener(FakeAsr(), ListenerSettings(), vad)
    block = np.full(WINDOW, np.nan, np.float32)
    block[:3] = [np.inf, -np.inf, 0.5]
    listener.push(block.reshape(2, -1), BASE)
    assert seen and all(np.isfinite(w).all() for w in seen)
    assert seen[0][0, 2] == np.float32(0.5)  # real samples are kept as they are


def test_settings_reject_an_unknown_echo_mode_and_update_at_run_time():
    with pytest.raises(ValueError, match="echo_mode"):
        ListenerSettings(echo_mode="loud")
    probs = [0.0] * 4 + [0.9] * 60 + [0.0] * 20
    config = VadConfig(min_speech_ms=150, min_silence_ms=300, speech_pad_ms=0, start_pad_ms=0)
    listener, _ = make(probs, config, early_final=False, partial_interval_s=0.0)
    feed(listener, range(30))
    listener.update_settings(ListenerSettings(early_final=False, partial_interval_s=0.5))
    events = feed(listener, range(30, len(probs)))
    partial_ends = [k for k, e in events if isinstance(e, TranscriptEvent) and not e.is_final]
    # none before the update; at once after it (more than 0.5 s since the start), then every 0.5 s
    assert partial_ends == [30, 46, 62]


@pytest.mark.slow
def test_real_speech_with_silero_gives_one_final_per_utterance_at_its_boundaries(speech_wav):  # noqa: F811
    class Recorder:
        def __init__(self) -> None:
            self.calls: list[tuple[bool, int]] = []

        def transcribe(self, audio: np.ndarray, final: bool = True) -> AsrResult:
            self.calls.append((final, len(audio)))
            return AsrResult(f"{'final' if final else 'partial'} {len(audio)}", 0.9, "en", 0.0)

    asr = Recorder()
    listener = Listener(asr, ListenerSettings(partial_interval_s=0.8), VadSegmenter(VadConfig()))
    audio, events = speech_wav.audio, []
    for i in range(0, len(audio), 1600):  # 100 ms blocks, stamped by sample count
        events += listener.push(audio[i : i + 1600], BASE + i * NS_PER_SAMPLE)
    voice = [e for e in events if isinstance(e, VoiceActivityEvent)]
    starts = [e for e in voice if e.speaking and not e.resumed]
    stops = [e for e in voice if not e.speaking]
    finals = [e for e in events if isinstance(e, TranscriptEvent) and e.is_final]
    metrics = [e for e in events if isinstance(e, FinalMetrics)]
    assert len(starts) == len(stops) == len(finals) == len(metrics) == len(speech_wav.truth)
    for start, stop, final, m, (first, last) in zip(
        starts, stops, finals, metrics, speech_wav.truth, strict=True
    ):
        uid = start.utterance_id
        assert stop.utterance_id == final.utterance_id == m.utterance_id == uid
        assert abs(start.stamp_ns - (BASE + first * NS_PER_SAMPLE)) <= 0.2e9
        assert abs(stop.stamp_ns - (BASE + last * NS_PER_SAMPLE)) <= 0.2e9
        assert final.audio_start_ns == start.stamp_ns and final.audio_end_ns == stop.stamp_ns
        assert m.speech_end_ns == stop.stamp_ns
        mine = [e for e in events if getattr(e, "utterance_id", "") == uid]
        partials = [e for e in mine if isinstance(e, TranscriptEvent) and not e.is_final]
        # a sentence of 2 s or more: 0.8 s partials and the early transcript
        assert len(partials) >= 2
        assert mine.index(partials[-1]) < mine.index(stop) < mine.index(final)
        # the early final, over exactly the final's span, was published before the end
        spans = [(e.text, e.audio_end_ns) for e in partials]
        assert (final.text, final.audio_end_ns) in spans
    # every whole-utterance transcription was an early transcript published at once (a pause
    # inside a sentence may have given one more); none was repeated for a final
    early = [
        e for e in events if isinstance(e, TranscriptEvent) and not e.is_final and "final" in e.text
    ]
    assert sum(1 for final, _ in asr.calls if final) == len(early) >= len(finals)


def test_stream_gaps_are_found_by_the_stamps():
    ms = 1_000_000
    gaps = StreamGaps()  # tolerance 250 ms
    assert gaps.block(5_000 * ms, 100 * ms) == 0  # the first block: nothing to compare with
    assert gaps.block(5_100 * ms, 100 * ms) == 0  # contiguous
    assert gaps.block(5_400 * ms, 100 * ms) == 0  # 200 ms late: stamping jitter
    assert gaps.block(6_500 * ms, 100 * ms) == 1_000 * ms  # a second never came
    assert gaps.block(2_000 * ms, 100 * ms) == 0  # back in time (a bag again): afresh
    assert gaps.block(2_100 * ms, 100 * ms) == 0
    assert gaps.block(0, 100 * ms) == 0 and gaps.block(9_000 * ms, 100 * ms) == 0  # unstamped
    gaps.reset()
    assert gaps.block(20_000 * ms, 100 * ms) == 0
    gaps.tolerance_ns = None  # audio_gap_ms 0: never
    assert gaps.block(40_000 * ms, 100 * ms) == 0


def test_drain_waits_for_the_transcriptions_owed_and_is_bounded():
    config = VadConfig(min_speech_ms=150, min_silence_ms=300, speech_pad_ms=64, start_pad_ms=128)
    runner = ManualRunner()
    listener, asr = make(
        [0.0] * 10 + [0.9] * 20, config, runner=runner, early_final=False,
        partial_interval_s=0.0,
    )  # fmt: skip
    assert listener.drain(0.0)  # nothing submitted
    feed(listener, range(30))
    listener.audio_stopped("deactivated")  # the final is owed, its job waits in the runner
    assert not listener.drain(0.0) and asr.calls == []  # still owed: False, not a hang
    runner.run_all()
    assert listener.drain(0.0) and len(asr.calls) == 1

"""Speech core, synchronously: VAD segmentation, resampling, device selection, engines."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bolt_agent.core.asr.asr_engine import combine_segments
from bolt_agent.core.asr.vad_segmenter import (
    WINDOW,
    SpeechEnd,
    SpeechStart,
    VadConfig,
    VadSegmenter,
)
from bolt_agent.core.audio.audio_io import (
    DeviceInfo,
    DeviceNotFoundError,
    RateResamplers,
    StreamResampler,
    float_to_int16,
    int16_to_float,
    resample,
    select_device,
    to_mono,
)
from bolt_agent.core.audio.playback import PacedSink, _SegmentQueue
from bolt_agent.core.tts.tts_engine import split_sentences, spoken_prefix
from support.audio_fixtures import ScriptedProbs, speech_wav, wer  # noqa: F401 - fixture

TOLERANCE = int(0.2 * 16000)


def _chunks(audio: np.ndarray, seed: int) -> list[np.ndarray]:
    rng, out, i = np.random.default_rng(seed), [], 0
    while i < len(audio):
        k = int(rng.integers(50, 4000))
        out.append(audio[i : i + k])
        i += k
    return out


@pytest.mark.slow
def test_vad_boundaries_match_truth_whatever_the_chunking(speech_wav):  # noqa: F811
    results = []
    for seed in (1, 2):
        events = list(VadSegmenter().process(_chunks(speech_wav.audio, seed)))
        assert [type(e) for e in events] == [SpeechStart, SpeechEnd] * len(speech_wav.truth)
        ends = [e for e in events if isinstance(e, SpeechEnd)]
        for end, (first, last) in zip(ends, speech_wav.truth, strict=True):
            assert abs(end.start - first) <= TOLERANCE, (end.start, first)
            assert abs(end.end - last) <= TOLERANCE, (end.end, last)
            assert len(end.audio) == end.end - end.start and not end.forced
        results.append([(e.start, e.end) for e in ends])
    assert results[0] == results[1]  # chunk sizes do not change the segmentation


@pytest.mark.slow
def test_vad_ignores_silence_and_noise_and_cuts_long_speech(speech_wav):  # noqa: F811
    quiet = np.random.default_rng(0).normal(0, 0.003, 16000 * 3).astype(np.float32)
    assert list(VadSegmenter().process([quiet])) == []
    speech = speech_wav.audio[speech_wav.truth[0][0] : speech_wav.truth[0][1]]
    seg = VadSegmenter(VadConfig(max_speech_s=1.0))
    ends = [e for e in seg.process([speech]) if isinstance(e, SpeechEnd)]
    assert ends and ends[0].forced and ends[0].end - ends[0].start <= 16000 + WINDOW


def test_vad_state_machine_min_speech_silence_and_skip():
    # 10 silent windows, 2 speech (too short), 10 silent, 20 speech, 20 silent
    probs = [0.0] * 10 + [0.9] * 2 + [0.0] * 10 + [0.9] * 20 + [0.0] * 20
    config = VadConfig(min_speech_ms=150, min_silence_ms=300, speech_pad_ms=0)
    seg = VadSegmenter(config, ScriptedProbs(probs))
    events = list(seg.process([np.zeros(len(probs) * WINDOW, np.float32)]))
    assert events[0] == SpeechStart(22 * WINDOW)
    assert isinstance(events[1], SpeechEnd) and (events[1].start, events[1].end) == (
        22 * WINDOW,
        42 * WINDOW,
    )
    seg = VadSegmenter(config, ScriptedProbs([0.9] * 20))
    seg.push(np.zeros(10 * WINDOW, np.float32))
    assert seg.in_speech
    seg.skip(16000)  # gated: the open utterance is dropped, the position advances
    assert not seg.in_speech and seg.offset == 10 * WINDOW + 16000


@pytest.mark.slow
def test_vad_finds_the_first_word_after_a_long_silence(speech_wav):  # noqa: F811
    """Silero's state carried over 30 s of silence detects the onset late (here +0.13 s, past
    the padding: the first word was cut); the idle reset keeps every start before the speech."""
    silence = np.zeros(16000 * 30, np.float32)
    audio = np.concatenate([silence, speech_wav.audio, silence, speech_wav.audio])
    seg = VadSegmenter(VadConfig())
    events = [e for k in range(0, len(audio), 512) for e in seg.push(audio[k : k + 512])]
    starts = [e.offset for e in events if isinstance(e, SpeechStart)]
    second = len(silence) * 2 + len(speech_wav.audio)
    truth = [len(silence) + a for a, _ in speech_wav.truth] + [
        second + a for a, _ in speech_wav.truth
    ]
    assert len(starts) == len(truth)
    for start, first in zip(starts, truth, strict=True):
        assert first - TOLERANCE <= start <= first, (start - first) / 16000


def test_vad_pending_end_announces_the_end_and_is_withdrawn_when_speech_resumes():
    # speech, a 6-window pause (shorter than min_silence), speech, then a long silence
    probs = [0.9] * 20 + [0.0] * 6 + [0.9] * 10 + [0.0] * 30
    config = VadConfig(min_speech_ms=150, min_silence_ms=400, speech_pad_ms=64)
    audio = np.arange(len(probs) * WINDOW, dtype=np.float32)  # sample i holds i
    seg = VadSegmenter(config, ScriptedProbs(probs))
    pending: list[tuple[int, int | None]] = []
    events = []
    for k in range(len(probs)):
        events += seg.push(audio[k * WINDOW : (k + 1) * WINDOW])
        pending.append((k, seg.pending_end))
    end = next(e for e in events if isinstance(e, SpeechEnd))
    announced = [e for _, e in pending if e is not None]
    pause_end = 20 * WINDOW + 1024  # first silent window + 64 ms of padding
    assert announced[0] == pause_end  # during the short pause…
    assert pending[27][1] is None  # …withdrawn once speech resumed
    assert announced[-1] == end.end == 36 * WINDOW + 1024  # the final silence: the real end
    assert [e for k, e in pending if e is not None and k < 36] == [pause_end] * 5
    np.testing.assert_array_equal(end.audio, audio[end.start : end.end])


def test_first_clause_goes_out_early_only_once():
    from bolt_agent.core.tts.sentences import SentenceSplitter

    def split(text: str, chars: int) -> list[str]:
        splitter, out = SentenceSplitter(chars), []
        for word in text.split(" "):
            out += splitter.push(word + " ")
        return out + [x for x in [splitter.flush()] if x]

    text = "Oh, sure, let me look around. Hmm, I see a cup, and 1,000 things."
    assert split(text, 0) == [
        "Oh, sure, let me look around.",
        "Hmm, I see a cup, and 1,000 things.",
    ]
    assert split(text, 4) == [
        "Oh, sure,",  # "Oh," is shorter than 4 characters
        "let me look around.",
        "Hmm, I see a cup, and 1,000 things.",
    ]
    assert split("Sure: the antenna wave. Done.", 4) == ["Sure:", "the antenna wave.", "Done."]
    # the embedded voice stack's 3: the base model's usual opener "Yes," goes out alone
    assert split("Yes, here is a happy nod.", 3) == ["Yes,", "here is a happy nod."]
    assert split("Yes, here is a happy nod.", 4) == ["Yes, here is a happy nod."]


def test_the_first_clause_goes_at_its_mark_not_one_token_later():
    """As the LLM streams it: "Yes" then "," — the comma after a letter ends the clause at
    once (a decode step earlier than waiting for the space); after a digit it waits."""
    from bolt_agent.core.tts.sentences import SentenceSplitter

    splitter = SentenceSplitter(3)
    assert splitter.push("Yes") == []
    assert splitter.push(",") == ["Yes,"]
    assert splitter.push(" here is") == [] and splitter.push(", a nod.") == []
    assert splitter.push(" Done") == ["here is, a nod."]  # later clauses never split
    numbers = SentenceSplitter(3)
    assert numbers.push("About 1") == [] and numbers.push(",") == []  # maybe "1,000"
    assert numbers.push("000 cups. ") == ["About 1,000 cups."]
    short = SentenceSplitter(4)
    assert short.push("Yes") == [] and short.push(",") == []  # under first_clause_chars
    off = SentenceSplitter(0)
    assert off.push("Yes,") == []


def test_vad_start_padding_keeps_audio_before_the_onset():
    probs = [0.0] * 20 + [0.9] * 10 + [0.0] * 20
    config = VadConfig(min_speech_ms=150, min_silence_ms=300, speech_pad_ms=32, start_pad_ms=256)
    seg = VadSegmenter(config, ScriptedProbs(probs))
    audio = np.arange(len(probs) * WINDOW, dtype=np.float32)
    start, end = list(seg.process([audio]))
    assert (start.onset, start.offset) == (20 * WINDOW, 20 * WINDOW - 4096)  # 256 ms earlier
    assert (end.onset, end.start, end.end) == (20 * WINDOW, 20 * WINDOW - 4096, 30 * WINDOW + 512)
    np.testing.assert_array_equal(end.audio, audio[end.start : end.end])


def test_vad_barge_in_sensitivity():
    seg = VadSegmenter(VadConfig(), ScriptedProbs([0.7] * 30))
    seg.set_sensitivity(0.8, 300)
    assert seg.push(np.zeros(30 * WINDOW, np.float32)) == []  # 0.7 is below the raised bar
    seg.reset_sensitivity()
    seg2 = VadSegmenter(VadConfig(), ScriptedProbs([0.7] * 30))
    assert isinstance(seg2.push(np.zeros(30 * WINDOW, np.float32))[0], SpeechStart)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 3000), min_size=1, max_size=8))
def test_stream_resampler_matches_one_shot(sizes):
    x = np.sin(np.arange(sum(sizes)) * 0.01).astype(np.float32)
    stream = StreamResampler(22050, 16000)
    parts, i = [], 0
    for n in sizes:
        parts.append(stream.process(x[i : i + n]))
        i += n
    parts.append(stream.process(np.zeros(0, np.float32), last=True))
    got = np.concatenate(parts)
    want = resample(x, 22050, 16000)
    assert abs(len(got) - len(want)) <= 2
    n = min(len(got), len(want))
    assert np.allclose(got[:n], want[:n], atol=2e-3)


def test_rate_resamplers_keep_state_per_rate_and_start_afresh_after_a_gap():
    tone = np.sin(np.arange(4800) * 0.3).astype(np.float32)  # 0.1 s at 48 kHz
    quiet = np.zeros(4800, np.float32)
    resamplers = RateResamplers(16000)
    resamplers.process(tone, 48000)
    went_on = resamplers.process(quiet, 48000)  # the filter's delay: the tone's tail comes out
    assert float(np.abs(went_on).max()) > 0.1
    resamplers.process(tone, 48000)
    after_gap = resamplers.process(quiet, 48000, gap=True)  # nothing of before the gap
    assert np.array_equal(after_gap, StreamResampler(48000, 16000).process(quiet))
    assert float(np.abs(after_gap).max()) == 0.0
    assert np.array_equal(resamplers.process(tone[:100], 16000), tone[:100])  # no resampling
    for rate in (8000, 11025, 22050, 32000, 44100):  # a rate changing every block: bounded
        resamplers.process(tone, rate)
    assert len(resamplers._by_rate) <= resamplers.max_rates


def test_resample_keeps_pitch_and_sample_conversion_round_trips():
    t = np.arange(48000) / 48000
    y = resample(np.sin(2 * np.pi * 440 * t).astype(np.float32), 48000, 16000)
    assert len(y) == 16000
    assert abs(np.argmax(np.abs(np.fft.rfft(y))) - 440) <= 1  # 1 Hz bins over 1 s
    pcm = np.array([-32768, -1, 0, 1, 32767], dtype=np.int16)
    assert np.array_equal(float_to_int16(int16_to_float(pcm)), pcm)
    assert to_mono(np.array([1.0, 3.0, 2.0, 4.0], np.float32), 2).tolist() == [2.0, 3.0]


DEVICES = [
    DeviceInfo(0, "pulse", 32, 32, 44100.0),
    DeviceInfo(1, "default", 32, 32, 44100.0),
    DeviceInfo(2, "USB Speaker: Audio (hw:2,0)", 0, 2, 48000.0),
]


def test_device_selection_by_name_index_and_default():
    assert select_device("", DEVICES, "input").name == "default"
    assert select_device("2", DEVICES, "output").index == 2
    assert select_device(0, DEVICES, "input").name == "pulse"
    assert select_device("usb speaker", DEVICES, "output").index == 2
    with pytest.raises(DeviceNotFoundError) as err:
        select_device("usb speaker", DEVICES, "input")  # output-only device
    assert "[0] pulse" in str(err.value) and "[1] default" in str(err.value)
    with pytest.raises(DeviceNotFoundError, match="no_such_device"):
        select_device("no_such_device", DEVICES, "output")


def test_sentences_and_spoken_prefix():
    assert split_sentences("Hello there. Let me check! Ok") == [
        "Hello there.",
        "Let me check!",
        "Ok",
    ]
    assert spoken_prefix("one two three four", 0.5) == "one two"
    assert spoken_prefix("one two three four", 0.0) == ""
    assert spoken_prefix("one two three four", 1.0) == "one two three four"


class _Seg:
    def __init__(self, text, no_speech_prob, avg_logprob, n=4):
        self.text, self.no_speech_prob, self.avg_logprob = text, no_speech_prob, avg_logprob
        self.tokens = list(range(n))


def test_no_speech_and_empty_segments_are_dropped():
    assert combine_segments([_Seg(" ", 0.0, -0.1), _Seg(" ...", 0.0, -0.1)], 0.6, -1.0) is None
    assert combine_segments([_Seg("Thank you.", 0.9, -1.5)], 0.6, -1.0) is None
    text, conf, _ = combine_segments([_Seg(" Hi.", 0.1, -0.1), _Seg("You", 0.95, -0.2)], 0.6, -1.0)
    assert text == "Hi." and abs(conf - np.exp(-0.1)) < 1e-6


def test_paced_sink_plays_in_real_time_and_stops_at_once():
    import threading
    import time

    emitted: list[int] = []
    done = threading.Event()
    sink = PacedSink(lambda b: emitted.append(len(b)), 16000, 20, on_done=lambda tag: done.set())
    sink.open()
    try:
        t0 = time.monotonic()
        sink.write("a", np.ones(4000, np.int16))  # 0.25 s
        assert done.wait(2.0)
        assert time.monotonic() - t0 >= 0.2 and sink.progress("a") == (4000, 4000)
        sink.write("b", np.ones(16000 * 5, np.int16))
        while sink.progress("b")[0] < 1600:
            time.sleep(0.005)
        report = sink.stop()
        played = sink.progress("b")[0]
        assert report.stop_s < 0.05 and report.dropped_tags == 1
        assert 1600 <= played < 16000 * 5 and not sink.done("b")
    finally:
        sink.close()


def test_paced_sink_drops_a_block_it_cannot_emit_reports_it_and_goes_on():
    """A failed publish (the context going down, a bad message) loses that block only: the
    thread lives on, the failure reaches ``on_error``, the segment still finishes."""
    import threading

    emitted, errors, done = [], [], threading.Event()

    def emit(block: np.ndarray) -> None:
        emitted.append(len(block))
        if len(emitted) == 2:
            raise RuntimeError("publisher's context is invalid")

    sink = PacedSink(emit, 16000, 20, on_done=lambda tag: done.set(), on_error=errors.append)
    sink.open()
    try:
        sink.write("a", np.ones(3200, np.int16))  # 10 blocks
        assert done.wait(2.0)
        assert len(emitted) == 10 and [str(e) for e in errors] == ["publisher's context is invalid"]
        assert sink.progress("a") == (3200, 3200)
    finally:
        sink.close()


@pytest.mark.slow
def test_whisper_encoder_window_gives_the_same_words(speech_wav):  # noqa: F811
    from bolt_agent.core.asr.asr_engine import WhisperEngine
    from bolt_agent.core.models import resolve_model

    full = WhisperEngine(resolve_model("", kind="asr"), "cpu", encoder_window_s=30)
    windowed = WhisperEngine(resolve_model("", kind="asr"), "cpu", encoder_window_s=10)
    full.load()
    windowed.load()
    assert windowed._encoder_frames(16000 * 2) == 1000
    assert windowed._encoder_frames(16000 * 12) == 1300  # the audio + 1 s
    assert windowed._encoder_frames(16000 * 29) is None and full._encoder_frames(16000) is None
    for (first, last), text in zip(speech_wav.truth, speech_wav.texts, strict=True):
        audio = speech_wav.audio[first:last]
        a, b = full.transcribe(audio), windowed.transcribe(audio)
        assert a is not None and b is not None, (a, b)
        assert wer(text, a.text) <= 0.1 and wer(text, b.text) <= 0.1, (text, a.text, b.text)


@pytest.mark.slow
def test_whisper_auto_device_falls_back_to_cpu_and_silence_gives_nothing(monkeypatch):
    from bolt_agent.core.asr.asr_engine import WhisperEngine
    from bolt_agent.core.models import resolve_model

    monkeypatch.setattr(WhisperEngine, "pick_device", staticmethod(lambda _d: "cuda"))
    engine = WhisperEngine(resolve_model("", kind="asr"), device="auto")
    engine.load()
    # where CUDA really works it is used; elsewhere 'auto' falls back to int8 on the CPU
    assert (engine.device, bool(engine.fallback_reason)) in {("cpu", True), ("cuda", False)}
    quiet = np.random.default_rng(1).normal(0, 0.01, 16000 * 2).astype(np.float32)
    assert engine.transcribe(quiet) is None


def test_player_counts_underflows_and_those_right_after_real_audio():
    """The device ran dry: counted always, and apart when the block before carried speech (a
    gap may have been heard); idle silence running dry is not a glitch anyone hears."""
    from types import SimpleNamespace

    from bolt_agent.core.audio.playback import Player

    player = Player(None, 16000, block_ms=10)
    ok, dry = SimpleNamespace(output_underflow=False), SimpleNamespace(output_underflow=True)
    out = np.zeros((160, 1), np.int16)
    player._callback(out, 160, None, dry)  # idle: zeros, then the device ran dry
    player._queue.add("s", np.full(160, 5, np.int16), 160)
    player._callback(out, 160, None, ok)  # the segment's one block
    assert out[:, 0].tolist() == [5] * 160
    player._callback(out, 160, None, dry)  # dry right after speech: may be heard
    player._callback(out, 160, None, dry)  # the block before was silence
    assert (player.underflows, player.underflows_playing) == (3, 1)


def test_segment_queue_drops_unstarted_segments_and_keeps_what_a_stop_is_told_to():
    """The sink side of a stop that names one turn: segments not started leave the queue all or
    none (``drop``), and a stop keeps the unstarted ones its ``keep`` accepts, asking about
    every segment in play order with whether it has started."""
    done: list = []
    q = _SegmentQueue(done.append)
    for tag in ("a", "b", "c", "d"):
        q.add(tag, np.full(100, 1, np.int16), 100)
    out = np.zeros(60, np.int16)
    assert q.fill(out) and q.progress("a") == (60, 100)  # "a" has started
    assert not q.drop({"a", "b"})  # one of them started: none is taken
    assert not q.drop({"b", "x"})  # one is not queued: none is taken
    assert q.drop({"b"}) and q.progress("b") == (0, 0)
    asked: list = []
    dropped = q.clear(keep=lambda tag, started: asked.append((tag, started)) or tag != "c")
    assert asked == [("a", True), ("c", False), ("d", False)]
    assert dropped == 2  # "a" (started, never kept) and "c"
    out = np.zeros(200, np.int16)
    q.fill(out)
    assert done == ["d"] and int(out[:100].sum()) == 100 and not out[100:].any()

"""Echo cancellation and barge-in judgement without ROS: the reference time line, SpeexDSP's
canceller in the simulated room (the robot's real Piper voice), the judge's rules, and the
listener in ``echo_mode: aec`` with a scripted VAD and transcriber (push blocks, read events)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bolt_agent.core.asr.barge_in import (
    BACKCHANNEL,
    ECHO,
    INTERRUPT,
    UNDECIDED,
    BargeInJudge,
    BargeInSettings,
    words_of,
)
from bolt_agent.core.asr.listener import (
    Listener,
    ListenerSettings,
    NoSpeech,
    TranscriptEvent,
    VoiceActivityEvent,
    residual_gate,
)
from bolt_agent.core.asr.vad_segmenter import WINDOW, VadConfig, VadSegmenter
from bolt_agent.core.audio.echo_canceller import (
    FRAME,
    SAMPLE_RATE,
    ReferenceTimeline,
    SpeexCanceller,
)
from bolt_agent.core.audio.room import Room, RoomSettings, RoomStream
from support.audio_fixtures import ScriptedProbs
from support.listener import block_stamp

ROBOT_LINES = (("let", "me", "tell", "you", "about", "the", "lighthouse", "on", "the", "hill"),)


# --- the reference time line ------------------------------------------------------------------
def test_timeline_reads_silence_where_nothing_was_played():
    tl = ReferenceTimeline(keep_s=1.0)
    tl.write(np.ones(100, np.float32), 1000)
    out = tl.read(950, 200)
    assert not out[:50].any() and out[50:150].all() and not out[150:].any()
    assert not tl.read(1000 + 16000, 10).any()  # beyond what it keeps: the slot was never written


def test_timeline_joins_a_jittered_stream_and_never_overwrites():
    tl = ReferenceTimeline()
    tl.write(np.full(160, 1.0, np.float32), 0)
    tl.write(np.full(160, 2.0, np.float32), 150)  # stamped 10 samples early: appended at 160
    tl.write(np.full(160, 3.0, np.float32), 330)  # 10 late: within snap, appended at 320
    assert tl.latest == 479
    assert (tl.read(0, 480) == np.repeat([1.0, 2.0, 3.0], 160)).all()
    tl.write(np.full(160, 4.0, np.float32), 2000)  # a pause: placed by its stamp
    assert tl.latest == 2159 and not tl.read(480, 1520).any()


def test_timeline_wait_for_times_out_and_wakes_on_write():
    import threading

    tl = ReferenceTimeline()
    assert not tl.wait_for(10, 0.01)
    threading.Timer(0.05, lambda: tl.write(np.ones(20, np.float32), 0)).start()
    assert tl.wait_for(10, 5.0)


# --- the canceller in the simulated room -------------------------------------------------------
@pytest.fixture(scope="module")
def robot_voice() -> np.ndarray:
    from bolt_agent.testing.voices import piper

    lines = (
        "Let me look around the room and tell you what I can see on the table.",
        "I can see a small red cup, a notebook and a pair of glasses next to it.",
        "My name is Reachy, and I am a small robot who likes to talk with people.",
    )
    gap = np.zeros(SAMPLE_RATE // 2, np.float32)
    return np.concatenate([np.concatenate([piper(t), gap]) for t in lines])


def _cancel(canceller, mic, ref, block=512):
    out = np.zeros_like(mic)
    for i in range(0, len(mic) - block + 1, block):
        stamp = i * 1_000_000_000 // SAMPLE_RATE
        canceller.reference(ref[i : i + block], stamp)
        out[i : i + block] = canceller.process(mic[i : i + block], stamp)
    return np.roll(out, -FRAME)  # (the canceller returns its input 10 ms late)


@pytest.mark.parametrize("room", [RoomSettings(30, -6, seed=1), RoomSettings(80, -12, seed=4)])
def test_the_canceller_removes_the_robots_voice_once_converged(robot_voice, room):
    """Piper's voice through a room (30 ms at -6 dB, 80 ms at -12 dB): from the second sentence
    on the echo comes out at least 20 dB quieter (SpeexDSP MDF, 200 ms filter), and the
    canceller says it has converged."""
    mic = Room(room).mic(robot_voice)
    canceller = SpeexCanceller(200)
    out = _cancel(canceller, mic, robot_voice)
    later = slice(len(mic) // 3, len(mic) - 1024)
    erle = 10 * np.log10(np.sum(mic[later] ** 2) / np.sum(out[later] ** 2))
    assert erle >= 20.0, erle
    assert canceller.converged and canceller.erle_db > 10.0


def test_the_canceller_keeps_the_users_voice(robot_voice):
    """An espeak-ng voice over the robot comes out of the canceller within 6 dB of its own
    level (SpeexDSP's suppressor leaves double talk mostly alone), while the echo alone loses
    20 dB or more."""
    from bolt_agent.testing.voices import espeak, trim

    user = trim(espeak("Wait, stop, I have a question about the red cup.", "en+f4"))
    at = len(robot_voice) - len(user) - SAMPLE_RATE
    mic = Room(RoomSettings()).mic(robot_voice, user, at)
    out = _cancel(SpeexCanceller(200), mic, robot_voice)
    kept = 10 * np.log10(np.sum(out[at : at + len(user)] ** 2) / np.sum(user**2))
    assert kept > -6.0, kept


def test_a_mic_block_with_no_reference_passes_almost_unchanged():
    canceller = SpeexCanceller(200, preprocess=False)
    x = (0.1 * np.random.default_rng(0).standard_normal(SAMPLE_RATE)).astype(np.float32)
    out = _cancel(canceller, x, np.zeros_like(x))
    assert np.sum(out[1024:-1024] ** 2) / np.sum(x[1024:-1024] ** 2) > 0.5


def test_room_stream_equals_the_whole_signal_mix():
    room = Room(RoomSettings(noise_db=-200))
    stream = RoomStream(room)
    robot = np.random.default_rng(1).standard_normal(8000).astype(np.float32)
    stream.played(robot, 0)
    blocks = np.concatenate([stream.heard(i, 512) for i in range(0, 7680, 512)])
    assert np.allclose(blocks, room.echo(robot)[:7680], atol=1e-4)


# --- the judge ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "voiced_ms", "final", "verdict"),
    [
        ("Uh-huh.", 400, True, BACKCHANNEL),
        ("Yeah, okay.", 800, True, BACKCHANNEL),
        ("I see.", 400, False, UNDECIDED),  # the next word may be "wait"
        ("Wait", 300, False, INTERRUPT),
        ("No, I meant the blue one.", 1200, True, INTERRUPT),
        ("Show us the red cup", 700, False, INTERRUPT),  # three other words
        ("Fine.", 400, True, BACKCHANNEL),  # one word, no stop word: a remark
        (None, 1600, False, INTERRUPT),  # long, and nothing known of the words
        ("the lighthouse on the hill", 1600, True, ECHO),  # the robot's own words
        ("Stop, the lighthouse", 900, False, INTERRUPT),  # a stop word the robot did not say
        # echo misheard past the order test: its words are the robot's, bar two
        ("so far the hill", 700, False, UNDECIDED),
        ("so far the hill", 700, True, BACKCHANNEL),
        ("Show me the castle please", 900, False, INTERRUPT),  # show, castle, please: its own
        ("Can I ask something?", 1000, False, INTERRUPT),  # short words the robot says too
        # more words than 0.3 s of voice holds: heard in noise (as the start of "Yeah, I see.")
        ("a few days.", 300, False, UNDECIDED),
        ("a few days.", 300, True, BACKCHANNEL),
        ("M. H. N. Wright.", 450, True, BACKCHANNEL),
        # a stop word heard in noise: whisper's "I'm sorry." of a burst of residual echo
        ("I'm sorry.", 200, False, UNDECIDED),
        ("I'm sorry.", 200, True, BACKCHANNEL),
        ("Sorry, wait.", 400, False, INTERRUPT),  # the same words over a voice that holds them
        # only backchannels, the voice long (a pause, the canceller's residue around them)
        ("Yeah, I see.", 2200, True, BACKCHANNEL),
        ("Yeah, I see", 2200, False, UNDECIDED),
        ("Yeah, I see the castle", 2200, False, INTERRUPT),  # a word of its own, and long
    ],
)
def test_judge(text, voiced_ms, final, verdict):
    assert BargeInJudge().judge(text, voiced_ms, final, ROBOT_LINES) == verdict


def test_judge_waits_on_harmless_words_and_listens_only_for_stop_words_while_cold():
    judge = BargeInJudge()
    assert judge.judge(None, 2000, False, echo_so_far=True) == UNDECIDED
    assert judge.judge("show us the red cup", 700, False, stop_words_only=True) == UNDECIDED
    assert judge.judge("wait", 300, False, stop_words_only=True) == INTERRUPT


def test_words_heard_unsurely_do_not_interrupt_but_stop_words_and_length_still_do():
    judge = BargeInJudge()  # interrupt_confidence 0.45
    # an espeak "Mm-hm." over the robot, heard as three words at 0.35 (echo benchmark, dev)
    assert judge.judge("Am I made?", 700, False, confidence=0.35) == UNDECIDED
    assert judge.judge("Am I made?", 700, True, confidence=0.35) == BACKCHANNEL
    assert judge.judge("Am I made?", 700, False, confidence=0.6) == INTERRUPT
    # a stop word heard unsurely by a quick transcript is heard again first ("Got it." came
    # out "Stop" at 0.28): the next transcript's stop word, or a final's, interrupts
    assert judge.judge("Wait, am I made?", 700, False, confidence=0.2) == UNDECIDED
    assert judge.judge("Wait, am I", 700, False, confidence=0.2, stop_word_before=True) == INTERRUPT
    assert judge.judge("Wait, am I made?", 700, True, confidence=0.2) == INTERRUPT
    assert judge.judge("Wait, am I made?", 700, False, confidence=0.5) == INTERRUPT
    # the first hearing is the user's stop word, not one the robot just said
    lines = [words_of("Please stop by the bakery")]
    assert judge.has_stop_word("stop by", lines) is False
    assert judge.has_stop_word("Stop!") is True
    assert judge.judge("Am I made?", 1600, False, confidence=0.35) == INTERRUPT
    # the threshold is a setting; 0 trusts every transcript
    trusting = BargeInJudge(BargeInSettings(interrupt_confidence=0.0))
    assert trusting.judge("Am I made?", 700, False, confidence=0.05) == INTERRUPT


def test_judge_settings_are_checked_and_word_lists_are_parameters():
    with pytest.raises(ValueError, match="interrupt_words"):
        BargeInSettings(interrupt_words=0)
    with pytest.raises(ValueError, match="interrupt_confidence"):
        BargeInSettings(interrupt_confidence=1.5)
    judge = BargeInJudge(BargeInSettings(backchannels=("bueno",), stop_words=("para",)))
    assert judge.judge("bueno", 300, True) == BACKCHANNEL
    assert judge.judge("para", 300, False) == INTERRUPT
    assert judge.is_echo("It's like turn slowly", [("its", "light", "turns", "slowly")])
    # what the robot said, but not in its order: the user talking about it
    line = words_of("I can see a small red cup, a notebook and a pair of glasses next to it.")
    assert not judge.is_echo("Tell me about the red cup please", [line])


def test_residual_gate_silences_quiet_and_explained_windows():
    loud = np.full(WINDOW, 0.1, np.float32)
    quiet = np.full(WINDOW, 0.001, np.float32)  # -60 dBFS
    cleaned = np.concatenate([loud, quiet, loud * 0.05])
    mic = np.concatenate([loud, quiet, loud])  # the last: the canceller took 26 dB off
    out = residual_gate(cleaned, mic, -40.0, -18.0)
    assert out[:WINDOW].all() and not out[WINDOW:].any()


# --- the listener in aec ----------------------------------------------------------------------
class Words:
    """Transcriber returning a fixed text (any audio); counts its calls."""

    def __init__(self, text: str, confidence: float = 0.9) -> None:
        self.text, self.calls, self.confidence = text, 0, confidence

    def transcribe(self, audio, final=True):
        from bolt_agent.core.asr.asr_engine import AsrResult

        self.calls += 1
        return AsrResult(self.text, self.confidence, "en", 0.0)


class PassThrough:
    """A canceller that changes nothing (the scripted VAD decides what is speech)."""

    converged = True

    def reference(self, samples, stamp_ns) -> None:
        pass

    def process(self, mic, stamp_ns):
        return mic


def aec_listener(
    text: str, speech_windows: int, lead: int = 4, **settings
) -> tuple[Listener, Words]:
    probs = [0.0] * lead + [0.95] * speech_windows + [0.0] * 60
    words = Words(text)
    vad = VadSegmenter(VadConfig(min_silence_ms=500, min_speech_ms=64), model=ScriptedProbs(probs))
    s = ListenerSettings(echo_mode="aec", aec_min_ms=64, aec_threshold=0.6, **settings)
    listener = Listener(words, s, vad, canceller=PassThrough())
    listener.robot_said("Let me tell you about the lighthouse on the hill.")
    listener.robot_speaking(True)
    return listener, words


def run(listener: Listener, blocks: int) -> list:
    events = []
    loud = np.full(WINDOW, 0.2, np.float32)  # above the residual gate: the VAD decides
    for k in range(blocks):
        events += listener.push(loud, block_stamp(k))
    return events


def test_a_backchannel_over_the_robot_is_kept_but_stops_nothing():
    listener, _ = aec_listener("Uh-huh.", 12)
    events = run(listener, 60)
    assert not any(isinstance(e, VoiceActivityEvent) and e.barge_in for e in events)
    finals = [e for e in events if isinstance(e, TranscriptEvent) and e.is_final]
    assert [(f.text, f.backchannel) for f in finals] == [("Uh-huh.", True)]
    assert listener.barge_in_verdicts["backchannel"] == 1


def test_words_whisper_is_unsure_of_stop_nothing_and_go_out_as_a_backchannel():
    """Kept on asr/backchannel, like a lone word over the robot: no turn. A real request
    heard so unsurely, and shorter than interrupt_after_ms, is lost as a turn (the echo
    benchmark's interrupt_lost_rate counts it)."""

    def heard(confidence: float) -> tuple[int, list]:
        listener, words = aec_listener("Am I made?", 14)
        words.confidence = confidence
        events = run(listener, 60)
        barge_ins = sum(isinstance(e, VoiceActivityEvent) and e.barge_in for e in events)
        finals = [(e.text, e.backchannel) for e in events if isinstance(e, TranscriptEvent)
                  and e.is_final]  # fmt: skip
        return barge_ins, finals

    assert heard(0.3) == (0, [("Am I made?", True)])  # (an espeak "Mm-hm." over the robot)
    assert heard(0.8) == (1, [("Am I made?", False)])


def test_a_stop_word_interrupts_from_the_first_quick_transcript():
    listener, _ = aec_listener("Wait, stop.", 12)
    events = run(listener, 60)
    barge = [i for i, e in enumerate(events) if isinstance(e, VoiceActivityEvent) and e.barge_in]
    assert len(barge) == 1
    start = next(i for i, e in enumerate(events) if isinstance(e, VoiceActivityEvent))
    # announced before the utterance ended: from the quick transcript at its start
    end = next(
        i for i, e in enumerate(events) if isinstance(e, VoiceActivityEvent) and not e.speaking
    )
    assert start < barge[0] < end
    final = next(e for e in events if isinstance(e, TranscriptEvent) and e.is_final)
    assert final.text == "Wait, stop." and not final.backchannel


class Probes(Words):
    """Quick transcripts hear ``quick`` in turn (the last again once they run out), at
    ``confidence``; the early and final transcripts hear ``text`` surely."""

    def __init__(self, text: str, quick: list[str], confidence: float) -> None:
        super().__init__(text)
        self.quick, self.quick_confidence = list(quick), confidence

    def transcribe(self, audio, final=True):
        result = super().transcribe(audio, final)
        if final:
            return result
        text = self.quick.pop(0) if len(self.quick) > 1 else self.quick[0]
        return dataclasses.replace(result, text=text, confidence=self.quick_confidence)


def test_a_stop_word_heard_unsurely_must_be_heard_again():
    """A quick transcript that hears "Stop" at 0.3 stops nothing by itself: "Got it." heard
    so at its start goes on as a backchannel. Heard again, the robot stops: a real "wait"."""

    def barge_ins(quick: list[str], final: str) -> tuple[int, list]:
        listener, _ = aec_listener(final, 14)
        listener._transcriber = Probes(final, quick, 0.3)
        events = run(listener, 60)
        finals = [(e.text, e.backchannel) for e in events if isinstance(e, TranscriptEvent)
                  and e.is_final]  # fmt: skip
        return sum(isinstance(e, VoiceActivityEvent) and e.barge_in for e in events), finals

    assert barge_ins(["Stop!", "Got it."], "Got it.") == (0, [("Got it.", True)])
    assert barge_ins(["Wait", "Wait, stop"], "Wait, stop.") == (1, [("Wait, stop.", False)])
    # the final's stop word is trusted: the words come as a turn (the robot said its line)
    assert barge_ins(["Wait", "Wait, I..."], "Wait, I have a question.")[1] == [
        ("Wait, I have a question.", False)
    ]


def test_the_robots_own_words_are_dropped_as_echo():
    listener, _ = aec_listener("the lighthouse on the hill", 20)
    events = run(listener, 70)
    assert not any(isinstance(e, VoiceActivityEvent) and e.barge_in for e in events)
    assert not any(isinstance(e, TranscriptEvent) for e in events)  # not even a partial
    assert [e.reason for e in events if isinstance(e, NoSpeech)] == ["echo"]


def test_a_barge_in_decided_after_the_robot_finished_stops_nothing():
    """Words judged an interruption only once the utterance is over, when the robot has
    stopped: no barge-in (it would stop the robot's next turn); the words come as a turn."""
    listener, _ = aec_listener("Show us the red cup", 20, barge_in_probe_ms=0)  # 0.64 s
    events = run(listener, 8)
    listener.robot_speaking(False)
    events += run(listener, 50)
    assert not any(isinstance(e, VoiceActivityEvent) and e.barge_in for e in events)
    finals = [e for e in events if isinstance(e, TranscriptEvent) and e.is_final]
    assert [f.text for f in finals] == ["Show us the red cup"]
    assert listener.barge_in_verdicts["interrupt"] == 1


class QuickWords(Words):
    """Quick transcripts (``final=False``) hear ``quick`` (None: no words, as when whisper has
    not caught up); the final hears ``text``."""

    def __init__(self, text: str, quick: str | None) -> None:
        super().__init__(text)
        self.quick = quick

    def transcribe(self, audio, final=True):
        result = super().transcribe(audio, final)
        if final:
            return result
        return None if self.quick is None else dataclasses.replace(result, text=self.quick)


def long_voice(quick: str | None) -> list:
    """2 s of voice over the robot (longer than interrupt_after_ms), the final hearing the
    robot's own line; quick transcripts hearing ``quick``."""
    listener, _ = aec_listener("the lighthouse on the hill", 62)
    listener._transcriber = QuickWords("the lighthouse on the hill", quick)
    return run(listener, 130)


def test_the_voices_length_alone_interrupts_only_once_words_were_heard():
    """Until a quick transcript has heard words, a long voice may be residual echo that
    whisper (busy on 2 cores) has not caught up with: it stops nothing by its length. Words
    that are neither the robot's nor backchannels, and that the voice could hold, make the
    length count."""

    def barge_ins(quick: str | None) -> int:
        return sum(isinstance(e, VoiceActivityEvent) and e.barge_in for e in long_voice(quick))

    assert barge_ins(None) == 0
    assert barge_ins("hmm the cup") == 1
    # words the voice could not hold (whisper's on residual echo) are no words heard either
    assert barge_ins(" ".join(["cup"] * 20)) == 0


def test_a_final_heard_as_the_robots_words_is_echo_though_a_quick_one_interrupted():
    """A quick transcript misheard the echo as other words ("why the peep all of"): judged an
    interruption (the robot stops: that cannot be undone). The final hears the robot's own
    line: dropped as echo, not sent to the LLM as the user's turn."""
    listener, _ = aec_listener("the lighthouse on the hill", 20)
    listener._transcriber = QuickWords("the lighthouse on the hill", "why the peep all of")
    events = run(listener, 90)
    assert sum(isinstance(e, VoiceActivityEvent) and e.barge_in for e in events) == 1
    assert not any(isinstance(e, TranscriptEvent) and e.is_final for e in events)
    assert [e.reason for e in events if isinstance(e, NoSpeech)] == ["echo"]
    # a stop word of the user's in the final keeps it an interruption, and a turn
    listener, _ = aec_listener("wait, the lighthouse on the hill", 20)
    listener._transcriber = QuickWords("wait, the lighthouse on the hill", "why the peep all of")
    finals = [e.text for e in run(listener, 90) if isinstance(e, TranscriptEvent) and e.is_final]
    assert finals == ["wait, the lighthouse on the hill"]


def test_the_robots_stop_applies_where_the_audio_reaches_its_stamp():
    """tts/state says the robot stopped while the audio still being processed lags 1.3 s
    behind: the voice in that audio (0.6 s on, past the echo tail) is the robot's, judged and
    dropped as echo, not a user's turn. An unstamped stop applies at once: the same voice is
    then the user's."""

    def heard(stop_stamp: int | None) -> list:
        listener, _ = aec_listener("the lighthouse on the hill", 20, lead=20)
        loud = np.full(WINDOW, 0.2, np.float32)
        events = listener.push(loud, block_stamp(0))
        if stop_stamp is None:
            listener.robot_speaking(False)
        else:
            listener.robot_speaking(False, stop_stamp)
        for k in range(1, 100):
            events += listener.push(loud, block_stamp(k))
        return events

    events = heard(block_stamp(41))  # its last sample: after the voice
    assert not any(isinstance(e, TranscriptEvent) for e in events)
    assert [e.reason for e in events if isinstance(e, NoSpeech)] == ["echo"]
    finals = [e.text for e in heard(None) if isinstance(e, TranscriptEvent) and e.is_final]
    assert finals == ["the lighthouse on the hill"]


def test_without_a_canceller_aec_judges_an_input_cancelled_elsewhere():
    words = Words("Okay.")
    probs = [0.0] * 4 + [0.95] * 10 + [0.0] * 60
    vad = VadSegmenter(VadConfig(min_silence_ms=500, min_speech_ms=64), model=ScriptedProbs(probs))
    listener = Listener(words, ListenerSettings(echo_mode="aec", aec_min_ms=64), vad)
    listener.robot_speaking(True)
    events = run(listener, 60)
    finals = [e for e in events if isinstance(e, TranscriptEvent) and e.is_final]
    assert [(f.text, f.backchannel) for f in finals] == [("Okay.", True)]

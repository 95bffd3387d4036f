"""The acoustic loop's pause utterances and turn-taking analysis, without devices: the seeded
Piper utterances (real voice), and the analysis of a split turn on a constructed two-channel
recording (the user's real WAV on the left, robot audio placed on the right)."""

from __future__ import annotations

import wave

import numpy as np
import pytest

from bolt_agent.benchmarks import voice_loop as vl
from bolt_agent.benchmarks.report import markdown

RATE = vl.RATE
T0 = 1_000_000.0  # wall time of recording frame 0


@pytest.fixture(scope="module")
def utts(tmp_path_factory):
    return vl.make_utterances(tmp_path_factory.mktemp("utt"), 2)  # finished, pause


def _read(path) -> np.ndarray:
    with wave.open(str(path)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768


def test_schedule_has_both_kinds_and_every_line():
    kinds = [k for k, _ in vl.SCHEDULE]
    assert kinds[:2] == ["finished", "pause"] and kinds.count("pause") >= 6
    assert sorted(i for k, i in vl.SCHEDULE if k == "finished") == list(range(len(vl.UTTERANCES)))
    assert all(0.6 <= pause <= 0.9 for _, _, pause in vl.PAUSE_UTTERANCES)


def test_join_with_pause_is_exact():
    tone = (0.5 * np.sin(np.arange(800) / 3)).astype(np.float32)
    quiet = np.zeros(300, np.float32)
    first, rest = np.concatenate([quiet, tone, quiet]), np.concatenate([quiet, tone, quiet])
    x, cut = vl.join_with_pause(first, rest, 0.7)
    voiced = np.nonzero(np.abs(x) > vl.THRESHOLD)[0]
    gap = np.diff(voiced).max() - 1
    assert gap == round(0.7 * RATE) and np.abs(x[cut : cut + gap]).max() == 0


def test_pause_utterance_is_seeded_and_has_its_pause(utts, tmp_path):
    finished, pause = utts
    assert finished.kind == "finished" and finished.pause_end == 0
    first, rest, pause_s = vl.PAUSE_UTTERANCES[0]
    assert pause.kind == "pause" and pause.text == f"{first} {rest}" and pause.first_part == first
    x = _read(pause.path)
    assert np.abs(x[pause.pause_start : pause.pause_end]).max() == 0  # silent in between …
    assert abs(x[pause.pause_start - 1]) > vl.THRESHOLD and abs(x[pause.pause_end]) > vl.THRESHOLD
    assert pause.pause_end - pause.pause_start == round(pause_s * RATE)  # … for exactly pause_s
    assert pause.speech_start < pause.pause_start < pause.pause_end < pause.speech_end
    again = vl.make_utterances(tmp_path, 2)  # the same audio every run
    assert [u.path.read_bytes() for u in again] == [u.path.read_bytes() for u in utts]


def _recording(utt: vl.Utterance, robot_at: list[tuple[int, int]], lead: int = RATE):
    """Two channels: the utterance from frame ``lead`` on, robot audio at [start, stop) frames
    of the WAV's timeline (relative to its first sample); a linear wall clock."""
    user = _read(utt.path)
    n = lead + len(user) + 4 * RATE
    audio = np.zeros((n, 2), np.float32)
    audio[lead : lead + len(user), 0] = user
    for a, b in robot_at:
        audio[lead + a : lead + b, 1] = 0.2
    clock = np.array([[f, T0 + f / RATE] for f in range(0, n + 320, 320)], dtype=float)
    return audio, clock, T0 + lead / RATE  # the wall time the player started


def _outcome(utt, play_wall, finals):
    o = vl.TurnOutcome(0, utt.text, kind=utt.kind, play_wall=play_wall)
    o.finals = [("u1", "text", play_wall + f / RATE) for f in finals]
    return o


def test_analyse_clean_pause_turn(utts):
    utt = utts[1]
    end = utt.speech_end
    audio, clock, play = _recording(utt, [(end + RATE // 2, end + RATE)])
    o = _outcome(utt, play, [end + RATE // 4])  # one final, 0.25 s after the last word
    vl.analyse(o, utt, audio, clock)
    assert not o.split_by and not o.error
    assert o.endpoint_delay_s == pytest.approx(0.25, abs=0.002)
    assert o.v2v_s == pytest.approx(0.5, abs=0.002)
    assert o.pause_s == pytest.approx(vl.PAUSE_UTTERANCES[0][2], abs=0.002)
    assert o.user_end_wall == pytest.approx(play + end / RATE, abs=0.002)


def test_analyse_split_turns(utts):
    utt = utts[1]
    p0, p1, end = utt.pause_start, utt.pause_end, utt.speech_end
    # the ASR ended the turn in the pause (a final for the first part) and again after the end;
    # the robot answered the first part while the user said the rest
    audio, clock, play = _recording(utt, [(p1 + RATE // 4, end + RATE)])
    o = _outcome(utt, play, [p0 + RATE // 2, end + RATE // 5])
    vl.analyse(o, utt, audio, clock)
    assert o.split_by == ["final_before_end", "several_finals", "robot_before_end"]
    assert o.endpoint_delay_s == pytest.approx(0.2, abs=0.002)  # the final after the end
    # one final only, but the robot spoke in the pause (an answer released too early)
    audio, clock, play = _recording(utt, [(p0 + RATE // 10, p0 + RATE // 4)])
    o = _outcome(utt, play, [end + RATE // 4])
    vl.analyse(o, utt, audio, clock)
    assert o.split_by == ["robot_before_end"]
    # no robot audio after the end: still judged (split), v2v unknown
    audio, clock, play = _recording(utt, [])
    o = _outcome(utt, play, [p0 + RATE // 2])
    vl.analyse(o, utt, audio, clock)
    assert o.split_by == ["final_before_end"] and o.endpoint_delay_s is None
    assert o.v2v_s is None and o.error == "no robot audio after the utterance"


def _turn(kind, v2v, split=(), delay=0.3, **kw):
    return {
        "kind": kind,
        "v2v_s": v2v,
        "split_by": list(split),
        "user_end_wall": 1.0,
        "finals": [("u", "t", 1.3)],
        "endpoint_delay_s": delay,
        **kw,
    }


def test_loop_figures():
    turns = [
        _turn("finished", 0.6, preemptive_started=1),
        _turn("finished", 0.8, delay=0.5),
        _turn("finished", 0.7, split=["several_finals"]),
        _turn("pause", 0.9, preemptive_started=2, preemptive_wasted=1, resumed=1),
        _turn("pause", 0.1, split=["robot_before_end"]),
        _turn("pause", None, split=["final_before_end"], delay=None),
        {**_turn("pause", None), "finals": []},  # no final at all: not judged
    ]
    f = vl.loop_figures(turns)
    assert f["voice_to_voice_turns"] == 3 and f["voice_to_voice_p50_s"] == pytest.approx(0.8)
    assert f["voice_to_voice_all_p50_s"] == pytest.approx(0.75)  # + the several_finals turn
    assert f["finished_voice_to_voice_p50_s"] == pytest.approx(0.7)
    assert f["pause_voice_to_voice_p50_s"] == pytest.approx(0.9)
    assert f["pause_turns"] == 3 and f["pause_split_turns"] == 2
    assert f["false_endpoint_rate"] == pytest.approx(2 / 3) and f["finished_split_turns"] == 1
    assert f["endpoint_delay_p50_s"] == pytest.approx(0.3)
    assert f["endpoint_delay_finished_p50_s"] == pytest.approx(0.3)
    assert f["preemptive_started"] == 3 and f["preemptive_wasted"] == 1 and f["user_resumed"] == 1
    assert vl.loop_figures([])["false_endpoint_rate"] is None


def test_report_rows_for_turn_taking_and_peer():
    result = {
        "voice_to_voice_p50_s": 0.7,
        "voice_to_voice_p90_s": 1.2,
        "false_endpoint_rate": 0.0,
        "endpoint_delay_p50_s": 0.45,
        "voice_to_voice_vs_peer": 0.3,
        "voice_to_voice_turns": 10,
        "pause_turns": 6,
        "pause_split_turns": 0,
        "preemptive_started": 4,
        "preemptive_wasted": 1,
        "peer": {"voice_to_voice_p50_s": 2.3, "pause_turns": 6, "pause_split_turns": 3},
    }
    md = markdown(result)
    assert "| end of speech → first audio p50 | 0.7 s | <= 0.8 s | met |" in md
    assert "| end of speech → first audio p90 | 1.2 s | <= 1 s | MISSED |" in md
    assert "| false endpoints (pause utterances split) | 0 | <= 0.05 | met |" in md
    assert "| user's last word → final transcript p50 | 0.45 s | <= 0.4 s | MISSED |" in md
    assert "| voice-to-voice p50 ours ÷ pipecat | 0.3 | <= 0.4 | met |" in md
    assert "| turn-taking | ours | pipecat |" in md
    assert "| pause utterances split / judged | 0 / 6 | 3 / 6 |" in md
    assert "| preemptive starts / wasted | 4 / 1 | – / – |" in md
    assert "ours ÷ pipecat" not in markdown({k: v for k, v in result.items() if k != "peer"})


def _listener() -> vl.Listener:
    """The DDS listener's bookkeeping without rclpy: its callbacks fed by hand."""
    import threading

    lis = object.__new__(vl.Listener)
    lis.lock = threading.Condition()
    for name in ("finals", "speculative", "voice", "resumed", "preemptive", "discards"):
        setattr(lis, name, [])
    for name in ("vad_end", "metrics", "tts", "tts_started", "turn_end", "first_sentence", "held"):
        setattr(lis, name, {})
    return lis


class _Msg:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def test_listener_held_turns_discards_and_resumes():
    lis = _listener()
    say = lambda **kw: lis._on_say(_Msg(**{"turn_id": "u1", "text": "", "held": False, **kw}))  # noqa: E731
    lis._on_va(_Msg(utterance_id="u1", speaking=True, resumed=False))
    say(text="Sure,", held=True)  # a preemptive start on the early transcript …
    lis.turn_end["u1"] = 1.0
    say(held=True, discard=True)  # … dropped unheard: the user went on
    lis._on_va(_Msg(utterance_id="u1", speaking=True, resumed=True))
    assert lis.counts()["discards"] == 1 and lis.counts()["resumed"] == 1
    lis._on_va(_Msg(utterance_id="u0", speaking=True))  # no field (older interface): …
    lis._on_va(_Msg(utterance_id="u0", speaking=True))  # … the same id again is a resume
    assert lis.counts()["resumed"] == 2
    assert "u1" not in lis.turn_end and "u1" not in lis.first_sentence  # the attempt is gone
    say(text="Of course.", held=True)  # a second preemptive start, released this time
    say()  # the release (held=false, empty)
    assert lis.first_sentence["u1"] == "Of course." and lis.counts()["preemptive"] == 1
    lis._on_va(_Msg(utterance_id="u1", speaking=False))
    assert "u1" in lis.vad_end


def test_spoken_waits_for_audio_of_a_released_turn():
    """A preemptive turn can end (turn_end) before its held sentences are released and played:
    a not-speaking state before the audio began is not the end (the loop started the next
    utterance over the answer before this)."""
    import time

    lis = _listener()
    now = time.time()
    lis.first_sentence["u1"] = "Sure,"
    lis.turn_end["u1"] = now
    lis.tts["u1"] = (False, now)  # held: synthesised, not playing
    assert lis.spoken("u1") is None
    lis._on_tts(_Msg(turn_id="u1", speaking=True))
    assert lis.spoken("u1") is None
    lis._on_tts(_Msg(turn_id="u1", speaking=False))
    assert lis.spoken("u1") is True
    lis.turn_end["u2"] = now - 2.0  # nothing to say
    assert lis.spoken("u2") is True
    lis.first_sentence["u3"], lis.turn_end["u3"] = "…", now - 11.0  # never made audio
    assert lis.spoken("u3") is True and lis.spoken("nobody") is None


def test_a_helper_process_that_ends_is_reported_with_its_exit_code_and_log(tmp_path):
    """The stack dying at start-up (a bad --set) is said at once, with why, not after the
    240 s wait for its "ready" line."""
    import time

    code = "import sys; print('ALSA lib noise', file=sys.stderr); "
    code += "print('ValueError: few_shot_nearest_min_score', file=sys.stderr); sys.exit(3)"
    proc = vl._Proc(["-c", code], {}, tmp_path / "helper.log")
    t0 = time.monotonic()
    with pytest.raises(RuntimeError) as err:
        proc.read(240)
    proc.stop()
    assert time.monotonic() - t0 < 30
    message, _, tail = str(err.value).partition("helper.log:")
    assert "exit code 3" in message
    assert tail.strip() == "ValueError: few_shot_nearest_min_score"  # PortAudio's noise left out

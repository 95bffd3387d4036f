"""ASR node in its own process: speech streamed on audio/input (partials, finals, VAD boundaries,
metrics), and a missing input device."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState

from bolt_agent.core.audio.audio_io import float_to_int16
from bolt_agent.nodes import qos
from bolt_agent_interfaces.msg import AudioChunk, Transcript, TtsState, TurnMetrics, VoiceActivity
from support.asr import start_asr
from support.audio_fixtures import make_speech, pulse, speech_wav, wait_for, wer  # noqa: F401 - fixtures
from support.diagnostics import ActiveStatus, Diagnostics
from support.ros_helpers import ros_node, spin_until, wait_for_subscriber

BOUNDARY_S = 0.2
CHUNK = 1600  # 100 ms blocks


def start_asr_as(node_process, ns: str, name: str, prefix: str, *params: str):
    """A second ASR node: named ``name``, publishing under ``prefix/`` instead of ``asr/``."""
    remaps = (
        f"__node:={name}",
        f"asr/voice_activity:={prefix}/voice_activity",
        f"asr/transcript:={prefix}/transcript",
    )
    return start_asr(node_process, ns, *params, remaps=remaps)


def watch_asr_nodes(node, ns: str, prefixes: dict[str, str], names: tuple[str, ...]):
    """Record each ASR node's voice activity and transcripts (key → topic prefix) in arrival
    order, and the latest status of each named node."""
    seen: dict[str, list] = {key: [] for key in prefixes}
    for key, prefix in prefixes.items():
        for msg_type, leaf in ((VoiceActivity, "voice_activity"), (Transcript, "transcript")):
            node.create_subscription(
                msg_type, f"{ns}/{prefix}/{leaf}", seen[key].append, qos.RELIABLE
            )
    status = ActiveStatus(node, ns, names)
    return seen, status


@contextmanager
def topic_asr(node_process, ns: str, *params: str) -> Iterator[tuple]:
    """asr_node listening on audio/input (no partials) and a probe node watching it, ready for
    audio: (the node's process, the probe, its executor, what it saw, the audio publisher)."""
    proc = start_asr(node_process, ns, "audio_source:=topic", "partial_interval_s:=0.0", *params)
    with ros_node("asr_probe") as (node, ex):
        seen, status = watch_asr_nodes(node, ns, {"asr": "asr"}, ("asr_node",))
        pub = node.create_publisher(AudioChunk, f"{ns}/audio/input", qos.AUDIO)
        spin_until(ex, lambda: status, 60, "the ASR node's status")
        spin_until(ex, lambda: pub.get_subscription_count() == 1, 10, "the audio subscriber")
        yield proc, node, ex, seen, pub


def secs(t) -> float:
    return t.sec + t.nanosec * 1e-9


@pytest.mark.slow
def test_streamed_speech_gives_partials_then_finals_at_true_boundaries(
    node_process,
    unique_ns,
    speech_wav,  # noqa: F811
):
    proc = start_asr(node_process, unique_ns, "audio_source:=topic", "partial_interval_s:=0.8")
    with ros_node("asr_probe") as (node, ex):
        events: list = []  # VoiceActivity and Transcript in arrival order
        node.create_subscription(
            VoiceActivity, f"{unique_ns}/asr/voice_activity", events.append, qos.RELIABLE
        )
        node.create_subscription(Transcript, f"{unique_ns}/asr/transcript", events.append, 50)
        metrics: list[TurnMetrics] = []
        node.create_subscription(TurnMetrics, f"{unique_ns}/bolt/turn_metrics", metrics.append, 50)
        status = ActiveStatus(node, unique_ns, ("asr_node",))
        pub = node.create_publisher(AudioChunk, f"{unique_ns}/audio/input", qos.AUDIO)
        spin_until(ex, lambda: bool(status), 60, lambda: f"the ASR node to listen: {proc.log()}")
        wait_for_subscriber(ex, pub)

        pcm = float_to_int16(speech_wav.audio)
        base = node.get_clock().now().nanoseconds
        t0 = time.monotonic()
        for i in range(0, len(pcm), CHUNK):  # paced like a microphone, stamped by sample count
            spin_until(ex, lambda i=i: time.monotonic() - t0 >= i / 16000, 5, "the next block")
            msg = AudioChunk(sample_rate=16000, channels=1, samples=pcm[i : i + CHUNK].tolist())
            ns = base + i * 1_000_000_000 // 16000
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(ns, 1_000_000_000)
            pub.publish(msg)

        def finals() -> list[Transcript]:
            return [e for e in events if isinstance(e, Transcript) and e.is_final]

        spin_until(ex, lambda: len(finals()) == len(speech_wav.texts), 30, f"finals: {events}")
        spin_until(ex, lambda: len(metrics) == len(speech_wav.texts), 5, "turn metrics")

    starts = [e for e in events if isinstance(e, VoiceActivity) and e.speaking and not e.resumed]
    stops = [e for e in events if isinstance(e, VoiceActivity) and not e.speaking]
    assert len(starts) == len(stops) == len(speech_wav.texts)
    for start, stop, final, (first, last), text, m in zip(
        starts, stops, finals(), speech_wav.truth, speech_wav.texts, metrics, strict=True
    ):
        uid = final.utterance_id
        assert start.utterance_id == stop.utterance_id == uid and not start.barge_in
        t_start = secs(start.header.stamp) - base * 1e-9
        t_stop = secs(stop.header.stamp) - base * 1e-9
        assert abs(t_start - first / 16000) <= BOUNDARY_S, (t_start, first / 16000)
        assert abs(t_stop - last / 16000) <= BOUNDARY_S, (t_stop, last / 16000)
        assert abs(secs(final.audio_start) - secs(start.header.stamp)) < 1e-3
        assert wer(text, final.text) <= 0.1, (text, final.text)
        assert final.language == "en" and 0.3 < final.confidence <= 1.0
        mine = [e for e in events if getattr(e, "utterance_id", "") == uid]
        partials = [e for e in mine if isinstance(e, Transcript) and not e.is_final]
        assert partials, f"no partial for {text!r}"
        assert mine.index(partials[-1]) < mine.index(final)  # partials precede the final
        assert m.source == "asr" and m.turn_id == uid
        assert secs(m.speech_end) == pytest.approx(secs(stop.header.stamp), abs=1e-3)
        assert secs(m.asr_final) > 0
    assert proc.alive(), proc.log()


def test_missing_input_device_keeps_node_up_and_reports(node_process, unique_ns, pulse):  # noqa: F811
    proc = start_asr(
        node_process, unique_ns, "device:=no_such_device", "retry_s:=0.5", env=pulse.env()
    )
    with ros_node("asr_probe") as (node, ex):
        diag = Diagnostics(node, unique_ns)
        _, message, _ = diag.wait(ex, "asr_node", lambda lv, *_: lv == "ERROR", 60, [proc])
        assert "no_such_device" in message and "available input devices" in message
        assert "default" in message
        spin_until(ex, lambda: proc.log().count("no_such_device") >= 2, 10, "a retry")
    assert proc.alive(), proc.log()


def test_bad_model_fails_configure_with_the_file_named(node_process, unique_ns):
    proc = start_asr(node_process, unique_ns, "model:=/nonexistent/whisper-dir")
    wait_for(lambda: "configure failed" in proc.log(), 30, "the configure failure")
    log = proc.log()
    assert "ASR model missing" in log and "/nonexistent/whisper-dir" in log, log
    assert proc.alive(), log  # stays up, unconfigured


@pytest.mark.slow
def test_echo_modes_barge_in_and_gate(node_process, unique_ns, speech_wav):  # noqa: F811
    """Two ASR nodes hear the same stream: `barge_in` flags speech over the robot (and still
    transcribes it), `gate` ignores the mic until the robot has stopped."""
    # the fixed 500 ms end of speech: the stream pauses 0.7 s after the first utterance
    barge_proc = start_asr(
        node_process,
        unique_ns,
        "audio_source:=topic",
        "partial_interval_s:=0.0",
        "end_of_turn:=fixed",
    )
    gate_proc = start_asr_as(
        node_process,
        unique_ns,
        "asr_gate",
        "gate",
        "audio_source:=topic",
        "partial_interval_s:=0.0",
        "echo_mode:=gate",
        "end_of_turn:=fixed",
    )
    with ros_node("asr_probe") as (node, ex):
        seen, status = watch_asr_nodes(
            node, unique_ns, {"barge": "asr", "gate": "gate"}, ("asr_node", "asr_gate")
        )
        tts_state = node.create_publisher(TtsState, f"{unique_ns}/tts/state", qos.LATCHED)
        pub = node.create_publisher(AudioChunk, f"{unique_ns}/audio/input", qos.AUDIO)
        spin_until(ex, lambda: len(status) == 2, 60, f"both ASR nodes: {status}")
        spin_until(ex, lambda: pub.get_subscription_count() == 2, 10, "two audio subscribers")
        spin_until(ex, lambda: tts_state.get_subscription_count() == 2, 10, "two state subscribers")

        pcm = float_to_int16(speech_wav.audio)
        split = speech_wav.truth[1][0] - int(0.8 * 16000)  # in the silence before utterance 2

        def stream(x: np.ndarray, speed: float) -> None:
            t0 = time.monotonic()
            for i in range(0, len(x), CHUNK):
                spin_until(ex, lambda i=i: time.monotonic() - t0 >= i / 16000 / speed, 5)
                block = x[i : i + CHUNK].tolist()
                pub.publish(AudioChunk(sample_rate=16000, channels=1, samples=block))

        def finals(key: str) -> list[Transcript]:
            return [m for m in seen[key] if isinstance(m, Transcript) and m.is_final]

        tts_state.publish(TtsState(speaking=True, turn_id="r1"))
        stream(pcm[:split], speed=2.0)
        spin_until(ex, lambda: len(finals("barge")) == 1, 30, "the barge-in utterance")
        tts_state.publish(TtsState(speaking=False, turn_id="r1"))
        # the state and the audio come on two topics: 0.5 s more silence before the words lets
        # the state arrive first on a loaded machine (the gate's tail is then 300 ms of the
        # audio after it, however fast the audio comes)
        stream(np.concatenate([np.zeros(8000, np.int16), pcm[split:]]), speed=1.0)
        spin_until(
            ex,
            lambda: len(finals("barge")) == 2 and len(finals("gate")) == 1,
            30,
            f"the second utterance: {seen}",
        )

    barge_va = [m for m in seen["barge"] if isinstance(m, VoiceActivity) and not m.resumed]
    assert [(m.speaking, m.barge_in) for m in barge_va] == [
        (True, True),
        (False, True),
        (True, False),
        (False, False),
    ]
    assert wer(speech_wav.texts[0], finals("barge")[0].text) <= 0.1
    gate_va = [m for m in seen["gate"] if isinstance(m, VoiceActivity) and not m.resumed]
    assert [(m.speaking, m.barge_in) for m in gate_va] == [(True, False), (False, False)]
    assert wer(speech_wav.texts[1], finals("gate")[0].text) <= 0.1
    assert barge_proc.alive() and gate_proc.alive()


@pytest.mark.slow
def test_early_final_is_transcribed_before_the_end_of_speech_is_confirmed(
    node_process,
    unique_ns,
    speech_wav,  # noqa: F811
):
    """With a long `min_silence_ms`, whisper's early result for the silence that began is
    published (as a partial over exactly the final's span) before the VAD confirms the end, and
    the final repeats it; with `early_final: false` nothing comes before the end."""
    common = (  # fixed: the words cannot end the utterance before the 1.2 s silence
        "audio_source:=topic", "partial_interval_s:=0.0", "end_of_turn:=fixed",
        "min_silence_ms:=1200",
    )  # fmt: skip
    spec_proc = start_asr(node_process, unique_ns, *common)
    plain_proc = start_asr_as(
        node_process, unique_ns, "asr_plain", "plain", *common, "early_final:=false"
    )
    with ros_node("asr_probe") as (node, ex):
        seen, status = watch_asr_nodes(
            node, unique_ns, {"asr": "asr", "plain": "plain"}, ("asr_node", "asr_plain")
        )
        pub = node.create_publisher(AudioChunk, f"{unique_ns}/audio/input", qos.AUDIO)
        spin_until(ex, lambda: len(status) == 2, 60, f"both ASR nodes: {status}")
        spin_until(ex, lambda: pub.get_subscription_count() == 2, 10, "two audio subscribers")
        pcm = np.concatenate([float_to_int16(speech_wav.audio), np.zeros(16000, np.int16)])
        t0 = time.monotonic()
        for i in range(0, len(pcm), CHUNK):
            spin_until(ex, lambda i=i: time.monotonic() - t0 >= i / 16000, 5, "the next block")
            pub.publish(
                AudioChunk(sample_rate=16000, channels=1, samples=pcm[i : i + CHUNK].tolist())
            )

        def finals(key: str) -> list[Transcript]:
            return [m for m in seen[key] if isinstance(m, Transcript) and m.is_final]

        n = len(speech_wav.texts)
        spin_until(ex, lambda: len(finals("asr")) == len(finals("plain")) == n, 30, str(seen))

    assert not [m for m in seen["plain"] if isinstance(m, Transcript) and not m.is_final]
    events = seen["asr"]
    for final, text in zip(finals("asr"), speech_wav.texts, strict=True):
        mine = [e for e in events if e.utterance_id == final.utterance_id]
        end = next(i for i, e in enumerate(mine) if isinstance(e, VoiceActivity) and not e.speaking)
        early = [e for e in mine[:end] if isinstance(e, Transcript)]
        # (a pause inside the sentence may have given an earlier early partial too)
        assert early and not any(e.is_final for e in early), mine
        assert early[-1].text == final.text and wer(text, final.text) <= 0.1, (early, final)
        # same span (stamps map sample offsets through the latest block's arrival time)
        assert secs(early[-1].audio_end) == pytest.approx(secs(final.audio_end), abs=0.1)
    assert spec_proc.alive() and plain_proc.alive(), spec_proc.log() + plain_proc.log()


@pytest.mark.slow
def test_audio_that_stops_mid_sentence_still_gives_its_final(
    node_process,
    unique_ns,
    speech_wav,  # noqa: F811
):
    """A bag or publisher that stops while the user speaks: after `audio_stopped_s` without a
    block, the open utterance ends with what was heard (its words are not held until audio comes
    back, which may be never), and the node goes on listening."""
    with topic_asr(node_process, unique_ns, "audio_stopped_s:=1.0") as (proc, node, ex, seen, pub):

        def publish(pcm: np.ndarray) -> None:
            t0 = time.monotonic()
            for i in range(0, len(pcm), CHUNK):
                spin_until(ex, lambda i=i: time.monotonic() - t0 >= i / 16000, 5, "next block")
                block = pcm[i : i + CHUNK].tolist()
                pub.publish(AudioChunk(sample_rate=16000, channels=1, samples=block))

        def finals() -> list[Transcript]:
            return [m for m in seen["asr"] if isinstance(m, Transcript) and m.is_final]

        # cut at the last loud sample of the second sentence: no silence after it at all
        publish(float_to_int16(speech_wav.audio[: speech_wav.truth[-1][1]]))
        t_stop = time.monotonic()
        spin_until(
            ex, lambda: len(finals()) == 2, 30, lambda: f"both finals: {seen['asr']}\n{proc.log()}"
        )
        waited = time.monotonic() - t_stop
        assert 1.0 <= waited < 10.0, waited  # audio_stopped_s, then whisper
        for final, text in zip(finals(), speech_wav.texts, strict=True):
            assert wer(text, final.text) <= 0.2, (text, final.text)
        # (logged after the final is published: wait for it)
        spin_until(ex, lambda: "no audio for audio_stopped_s" in proc.log(), 10, proc.log)
        # audio again: heard as usual
        publish(float_to_int16(speech_wav.audio))
        spin_until(ex, lambda: len(finals()) == 4, 30, lambda: f"two more finals\n{proc.log()}")

        # deactivated while the user speaks (before audio_stopped_s): the open utterance ends
        # with what was heard, its speaking=false and its final are published before the
        # transition is over
        client = node.create_client(ChangeState, f"{unique_ns}/asr_node/change_state")
        spin_until(ex, client.service_is_ready, 20, "asr_node/change_state")
        publish(float_to_int16(speech_wav.audio[: speech_wav.truth[0][1]]))
        request = ChangeState.Request(transition=Transition(id=Transition.TRANSITION_DEACTIVATE))
        future = client.call_async(request)
        spin_until(ex, future.done, 20, "the deactivation")
        assert future.result().success, proc.log()
        # (published before the transition's reply; another topic, so it may arrive after it)
        spin_until(ex, lambda: len(finals()) == 5, 5, lambda: f"{seen['asr']}\n{proc.log()}")
        assert wer(speech_wav.texts[0], finals()[-1].text) <= 0.2, finals()[-1].text
        voice = [m for m in seen["asr"] if isinstance(m, VoiceActivity)]
        assert not voice[-1].speaking and voice[-1].utterance_id == finals()[-1].utterance_id
        spin_until(ex, lambda: "deactivated mid-utterance" in proc.log(), 10, proc.log)
    assert proc.alive(), proc.log()


@pytest.mark.slow
def test_audio_lost_mid_sentence_is_not_spliced_across_the_gap(node_process, unique_ns, tmp_path):
    """A second of audio/input lost in the middle of a sentence (a best-effort block that never
    came: found by the stamps): the words before the gap end as an utterance of their own
    (`ended_by_audio_lost`), the words after it are a new one. Then a block the node must drop
    (longer than `max_queued_s` allows): the diagnostics account for every second lost either
    way as skipped over by the VAD."""
    speech = make_speech(
        tmp_path, ("I would like to buy a long sword, a round shield and a pair of leather boots.",)
    )
    with topic_asr(node_process, unique_ns, "max_queued_s:=0.5") as (proc, node, ex, seen, pub):
        diag = Diagnostics(node, unique_ns)
        pcm = float_to_int16(np.concatenate([speech.audio, np.zeros(32_000, np.float32)]))
        hole = speech.truth[0][0] + 20_000  # 1.25 s into the sentence: one second never sent
        big = len(pcm) - 11_200  # 2.5 s into the silence after it: 0.6 s in one block, dropped
        blocks = [(i, min(i + CHUNK, hole)) for i in range(0, hole, CHUNK)]
        blocks += [(i, min(i + CHUNK, big)) for i in range(hole + 16_000, big, CHUNK)]
        blocks += [(big, big + 9_600)]
        blocks += [(i, i + CHUNK) for i in range(big + 9_600, len(pcm), CHUNK)]
        stamp0 = node.get_clock().now().nanoseconds

        def finals() -> list[Transcript]:
            return [m for m in seen["asr"] if isinstance(m, Transcript) and m.is_final]

        t0 = time.monotonic()
        for a, b in blocks:
            spin_until(ex, lambda a=a: time.monotonic() - t0 >= a / 16000, 5, "next block")
            msg = AudioChunk(sample_rate=16000, channels=1, samples=pcm[a:b].tolist())
            stamp = stamp0 + a * 62_500
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp, 10**9)
            pub.publish(msg)
        spin_until(ex, lambda: len(finals()) == 2, 30, lambda: f"{seen['asr']}\n{proc.log()}")
        before, after = (f.text.lower() for f in finals())
        assert "would like" in before and "boots" not in before, before
        assert "boots" in after and "would like" not in after, after
        assert secs(finals()[0].audio_end) <= secs(finals()[1].audio_start) - 0.9  # the hole

        def accounted(level, message, values) -> bool:
            return (
                values.get("ended_by_audio_lost") == "1"
                and values.get("audio_gaps") == "1"
                and float(values.get("audio_gap_s", "nan")) == pytest.approx(1.0)
                and values.get("failures.audio_overflow") == "1"
                and float(values.get("audio_dropped_s", "nan")) == pytest.approx(0.6)
                and float(values.get("audio_skipped_s", "nan")) == pytest.approx(1.6)
            )

        diag.wait(ex, "asr_node", accounted, 10, [proc])
        assert "the utterance ends with what was heard" in proc.log()
    assert proc.alive(), proc.log()

"""Closed loop over real audio: the TTS node plays into the `robot_speaker` null sink, the ASR
node (another process) records `robot_speaker.monitor` and must hear what was said."""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from bolt_agent.core.asr.audio_ingest import StreamGaps
from bolt_agent.nodes import qos
from bolt_agent_interfaces.msg import AudioChunk, SpokenText, Transcript, TtsState, TurnMetrics
from support.asr import start_asr
from support.audio_fixtures import pulse, wer  # noqa: F401 - fixture
from support.diagnostics import ActiveStatus, Diagnostics
from support.ros_helpers import NodeProcess, ros_node, spin_until, wait_for_subscriber

SENTENCE = "Hello there, let me check the back room for you."
BAG = ("-m", "bolt_agent.cli", "bag")


@dataclass
class Loop:
    """The two nodes on the null sink and a probe watching them (both devices ready)."""

    tts: NodeProcess
    asr: NodeProcess
    node: Any
    ex: Any
    status: dict[str, dict]
    finals: list[Transcript]
    states: list[TtsState]
    say: Any

    def logs(self) -> str:
        return f"{self.status}\n{self.tts.log()}\n{self.asr.log()}"

    def speak(self, turn_id: str) -> None:
        self.say.publish(SpokenText(turn_id=turn_id, seq=0, text=SENTENCE, is_last_in_turn=True))


def final_transcripts(node, ns: str) -> list[Transcript]:
    """The final transcripts of the ASR node under ``ns``, as they come."""
    finals: list[Transcript] = []
    node.create_subscription(
        Transcript, f"{ns}/asr/transcript", lambda m: finals.append(m) if m.is_final else None, 50
    )
    return finals


@contextmanager
def speech_loop(node_process, ns: str, pulse, *asr_params: str) -> Iterator[Loop]:  # noqa: F811
    ros = ["--ros-args", "-r", f"__ns:={ns}"]
    tts = node_process(
        "-m", "bolt_agent.nodes.tts_node", *ros, env=pulse.env(sink="robot_speaker"), name="tts"
    )
    asr = start_asr(
        node_process,
        ns,
        "echo_mode:=off",
        *asr_params,
        env=pulse.env(source="robot_speaker.monitor"),
    )
    with ros_node("loop_probe") as (node, ex):
        status = ActiveStatus(node, ns, ("tts_node", "asr_node"))
        finals = final_transcripts(node, ns)
        states: list[TtsState] = []
        node.create_subscription(TtsState, f"{ns}/tts/state", states.append, qos.LATCHED)
        say = node.create_publisher(SpokenText, f"{ns}/speech/say", qos.RELIABLE)
        loop = Loop(tts, asr, node, ex, status, finals, states, say)

        def ready() -> bool:
            return len(status) == 2  # both report OK: active, devices open

        try:
            spin_until(ex, ready, 60, "both nodes' devices")
            wait_for_subscriber(ex, say)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{loop.logs()}") from None
        yield loop


@pytest.mark.slow
def test_tts_to_asr_through_pulseaudio(node_process, unique_ns, pulse):  # noqa: F811
    with speech_loop(node_process, unique_ns, pulse) as loop:
        node, ex, finals, states = loop.node, loop.ex, loop.finals, loop.states
        metrics: list[TurnMetrics] = []
        sub = node.create_subscription(
            TurnMetrics, f"{unique_ns}/bolt/turn_metrics", metrics.append, 50
        )
        try:
            spin_until(ex, lambda: sub.get_publisher_count() == 2, 10, "both metrics publishers")
            loop.speak("loop")
            spin_until(ex, lambda: bool(finals), 45, "a final transcript")
            spin_until(ex, lambda: states and states[-1].spoken_text == SENTENCE, 10, "tts done")
            spin_until(ex, lambda: {m.source for m in metrics} == {"tts", "asr"}, 5, "metrics")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{loop.logs()}") from None

    assert wer(SENTENCE, finals[0].text) <= 0.1, finals[0].text
    assert not states[-1].speaking and not states[-1].interrupted
    tts_m = next(m for m in metrics if m.source == "tts")
    asr_m = next(m for m in metrics if m.source == "asr")
    assert tts_m.turn_id == "loop" and asr_m.turn_id == finals[0].utterance_id
    # the ASR heard the speech after the TTS started it
    assert (asr_m.speech_end.sec, asr_m.speech_end.nanosec) > (
        tts_m.first_audio.sec,
        tts_m.first_audio.nanosec,
    )
    assert loop.tts.alive() and loop.asr.alive()


@pytest.mark.slow
def test_a_stalled_asr_process_records_microphone_audio_that_replays_without_a_gap(
    node_process,
    unique_ns,
    pulse,  # noqa: F811
    tmp_path,
):
    """The ASR process is stopped for 0.6 s while the robot speaks (a machine too busy to run
    it): PulseAudio keeps the audio, and the backlog comes at once when it runs again. The
    blocks `publish_audio` puts on audio/input are stamped by the microphone's sample clock, so
    they go on where they left off, and the sentence is heard whole. `bolt-agent bag record`
    keeps them; played back into another ASR node (`audio_source: topic`), the bag gives the
    same one sentence, no gap. (Stamped by their arrival, as before, the first block after the
    stall came 0.6 s after where the one before ended: lost audio to the ASR that replays it,
    which cut the sentence in two.)"""
    bag, replay_ns = tmp_path / "mic", f"{unique_ns}_replay"
    with speech_loop(node_process, unique_ns, pulse, "publish_audio:=true") as loop:
        node, ex, finals, states = loop.node, loop.ex, loop.finals, loop.states
        blocks: list[tuple[int, int, float]] = []  # (stamp ns, samples, arrival)

        def on_audio(msg: AudioChunk) -> None:
            stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
            blocks.append((stamp, len(msg.samples), time.monotonic()))

        topic = f"{unique_ns}/audio/input"
        node.create_subscription(AudioChunk, topic, on_audio, qos.AUDIO)
        diag = Diagnostics(node, unique_ns)
        recorder = node_process(*BAG, "record", "-o", str(bag), topic, name="recorder")
        try:
            spin_until(ex, lambda: node.count_subscribers(topic) >= 2, 30, "the bag recorder")
            spin_until(ex, lambda: len(blocks) >= 50, 10, "microphone blocks on audio/input")
            loop.speak("stall")
            spin_until(ex, lambda: any(s.speaking for s in states), 20, "the robot speaking")
            t = time.monotonic()
            spin_until(ex, lambda: time.monotonic() - t >= 0.6, 5, "0.6 s of speech")
            os.kill(loop.asr.proc.pid, signal.SIGSTOP)
            time.sleep(0.6)
            os.kill(loop.asr.proc.pid, signal.SIGCONT)
            spin_until(ex, lambda: bool(finals), 45, "a final transcript")
            spin_until(ex, lambda: states[-1].spoken_text == SENTENCE, 10, "tts done")
            seen = diag.count  # a report made after the stall and the sentence
            _, _, values = diag.wait(ex, "asr_node", lambda *_: diag.count > seen, 10, [loop.asr])
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{loop.logs()}\n{recorder.log()}") from None
        assert recorder.stop() == 0 and "wrote" in recorder.log(), recorder.log()

        # the bag, played into an ASR node that reads audio/input
        replay = start_asr(node_process, replay_ns, "audio_source:=topic", "echo_mode:=off")
        replayed = final_transcripts(node, replay_ns)
        replay_diag = Diagnostics(node, replay_ns)
        replay_diag.wait(ex, "asr_node", lambda level, *_: level == "OK", 60, [replay])
        player = node_process(*BAG, "play", str(bag), "--remap",
                              f"{topic}:={replay_ns}/audio/input", "--wait-subscribers", "20",
                              name="player")  # fmt: skip
        spin_until(ex, lambda: player.proc.poll() is not None, 60, player.log)
        assert player.proc.returncode == 0, player.log()
        spin_until(ex, lambda: bool(replayed), 30, lambda: f"the replay's final\n{replay.log()}")
        seen = replay_diag.count
        _, _, replay_values = replay_diag.wait(
            ex, "asr_node", lambda *_: replay_diag.count > seen + 1, 10, [replay]
        )

    stall = max(b[2] - a[2] for a, b in itertools.pairwise(blocks))
    assert stall >= 0.5, f"the process was not stopped long enough: {stall:.2f} s"
    assert all(b[0] > a[0] for a, b in itertools.pairwise(blocks))  # never back
    gaps = StreamGaps(tolerance_ns=50_000_000)
    missing = [g for stamp, n, _ in blocks if (g := gaps.block(stamp, n * 62_500))]
    assert missing == [], f"audio/input stamps jump by {missing} ns; diagnostics {values}"
    first, last = blocks[0], blocks[-1]
    heard_s = (last[0] + last[1] * 62_500 - first[0]) / 1e9  # the stamps' span: nothing lost
    assert heard_s == pytest.approx(last[2] - first[2], abs=0.25)
    assert values["input_errors"] == "0" and values["audio_gaps"] == "0", values
    assert wer(SENTENCE, finals[0].text) <= 0.1, finals[0].text
    assert len(replayed) == 1 and wer(SENTENCE, replayed[0].text) <= 0.1, replay.log()
    assert replay_values["audio_gaps"] == "0", replay_values
    assert loop.tts.alive() and loop.asr.alive() and replay.alive()

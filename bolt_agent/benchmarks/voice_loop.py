"""Voice-to-voice latency over real PortAudio devices (PulseAudio null sinks).

Processes: the stack (``stack_host``: every node, ASR on ``user_mouth.monitor``, TTS on
``robot_speaker``), a player (speaks each utterance WAV into ``user_mouth``) and a recorder
(``bench_mix.monitor``: left = user, right = robot, one clock). This process only listens on DDS
(TurnMetrics, VoiceActivity, transcripts, TTS state) and drives the turns.

Voice-to-voice = recorded last user speech sample → first robot sample above the threshold.
The stage breakdown maps the recording onto wall-clock time (the recorder stamps its blocks) and
places the nodes' TurnMetrics stamps between the two acoustic events.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import wave
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from bolt_agent.benchmarks.audio_procs import RATE, read_recording
from bolt_agent.benchmarks.pulse import start_bench_pulse

THRESHOLD = 0.01  # |x| above this is "non-silent" (as test/audio_fixtures)
LEAD_S = 0.3
UTTERANCES = (
    "Hello there! What is your name?",
    "Can you look around the room for me?",
    "What do you like to do for fun?",
    "Please give me a happy nod.",
    "How are you feeling today?",
    "Tell me something about robots.",
    "Can you wave your antenna at me?",
    "What can you see right now?",
    "Do you like music?",
    "Thank you, that was lovely.",
    "What is your favourite colour?",
    "Could you tilt your head, please?",
)
#: stage columns, in order: each is measured from the previous event
STAGES = ("vad_end", "asr_final", "llm_first_token", "first_speech", "first_audio", "audible")


@dataclass
class Utterance:
    text: str
    path: Path
    speech_start: int  # first/last non-silent sample in the WAV (16 kHz)
    speech_end: int


@dataclass
class TurnOutcome:
    index: int
    text: str
    turn_id: str = ""
    transcript: str = ""
    first_sentence: str = ""
    play_wall: float = 0.0
    vad_end_wall: float = 0.0
    stamps: dict[str, float] = field(default_factory=dict)  # wall seconds
    counters: dict[str, float] = field(default_factory=dict)
    error: str = ""
    tts_speaking_at_play: list[str] = field(default_factory=list)  # turns still "speaking"
    v2v_s: float | None = None
    stages_s: dict[str, float] = field(default_factory=dict)


def make_utterances(out_dir: Path, n: int) -> list[Utterance]:
    from bolt_agent.core.models import resolve_model
    from bolt_agent.core.speech.audio_io import float_to_int16, int16_to_float, resample
    from bolt_agent.core.speech.tts_engine import PiperEngine

    engine = PiperEngine(resolve_model("", kind="tts"))
    engine.load()
    out = []
    for i, text in enumerate(UTTERANCES[: min(n, len(UTTERANCES))]):
        pcm = np.concatenate([c.audio for c in engine.synthesize(text)])
        x = resample(int16_to_float(pcm), engine.sample_rate, RATE)
        x = np.concatenate([np.zeros(int(RATE * LEAD_S), np.float32), x])
        loud = np.nonzero(np.abs(x) > THRESHOLD)[0]
        path = out_dir / f"utt{i:02d}.wav"
        with wave.open(str(path), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(RATE)
            w.writeframes(float_to_int16(x).tobytes())
        out.append(Utterance(text, path, int(loud[0]), int(loud[-1]) + 1))
    return out


class _Proc:
    """A helper process speaking line-based text on stdin/stdout."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path):
        import queue

        self._log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env={**os.environ, **env},
            text=True,
            start_new_session=True,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line.strip())
        self._lines.put("")  # EOF

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def read(self, timeout: float) -> str:
        import queue

        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            line = ""
        if not line:
            raise TimeoutError(f"no answer from {self.proc.args[1:3]} within {timeout:.0f}s")
        return line

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc.poll() is None:
            try:
                self.send("quit")
                self.proc.wait(timeout)
            except (BrokenPipeError, subprocess.TimeoutExpired, OSError):
                self.proc.kill()
                self.proc.wait()
        self._log.close()


class Listener:
    """DDS side of the orchestrator: what the nodes report, stamped on arrival."""

    def __init__(self):
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        from bolt_agent.nodes.qos import LATCHED, RELIABLE
        from bolt_agent_interfaces.msg import (
            SpokenText,
            Transcript,
            TtsState,
            TurnMetrics,
            VoiceActivity,
        )

        rclpy.init()
        self.node = rclpy.create_node("bench_listener")
        self.lock = threading.Condition()
        self.finals: list = []
        self.vad_end: dict[str, float] = {}
        self.metrics: dict[str, dict] = {}
        self.tts: dict[str, tuple[bool, float]] = {}  # turn → (speaking, arrival)
        self.turn_end: dict[str, float] = {}  # turn → arrival of the LLM's turn_end
        self.first_sentence: dict[str, str] = {}
        n = self.node
        n.create_subscription(Transcript, "asr/transcript", self._on_text, RELIABLE)
        n.create_subscription(VoiceActivity, "asr/voice_activity", self._on_va, RELIABLE)
        n.create_subscription(TurnMetrics, "bolt/turn_metrics", self._on_metrics, RELIABLE)
        n.create_subscription(TtsState, "tts/state", self._on_tts, LATCHED)
        n.create_subscription(SpokenText, "speech/say", self._on_say, RELIABLE)
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(n)
        self._stop = threading.Event()
        self._spin = threading.Thread(target=self._spin_loop, daemon=True)
        self._spin.start()

    def _spin_loop(self) -> None:
        while not self._stop.is_set():
            self.executor.spin_once(timeout_sec=0.1)

    def _notify(self, fn) -> None:
        with self.lock:
            fn()
            self.lock.notify_all()

    def _on_text(self, msg) -> None:
        if msg.is_final:
            self._notify(lambda: self.finals.append((msg.utterance_id, msg.text)))

    def _on_va(self, msg) -> None:
        if not msg.speaking:
            self._notify(lambda: self.vad_end.setdefault(msg.utterance_id, time.time()))

    def _on_metrics(self, msg) -> None:
        from bolt_agent.core.turn_metrics import COUNTERS, STAGES

        def merge():
            rec = self.metrics.setdefault(msg.turn_id, {"stamps": {}, "counters": {}})
            for s in STAGES:
                t = getattr(msg, s)
                if t.sec:
                    rec["stamps"].setdefault(s, t.sec + t.nanosec * 1e-9)
            for c in COUNTERS:
                if getattr(msg, c):
                    rec["counters"][c] = float(getattr(msg, c))
            rec.setdefault("sources", []).append(msg.source)
            if msg.turn_end.sec:
                self.turn_end.setdefault(msg.turn_id, time.time())

        self._notify(merge)

    def _on_tts(self, msg) -> None:
        self._notify(lambda: self.tts.__setitem__(msg.turn_id, (msg.speaking, time.time())))

    def _on_say(self, msg) -> None:
        if msg.text:
            self._notify(lambda: self.first_sentence.setdefault(msg.turn_id, msg.text))

    def wait(self, probe, timeout: float):
        deadline = time.monotonic() + timeout
        with self.lock:
            while (value := probe()) is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.lock.wait(min(left, 0.1))
            return value

    def close(self) -> None:
        import rclpy

        self._stop.set()
        self._spin.join(timeout=5)
        self.executor.shutdown(timeout_sec=2)
        self.node.destroy_node()
        rclpy.try_shutdown()


def run_voice_loop(
    work: Path,
    turns: int,
    overrides: dict | None = None,
    profile: str = "reachy_mini",
    log=print,
    host: dict | None = None,
) -> dict:
    """Run ``turns`` acoustic turns; returns per-turn outcomes, stack RSS and the recording."""
    utts = make_utterances(work, min(turns, len(UTTERANCES)))
    pulse = start_bench_pulse(work)
    procs: list[_Proc] = []
    listener = None
    try:
        rec = _Proc(
            ["-m", "bolt_agent.benchmarks.audio_procs", "recorder", str(work / "rec")],
            pulse.env(source="bench_mix.monitor"),
            work / "recorder.log",
        )
        procs.append(rec)
        player = _Proc(
            ["-m", "bolt_agent.benchmarks.audio_procs", "player"],
            pulse.env(sink="user_mouth"),
            work / "player.log",
        )
        procs.append(player)
        cfg = json.dumps({"profile": profile, "overrides": overrides or {}, **(host or {})})
        stack = _Proc(
            ["-m", "bolt_agent.benchmarks.stack_host", cfg],
            pulse.env(sink="robot_speaker", source="user_mouth.monitor"),
            work / "stack.log",
        )
        procs.append(stack)
        rec.read(30), player.read(30)
        log("loading the stack…")
        ready = json.loads(stack.read(240))
        if ready["event"] != "ready":
            raise RuntimeError(f"stack failed to start: {ready['failed']} (see {work}/stack.log)")
        listener = Listener()
        outcomes = []
        with open(work / "turns.jsonl", "w") as saved:  # kept even if a later step fails
            for i in range(turns):
                outcomes.append(_turn(i, utts[i % len(utts)], player, listener, log))
                saved.write(json.dumps(asdict(outcomes[-1]), ensure_ascii=False) + "\n")
                saved.flush()
        stack.send("rss")
        rss_end = json.loads(stack.read(30))["rss"]
        rec.send("flush")
        rec.read(10)
    finally:
        if listener is not None:
            listener.close()
        for p in reversed(procs):
            p.stop()
        pulse.stop()
    audio, clock = read_recording(work / "rec")
    for o in outcomes:
        analyse(o, utts[o.index % len(utts)], audio, clock)
    return {
        "turns": outcomes,
        "rss_ready": ready["rss"],
        "rss_end": rss_end,
        "recording_s": len(audio) / RATE,
    }


def _turn(i: int, utt: Utterance, player: _Proc, lis: Listener, log) -> TurnOutcome:
    out = TurnOutcome(i, utt.text)
    with lis.lock:
        seen = len(lis.finals)
        out.tts_speaking_at_play = [t for t, (speaking, _) in lis.tts.items() if speaking]
    player.send(f"play {utt.path}")
    out.play_wall = float(player.read(10).split()[1])
    player.read(30)
    final = lis.wait(lambda: lis.finals[seen] if len(lis.finals) > seen else None, 30)
    if final is None:
        out.error = "no final transcript"
        log(f"turn {i}: {out.error}")
        return out
    uid = out.turn_id = final[0]
    out.transcript = final[1]

    def finished():
        """The LLM ended the turn and the TTS said all of it: a TtsState with speaking=false
        that arrived after turn_end (the end-of-turn marker reached the TTS), or no speech."""
        end = lis.turn_end.get(uid)
        if end is None:
            return None
        speaking, at = lis.tts.get(uid, (False, 0.0))
        if uid not in lis.first_sentence and time.time() - end > 1.0:
            return True  # nothing was said in this turn
        return True if (not speaking and at >= end - 0.3) else None  # is_last precedes turn_end

    if lis.wait(finished, 90) is None:
        out.error = "turn did not finish within 90 s"
    with lis.lock:
        m = lis.metrics.get(uid, {"stamps": {}, "counters": {}})
        out.stamps, out.counters = dict(m["stamps"]), dict(m["counters"])
        out.vad_end_wall = lis.vad_end.get(uid, 0.0)
        out.first_sentence = lis.first_sentence.get(uid, "")
    log(f"turn {i}: “{out.transcript}” → “{out.first_sentence.strip()[:80]}”")
    time.sleep(0.5)  # a short pause between turns, like a person (not a synchronisation wait)
    return out


def frame_to_wall(clock: np.ndarray, frame: float) -> float:
    return float(np.interp(frame, clock[:, 0], clock[:, 1]))


def wall_to_frame(clock: np.ndarray, wall: float) -> int:
    return int(np.interp(wall, clock[:, 1], clock[:, 0]))


def analyse(o: TurnOutcome, utt: Utterance, audio: np.ndarray, clock: np.ndarray) -> None:
    """Find the turn's acoustic events in the recording and fill v2v and the stages."""
    if o.error or not len(clock):
        return
    start = max(0, wall_to_frame(clock, o.play_wall) - RATE // 2)
    stop = start + RATE // 2 + int(utt.speech_end * 1.0) + RATE  # the utterance + 1 s margin
    user = np.nonzero(np.abs(audio[start:stop, 0]) > THRESHOLD)[0]
    if not len(user):
        o.error = "utterance not found in the recording"
        return
    user_end = start + int(user[-1]) + 1
    robot = np.nonzero(np.abs(audio[user_end:, 1]) > THRESHOLD)[0]
    if not len(robot):
        o.error = "no robot audio after the utterance"
        return
    robot_start = user_end + int(robot[0])
    o.v2v_s = (robot_start - user_end) / RATE
    t0 = frame_to_wall(clock, user_end)
    events = {"vad_end": o.vad_end_wall, **o.stamps, "audible": frame_to_wall(clock, robot_start)}
    prev = t0
    for stage in STAGES:
        t = events.get(stage)
        if t:
            o.stages_s[stage] = t - prev
            prev = t

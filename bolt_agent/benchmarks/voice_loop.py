"""Voice-to-voice latency over real PortAudio devices (PulseAudio null sinks).

Processes: the stack (``stack_host``: every node, ASR on ``user_mouth.monitor``, TTS on
``robot_speaker``), a player (speaks each utterance WAV into ``user_mouth``) and a recorder
(``bench_mix.monitor``: left = user, right = robot, one clock). This process only listens on DDS
(TurnMetrics, VoiceActivity, transcripts, TTS state) and drives the turns.

Voice-to-voice = recorded last user speech sample → first robot sample above the threshold.
The stage breakdown maps the recording onto wall-clock time (the recorder stamps its blocks) and
places the nodes' TurnMetrics stamps between the two acoustic events.

Two kinds of user utterance, interleaved (``SCHEDULE``: finished, pause, finished, …): the
finished lines (``UTTERANCES``) and the pause utterances (``PAUSE_UTTERANCES``: an incomplete
phrase, a 0.6 to 0.9 s pause, the rest), all made with one seeded Piper voice (the same WAVs
every run). Per turn the analysis also says whether the user's turn was **split**
(``TurnOutcome.split_by``: the ASR published a final transcript before the user's last word,
more than one final for one utterance, or the robot was heard before the user had finished)
and the **endpoint delay** (the user's last voiced sample → arrival of the first final
transcript after it). ``loop_figures`` turns the outcomes into the bench fields (also for the
pipecat peer, ``pipecat_peer``).
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
from typing import Any

import numpy as np

from bolt_agent.benchmarks.audio_procs import RATE, read_recording
from bolt_agent.benchmarks.page_cache import evict_stack_files
from bolt_agent.benchmarks.pulse import start_bench_pulse
from bolt_agent.core.processes import die_with_parent, stop_group

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
#: an incomplete phrase, the pause after it (0.6 to 0.9 s, as people pause mid-sentence), the rest.
#: The first parts end where a sentence cannot (a preposition, "and", an unfinished object) or
#: could ("… buy"): the words, not the silence, must tell that the turn goes on.
PAUSE_UTTERANCES = (
    ("I would like to buy", "a long sword and a shield, please.", 0.60),
    ("Could you turn your head towards", "the window, please?", 0.66),
    ("So yesterday I went to the market and", "I bought some apples.", 0.72),
    ("What I really want to know is", "how old you are.", 0.78),
    ("My favourite thing to do on a rainy day is", "reading a good book.", 0.84),
    ("Please look at me and then", "give me a little nod.", 0.90),
)
#: the order of the loop's utterances: (kind, index) — finished, pause, finished, … (12 + 6);
#: the first is a one-sentence question (a short run, e.g. 2 turns, has one of each kind)
SCHEDULE = tuple(
    item
    for k in range(len(PAUSE_UTTERANCES))
    for item in (("finished", 2 * k + 1), ("pause", k), ("finished", 2 * k))
)
#: the simulated user's voice: one seeded Piper session, utterances made in SCHEDULE order, so
#: every run (and the pipecat peer's loop) plays the very same audio
VOICE_SEED = 17
KINDS = ("finished", "pause")
#: stage columns, in order: each is measured from the previous event
STAGES = ("vad_end", "asr_final", "llm_first_token", "first_speech", "first_audio", "audible")


@dataclass
class Utterance:
    text: str
    path: Path
    speech_start: int  # first/last non-silent sample in the WAV (16 kHz)
    speech_end: int
    kind: str = "finished"  # finished | pause
    first_part: str = ""  # pause utterance: the words before the pause …
    pause_start: int = 0  # … the pause, from the first part's last non-silent sample + 1 …
    pause_end: int = 0  # … to the rest's first non-silent sample (0: no pause)


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
    kind: str = "finished"  # finished | pause (the utterance's)
    #: the user-turn ends in this turn: (utterance id, text, arrival wall); for our stack the
    #: final transcripts, for the peer its user-turn ends (the LLM started)
    finals: list[tuple[str, str, float]] = field(default_factory=list)
    speculative: int = 0  # early transcripts published (a silence began)
    resumed: int = 0  # the user went on after an early end (VoiceActivity again)
    preemptive_started: int = 0  # turns started held (before the user's turn was confirmed)
    preemptive_wasted: int = 0  # held turns dropped unheard (speech/say discard)
    user_end_wall: float = 0.0  # the user's last voiced sample, on the wall clock
    pause_s: float | None = None  # the pause measured in the recording
    endpoint_delay_s: float | None = None  # user's last voiced sample → first final after it
    split_by: list[str] = field(default_factory=list)  # why the user's turn counts as split

    @property
    def split(self) -> bool:
        return bool(self.split_by)


def _voiced(x: np.ndarray) -> np.ndarray:
    return np.nonzero(np.abs(x) > THRESHOLD)[0]


def join_with_pause(first: np.ndarray, rest: np.ndarray, pause_s: float) -> tuple[np.ndarray, int]:
    """``first`` up to its last non-silent sample, exactly ``pause_s`` of silence, ``rest`` from
    its first non-silent sample (16 kHz float): (audio, index where the pause starts)."""
    a, b = _voiced(first), _voiced(rest)
    if not len(a) or not len(b):
        raise ValueError("a part of the pause utterance is silent")
    head = first[: a[-1] + 1]
    gap = np.zeros(round(pause_s * RATE), np.float32)
    return np.concatenate([head, gap, rest[b[0] :]]).astype(np.float32), len(head)


def make_utterances(out_dir: Path, n: int) -> list[Utterance]:
    """The first ``n`` utterances of ``SCHEDULE`` (at most all of them) as 16 kHz WAVs, with
    ``LEAD_S`` of silence before the speech; seeded, so the same audio every run."""
    from bolt_agent.core.audio.audio_io import float_to_int16, int16_to_float, resample
    from bolt_agent.core.models import resolve_model
    from bolt_agent.core.tts.tts_engine import PiperEngine

    engine = PiperEngine(resolve_model("", kind="tts"), seed=VOICE_SEED)
    engine.load()

    def say(text: str) -> np.ndarray:
        pcm = np.concatenate([c.audio for c in engine.synthesize(text)])
        return resample(int16_to_float(pcm), engine.sample_rate, RATE)

    lead = np.zeros(int(RATE * LEAD_S), np.float32)
    out = []
    for i, (kind, k) in enumerate(SCHEDULE[: min(n, len(SCHEDULE))]):
        path = out_dir / f"utt{i:02d}.wav"
        if kind == "pause":
            first, rest, pause_s = PAUSE_UTTERANCES[k]
            # the phrase with a comma: Piper's clause intonation, not a sentence's final fall
            x, cut = join_with_pause(say(first + ","), say(rest), pause_s)
            x = np.concatenate([lead, x])
            pause = (len(lead) + cut, len(lead) + cut + round(pause_s * RATE))
            text = f"{first} {rest}"
        else:
            text = UTTERANCES[k]
            x, pause, first = np.concatenate([lead, say(text)]), (0, 0), ""
        loud = _voiced(x)
        with wave.open(str(path), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(RATE)
            w.writeframes(float_to_int16(x).tobytes())
        out.append(Utterance(text, path, int(loud[0]), int(loud[-1]) + 1, kind, first, *pause))
    engine.close()
    return out


class _Proc:
    """A helper process speaking line-based text on stdin/stdout."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path):
        import queue

        self._log_path = log
        self._log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env={**os.environ, **env},
            text=True,
            start_new_session=True,  # Ctrl-C reaches the orchestrator, which stops them in order
            preexec_fn=die_with_parent,  # and none outlives it, however it ends
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

    def ask(self, cmd: str, timeout: float = 60.0) -> dict:
        """One ``stack_host`` command and its JSON answer."""
        self.send(cmd)
        return json.loads(self.read(timeout))

    def read(self, timeout: float) -> str:
        import queue

        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(
                f"no answer from {self.proc.args[1:3]} within {timeout:.0f}s"
            ) from None
        if not line:  # its stdout closed: it ended (or is ending); say how, not "no answer"
            try:
                code: int | None = self.proc.wait(5)
            except subprocess.TimeoutExpired:
                code = None
            self._log.flush()
            lines = self._log_path.read_text(errors="replace").splitlines()
            kept = [x for x in lines if x.strip() and not x.startswith("ALSA lib")]
            tail = "\n".join(kept[-6:])
            raise RuntimeError(
                f"{self.proc.args[1:3]} ended (exit code {code}) before answering; the end "
                f"of {self._log_path}:\n{tail}"
            )
        return line

    def stop(self, timeout: float = 20.0) -> None:
        """Ask it to quit; past ``timeout`` (or a second Ctrl-C) stop its whole process group,
        children included (the peer's llama_cpp.server)."""
        try:
            if self.proc.poll() is None:
                try:
                    self.send("quit")
                    self.proc.wait(timeout)
                except (BrokenPipeError, subprocess.TimeoutExpired, OSError):
                    pass
        finally:
            stop_group(self.proc, timeout=5.0)
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
        self.finals: list[tuple[str, str, float]] = []  # (utterance, text, arrival)
        self.speculative: list[tuple[str, str, float]] = []  # early transcripts
        self.voice: list[tuple[str, bool, float]] = []  # VoiceActivity (utterance, speaking, at)
        self.resumed: list[tuple[str, float]] = []  # speaking again in a known utterance
        self.vad_end: dict[str, float] = {}
        self.metrics: dict[str, dict] = {}
        self.tts: dict[str, tuple[bool, float]] = {}  # turn → (speaking, arrival)
        self.tts_started: dict[str, float] = {}  # turn → first speaking=true (audio began)
        self.turn_end: dict[str, float] = {}  # turn → arrival of the LLM's turn_end
        self.first_sentence: dict[str, str] = {}  # turn → its first sentence heard (not held)
        self.held: dict[str, str] = {}  # turn → its first held sentence, until released
        self.preemptive: list[tuple[str, float]] = []  # turns that began held (first message)
        self.discards: list[tuple[str, float]] = []  # held turns dropped unheard
        n = self.node
        self._subs = [
            n.create_subscription(Transcript, "asr/transcript", self._on_text, RELIABLE),
            n.create_subscription(VoiceActivity, "asr/voice_activity", self._on_va, RELIABLE),
            n.create_subscription(TurnMetrics, "bolt/turn_metrics", self._on_metrics, RELIABLE),
            n.create_subscription(TtsState, "tts/state", self._on_tts, LATCHED),
            n.create_subscription(SpokenText, "speech/say", self._on_say, RELIABLE),
        ]
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(n)
        self._stop = threading.Event()
        self._spin = threading.Thread(target=self._spin_loop, daemon=True)
        self._spin.start()

    def wait_matched(self, timeout: float) -> list[str]:
        """Wait until every subscription has a publisher (the stack's): a sample published
        before its reader matched is lost, and the first turn starts right after "ready" (one
        run lost the first turn's transcript so). Returns the topics still unmatched."""
        deadline = time.monotonic() + timeout
        while True:
            missing = [s.topic_name for s in self._subs if not self._publishers(s)]
            if not missing or time.monotonic() > deadline:
                return missing
            time.sleep(0.05)

    def _publishers(self, sub) -> int:
        count = getattr(sub, "get_publisher_count", None)  # matched readers (not in Humble)
        return count() if count else self.node.count_publishers(sub.topic_name)

    def _spin_loop(self) -> None:
        while not self._stop.is_set():
            self.executor.spin_once(timeout_sec=0.1)

    def _notify(self, fn) -> None:
        with self.lock:
            fn()
            self.lock.notify_all()

    def _on_text(self, msg) -> None:
        now = time.time()
        if msg.is_final:
            self._notify(lambda: self.finals.append((msg.utterance_id, msg.text, now)))
        elif getattr(msg, "speculative", False):  # Transcript.speculative: the early transcript
            self._notify(lambda: self.speculative.append((msg.utterance_id, msg.text, now)))

    def _on_va(self, msg) -> None:
        now, uid = time.time(), msg.utterance_id

        def record() -> None:
            again = getattr(msg, "resumed", None)  # the field; before it: the same id again
            if again is None:
                again = msg.speaking and any(u == uid and on for u, on, _ in self.voice)
            if msg.speaking and again:
                self.resumed.append((uid, now))  # the user went on after an early end
            self.voice.append((uid, bool(msg.speaking), now))
            if not msg.speaking:
                self.vad_end.setdefault(uid, now)

        self._notify(record)

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
        now = time.time()

        def record() -> None:
            self.tts[msg.turn_id] = (msg.speaking, now)
            if msg.speaking:
                self.tts_started.setdefault(msg.turn_id, now)

        self._notify(record)

    def spoken(self, uid: str, quiet_s: float = 1.0, unheard_s: float = 10.0) -> bool | None:
        """Was turn ``uid`` said to the end? (call under the lock; None: not yet)

        The LLM's turn_end has arrived and the TTS reported the turn not speaking after it
        (is_last precedes turn_end, hence the 0.3 s), having reported it speaking first: a
        preemptive turn's held sentences are synthesised, not played, and their release can
        come after turn_end. Nothing to say ``quiet_s`` after turn_end, or a turn whose
        sentences never made audio ``unheard_s`` after it, counts as done."""
        end = self.turn_end.get(uid)
        if end is None:
            return None
        late = time.time() - end
        if uid not in self.first_sentence and late > quiet_s:
            return True  # nothing was said in this turn
        speaking, at = self.tts.get(uid, (False, 0.0))
        if uid not in self.tts_started:
            return True if late > unheard_s else None
        return True if (not speaking and at >= end - 0.3) else None

    def _on_say(self, msg) -> None:
        now, turn = time.time(), msg.turn_id
        held, discard = getattr(msg, "held", False), getattr(msg, "discard", False)

        def record() -> None:
            if held and not any(t == turn for t, _ in self.preemptive):
                self.preemptive.append((turn, now))  # began held (a sentence or its discard)
            if held and discard:  # one per wasted preemptive start
                self.discards.append((turn, now))
                self.held.pop(turn, None)
                # what the discarded attempt reported is not the turn the user will hear
                self.turn_end.pop(turn, None)
                self.metrics.pop(turn, None)
            elif held:
                if msg.text:
                    self.held.setdefault(turn, msg.text)
            else:  # played: a sentence, or the release of the held ones (then maybe empty)
                text = self.held.pop(turn, "") or msg.text
                if text:
                    self.first_sentence.setdefault(turn, text)

        self._notify(record)

    def counts(self) -> dict[str, int]:
        """Lengths of the event lists (under the lock): a turn's events are the ones after."""
        with self.lock:
            return {
                "finals": len(self.finals),
                "speculative": len(self.speculative),
                "voice": len(self.voice),
                "resumed": len(self.resumed),
                "preemptive": len(self.preemptive),
                "discards": len(self.discards),
            }

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


def _where_memory_is(stack: _Proc) -> dict:
    """``stack_host``'s resident memory by mapping, with Python's small-object arenas."""
    return {**stack.ask("smaps", 30)["smaps"], "pymalloc": stack.ask("pymalloc", 30)["pymalloc"]}


def run_voice_loop(
    work: Path,
    turns: int,
    overrides: dict | None = None,
    profile: str = "reachy_mini",
    log=print,
    host: dict | None = None,
) -> dict:
    """Run ``turns`` acoustic turns; returns per-turn outcomes, stack RSS and the recording."""
    utts = make_utterances(work, turns)
    # before any process of the run maps the libraries: file pages as after a boot, not as a
    # fresh install's large folios (page_cache.py)
    page_cache = evict_stack_files(log)
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
        smaps_ready = _where_memory_is(stack)  # (rss_ready is taken before this)
        listener = Listener()
        unmatched = listener.wait_matched(30)
        if unmatched:
            log(f"warning: no publisher matched on {unmatched} after 30 s; playing anyway")
        outcomes = []
        with open(work / "turns.jsonl", "w") as saved:  # kept even if a later step fails
            for i in range(turns):
                outcomes.append(_turn(i, utts[i % len(utts)], player, listener, log))
                saved.write(json.dumps(asdict(outcomes[-1]), ensure_ascii=False) + "\n")
                saved.flush()
        stack.send("rss")
        rss_end = json.loads(stack.read(30))["rss"]
        stack.send("diagnostics")
        diagnostics = json.loads(stack.read(30))["diagnostics"]
        # after the figures: how much of rss_end was freed heap that a malloc_trim gives back
        smaps_end = _where_memory_is(stack)
        trim_end = stack.ask("trim", 30)
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
        "startup_work_s": ready["startup_work_s"],  # the first turn waits for it (LLM prefill)
        "rss_end": rss_end,
        "smaps_ready": smaps_ready,
        "smaps_end": smaps_end,
        "trim_end": {k: trim_end[k] for k in ("before", "after")},
        "page_cache": page_cache,
        "diagnostics": diagnostics,
        "recording_s": len(audio) / RATE,
    }


def _turn(i: int, utt: Utterance, player: _Proc, lis: Listener, log) -> TurnOutcome:
    """Play one utterance and wait until every user turn the stack made of it was answered.

    Usually that is one final transcript and its answer. When the stack split the utterance (a
    final for the words before a pause, another for the rest), each final's turn is waited for:
    the next utterance never overlaps an answer of this one. The turn measured (stamps, first
    sentence, the stages) is the last one: the answer to the end of what the user said."""
    out = TurnOutcome(i, utt.text, kind=utt.kind)
    before = lis.counts()
    with lis.lock:
        out.tts_speaking_at_play = [t for t, (speaking, _) in lis.tts.items() if speaking]
    player.send(f"play {utt.path}")
    out.play_wall = float(player.read(10).split()[1])
    player.read(30)

    def finals() -> list[tuple[str, str, float]]:
        return lis.finals[before["finals"] :]

    if lis.wait(lambda: finals()[0] if finals() else None, 30) is None:
        out.error = "no final transcript"
        log(f"turn {i}: {out.error}")
        _count_events(out, lis, before)
        return out

    answered: set[str] = set()
    while True:
        with lis.lock:
            have = [f[0] for f in finals()]
            started = [u for u, on, _ in lis.voice[before["voice"] :] if on]
        for uid in dict.fromkeys(have):
            if uid not in answered:
                answered.add(uid)
                if lis.wait(lambda uid=uid: lis.spoken(uid), 90) is None:
                    out.error = "turn did not finish within 90 s"
        # an utterance the VAD began meanwhile (the rest, after a split) gets its final too
        pending = [u for u in dict.fromkeys(started) if u not in have]
        if not pending or out.error:
            break
        rest = pending[0]
        got = lis.wait(lambda rest=rest: next((f for f in finals() if f[0] == rest), None), 15)
        if got is None:
            break  # no speech in it after all (the ASR drops those)
    with lis.lock:
        out.finals = [tuple(f) for f in finals()]
        uid = out.turn_id = out.finals[-1][0]
        out.transcript = " ".join(text.strip() for _, text, _ in out.finals)
        m = lis.metrics.get(uid, {"stamps": {}, "counters": {}})
        out.stamps, out.counters = dict(m["stamps"]), dict(m["counters"])
        out.vad_end_wall = lis.vad_end.get(uid, 0.0)
        out.first_sentence = lis.first_sentence.get(uid, "")
    log(f"turn {i}: “{out.transcript}” → “{out.first_sentence.strip()[:80]}”")
    time.sleep(0.5)  # a short pause between turns, like a person (not a synchronisation wait)
    _count_events(out, lis, before)
    return out


def _count_events(out: TurnOutcome, lis: Listener, before: dict[str, int]) -> None:
    """The turn's share of the listener's events: everything since it began (the next turn
    takes over from here, so no event falls between two turns)."""
    now = lis.counts()
    out.speculative = now["speculative"] - before["speculative"]
    out.resumed = now["resumed"] - before["resumed"]
    out.preemptive_started = now["preemptive"] - before["preemptive"]
    out.preemptive_wasted = now["discards"] - before["discards"]


def frame_to_wall(clock: np.ndarray, frame: float) -> float:
    return float(np.interp(frame, clock[:, 0], clock[:, 1]))


def wall_to_frame(clock: np.ndarray, wall: float) -> int:
    return int(np.interp(wall, clock[:, 1], clock[:, 0]))


def judge(o: TurnOutcome, robot_before_end: bool) -> None:
    """Was the user's turn split, and how long after its last voiced sample did the first
    final transcript arrive? (``o.finals`` and ``o.user_end_wall`` known.)

    Split: a final (a user-turn end) arrived before the user's last word, the utterance got
    more than one, or the robot was heard before the user had finished."""
    walls = [w for _, _, w in o.finals]
    o.split_by = []
    if any(w < o.user_end_wall for w in walls):
        o.split_by.append("final_before_end")
    if len(walls) > 1:
        o.split_by.append("several_finals")
    if robot_before_end:
        o.split_by.append("robot_before_end")
    after = [w - o.user_end_wall for w in walls if w >= o.user_end_wall]
    o.endpoint_delay_s = min(after) if after else None


def analyse(o: TurnOutcome, utt: Utterance, audio: np.ndarray, clock: np.ndarray) -> None:
    """Find the turn's acoustic events in the recording and fill v2v, the stages, whether the
    turn was split (``judge``) and the endpoint delay."""
    if not len(clock) or not o.play_wall or (o.error and not o.finals):
        return
    start = max(0, wall_to_frame(clock, o.play_wall) - RATE // 2)
    stop = start + RATE // 2 + int(utt.speech_end * 1.0) + RATE  # the utterance + 1 s margin
    user = _voiced(audio[start:stop, 0])
    if not len(user):
        o.error = "utterance not found in the recording"
        return
    user_start, user_end = start + int(user[0]), start + int(user[-1]) + 1
    o.user_end_wall = frame_to_wall(clock, user_end)
    if utt.pause_end and len(user) > 1:  # the longest silence inside the utterance
        o.pause_s = float(np.max(np.diff(user)) - 1) / RATE
    judge(o, robot_before_end=bool(len(_voiced(audio[user_start:user_end, 1]))))
    if o.error:
        return
    robot = _voiced(audio[user_end:, 1])
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


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between the closest ranks (numpy's default); None when empty."""
    if not values:
        return None
    vs = sorted(values)
    k = (len(vs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(vs) - 1)
    return vs[lo] + (vs[hi] - vs[lo]) * (k - lo)


def loop_figures(turns: list[dict[str, Any]]) -> dict[str, Any]:
    """The bench fields of one acoustic loop (``asdict`` of the ``TurnOutcome``s).

    Voice-to-voice over the turns that were not split (a split turn's robot audio after the
    user's end may be the answer to the first part). ``false_endpoint_rate``: split pause
    utterances ÷ pause utterances that got a final transcript. ``endpoint_delay_*``: the user's
    last voiced sample → the first final after it, over both kinds (and per kind)."""
    judged = [t for t in turns if t.get("user_end_wall") and t.get("finals")]
    good = [t for t in turns if t.get("v2v_s") is not None and not t.get("split_by")]
    heard_after = [
        t
        for t in turns
        if t.get("v2v_s") is not None and "robot_before_end" not in t.get("split_by", ())
    ]
    by_kind = {k: [t for t in judged if t.get("kind", "finished") == k] for k in KINDS}

    def v2v(ts: list[dict[str, Any]], q: float) -> float | None:
        return percentile([t["v2v_s"] for t in ts], q)

    def delay(ts: list[dict[str, Any]], q: float = 0.5) -> float | None:
        vals = [t["endpoint_delay_s"] for t in ts if t.get("endpoint_delay_s") is not None]
        return percentile(vals, q)

    pause, finished = by_kind["pause"], by_kind["finished"]
    split_pause = sum(1 for t in pause if t.get("split_by"))
    return {
        "voice_to_voice_p50_s": v2v(good, 0.5),
        "voice_to_voice_p90_s": v2v(good, 0.9),
        "voice_to_voice_turns": len(good),
        # every turn where the robot did not speak before the user had finished (split or not)
        "voice_to_voice_all_p50_s": v2v(heard_after, 0.5),
        "finished_voice_to_voice_p50_s": v2v([t for t in good if t.get("kind") != "pause"], 0.5),
        "pause_voice_to_voice_p50_s": v2v([t for t in good if t.get("kind") == "pause"], 0.5),
        "pause_turns": len(pause),
        "pause_split_turns": split_pause,
        "false_endpoint_rate": split_pause / len(pause) if pause else None,
        "finished_split_turns": sum(1 for t in finished if t.get("split_by")),
        "endpoint_delay_p50_s": delay(judged),
        "endpoint_delay_p90_s": delay(judged, 0.9),
        "endpoint_delay_finished_p50_s": delay(finished),
        "endpoint_delay_pause_p50_s": delay(pause),
        "preemptive_started": sum(t.get("preemptive_started", 0) for t in turns),
        "preemptive_wasted": sum(t.get("preemptive_wasted", 0) for t in turns),
        "user_resumed": sum(t.get("resumed", 0) for t in turns),
        "speculative_transcripts": sum(t.get("speculative", 0) for t in turns),
    }

"""End of turn across voices: is a paused sentence kept whole, how soon does the final come, and
is the WER as good as raw whisper's, for voices other than the robot's own?

Per voice (``testing.voices.VOICES``: Piper's joe and five espeak-ng voices), in silence (no
robot), through the ASR stage exactly as asr_node runs it with its defaults (Silero VAD,
whisper-base on 2 threads, the listener's semantic end of turn):

* finished requests and paused sentences (the first words, 0.7 s of silence, the rest), in two
  splits: **dev**, the voice loop's own (``voice_loop.UTTERANCES``, the first eight, and
  ``PAUSE_UTTERANCES``), on which the end of turn's rules and thresholds were set, and
  **test** (``TEST_FINISHED``, ``TEST_PAUSED``: 10 + 10 held out). **Kept whole** = one final
  transcript for the whole sentence (a false endpoint splits it in two).

The LLM's end-of-turn hint comes from the bundled model (``TurnRunner.end_of_turn_probability``,
as llm_node answers ``llm/end_of_turn``), given as soon as each early transcript is out: the
stack's hint comes 50-100 ms later, so the delays here are that much shorter than the stack's.
Time is the stream's (``echo_bench.VirtualRunner``): a transcription holds it for as long as it
took here.

Reported per voice: paused sentences kept whole, the last voiced sample → final transcript
(p50, p90), false endpoints, the WER of the finals and of raw whisper on each whole utterance,
per split; the JSON keeps every transcription with its confidences.

    python -m bolt_agent.benchmarks.voices_bench [--out bench_out/voices.json] [--quick]
        [--asr-speed 5] [--last-word-confidence 0.3]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bolt_agent.benchmarks.echo_bench import Recorded, VirtualRunner
from bolt_agent.core.asr.vad_segmenter import SAMPLE_RATE

BLOCK = 512
PAUSE_S = 0.7
GAP_S = 2.0  # silence after each utterance: the cap ends it whatever the words

#: held out: written for this benchmark by a helper that saw neither the end of turn's rules
#: nor the dev utterances' results. No threshold, word list or rule was set on them.
TEST_FINISHED = (
    "Could you turn around and face the window?",
    "Hey robot, tell me a joke.",
    "How much does a steel sword cost?",
    "Please stop moving your head for a minute.",
    "I think you look really cute today.",
    "Do you know what time it is?",
    "Show me how you dance. That would be fun!",
    "Can you forge me a new shield, please?",
    "Who is that person standing behind me?",
    "Okay, that's enough for now. Thanks!",
)
TEST_PAUSED = (
    ("Can you tell me a little bit about", "the weapons you have for sale?"),
    ("I need a new pair of boots because", "mine are completely worn out."),
    ("Could you please move your", "antennas up and down slowly?"),
    ("The thing I keep forgetting to ask you is", "whether you can hear me from far away."),
    ("Would you be able to sharpen my", "old axe before tomorrow?"),
    ("If you look over to the left you will see a", "small green plant on the shelf."),
    ("I was going to trade you these gems for", "that shiny iron helmet."),
    ("Let's play a game where you have to", "guess which animal I'm thinking of."),
    ("Do you remember the name of the", "song we listened to yesterday?"),
    ("My sister told me that your", "camera can recognize faces."),
)


def _dev() -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    from bolt_agent.benchmarks.voice_loop import PAUSE_UTTERANCES, UTTERANCES

    return UTTERANCES[:8], tuple((head, rest) for head, rest, _ in PAUSE_UTTERANCES)


#: dev: the voice loop's own utterances (the end of turn's rules were set on them); test: above
UTTERANCE_SPLITS = {"dev": _dev(), "test": (TEST_FINISHED, TEST_PAUSED)}


@dataclass
class Said:
    text: str
    audio: np.ndarray
    last_voiced_s: float = 0.0  # stream time of its last sample above 0.01
    paused: bool = False
    finals: list[tuple[float, str]] = field(default_factory=list)
    #: every transcription: [text, confidence, last word's confidence, final-quality]
    heard: list[list[Any]] = field(default_factory=list)
    ends: list[list[Any]] = field(default_factory=list)  # [how each end was decided, silence ms]
    hints: list[list[Any]] = field(default_factory=list)  # [early text, LLM's p_complete]


class _VoiceRun:
    """One voice's continuous stream through the listener, on the stream's clock."""

    def __init__(self, whisper: Any, params: Any, hint: Any, asr_speed: float = 1.0) -> None:
        from bolt_agent.core.asr.listener import Listener
        from bolt_agent.core.asr.vad_segmenter import VadSegmenter

        self.pos = 0
        self.runner = VirtualRunner(lambda: self.pos / SAMPLE_RATE, asr_speed)
        self.events: list[tuple[float, Any]] = []
        self.hints: list[list[Any]] = []  # [early transcript, the LLM's p_complete]
        self._hint = hint
        self.listener = Listener(
            whisper,
            params.listener_settings(),
            VadSegmenter(params.vad_config()),
            runner=self.runner,
            emit=self._emit,
        )

    def _emit(self, event: Any) -> None:
        from bolt_agent.core.asr.listener import TranscriptEvent

        self.events.append((self.runner.now(), event))
        if isinstance(event, TranscriptEvent) and event.early:
            p = self._hint(event.utterance_id, event.text)
            self.hints.append([event.text, None if p is None else round(p, 3)])
            if p is not None:
                self.listener.end_of_turn_hint(event.utterance_id, event.text, p)

    def play(self, item: Said) -> None:
        from bolt_agent.core.asr.listener import FinalMetrics, TranscriptEvent

        lead = np.zeros(BLOCK * 4, np.float32)
        stream = np.concatenate([lead, item.audio, np.zeros(int(GAP_S * SAMPLE_RATE), np.float32)])
        loud = np.nonzero(np.abs(item.audio) > 0.01)[0]
        item.last_voiced_s = (self.pos + len(lead) + int(loud[-1])) / SAMPLE_RATE
        first = len(self.events)
        for i in range(0, len(stream) - BLOCK + 1, BLOCK):
            self.pos += BLOCK
            self.listener.push(stream[i : i + BLOCK], (self.pos - BLOCK) * 62_500)
        item.finals = [
            (t, e.text)
            for t, e in self.events[first:]
            if isinstance(e, TranscriptEvent) and e.is_final
        ]
        item.ends = [
            [e.ended_by, round(e.silence_ms)]
            for _, e in self.events[first:]
            if isinstance(e, FinalMetrics)
        ]


def _figures(items: list[Said], raw_wer: list[float]) -> dict[str, Any]:
    from bolt_agent.benchmarks.voice_loop import percentile
    from bolt_agent.testing.voices import wer

    final_wer, delays, whole = [], [], []
    false_endpoints = 0
    for item in items:
        final_wer.append(wer(item.text, " ".join(text for _, text in item.finals)))
        false_endpoints += sum(t < item.last_voiced_s for t, _ in item.finals)
        if item.paused:
            whole.append(len(item.finals) == 1)
        after = [t for t, _ in item.finals if t >= item.last_voiced_s]
        if after:
            delays.append(after[0] - item.last_voiced_s)
    return {
        "paused_kept_whole": sum(whole) / max(1, len(whole)),
        "paused": len(whole),
        "end_of_turn_p50_s": percentile(delays, 0.5),
        "end_of_turn_p90_s": percentile(delays, 0.9),
        "false_endpoints": false_endpoints,
        "utterances": len(items),
        "wer": float(np.mean(final_wer)),
        "wer_raw_whisper": float(np.mean(raw_wer)),
        "finals": [[i.text, [t for _, t in i.finals], i.heard, i.ends, i.hints] for i in items],
    }


def _across(per_voice: dict[str, Any], split: str) -> dict[str, Any]:
    figs = [v[split] for v in per_voice.values()]
    delays = [f["end_of_turn_p50_s"] for f in figs if f["end_of_turn_p50_s"]]
    return {
        "paused_kept_whole": float(np.mean([f["paused_kept_whole"] for f in figs])),
        "end_of_turn_p50_s_median_of_voices": float(np.median(delays)) if delays else None,
        "false_endpoints": sum(f["false_endpoints"] for f in figs),
        "utterances": sum(f["utterances"] for f in figs),
        "wer": float(np.mean([f["wer"] for f in figs])),
        "wer_raw_whisper": float(np.mean([f["wer_raw_whisper"] for f in figs])),
    }


def run(
    quick: bool = False,
    trust_confidence: float | None = None,
    log=print,
    asr_speed: float = 1.0,
    last_word_confidence: float | None = None,
) -> dict[str, Any]:
    from bolt_agent.core.llm.chat_template import Knobs
    from bolt_agent.core.llm.llama.engine import LlamaConfig, LlamaEngine
    from bolt_agent.core.llm.profile import load_profile
    from bolt_agent.core.llm.turn_runner import RunnerConfig, TurnRequest, TurnRunner
    from bolt_agent.core.models import resolve_model
    from bolt_agent.nodes.asr_params import AsrParams
    from bolt_agent.nodes.llm_params import LlmParams
    from bolt_agent.testing.voices import VOICES, speak, trim, wer

    overrides: dict[str, float] = {}
    if trust_confidence is not None:  # an A/B of end_of_turn_trust_confidence
        overrides["end_of_turn_trust_confidence"] = trust_confidence
    if last_word_confidence is not None:  # … of end_of_turn_last_word_confidence
        overrides["end_of_turn_last_word_confidence"] = last_word_confidence
    ap, lp = AsrParams(**overrides), LlmParams()
    whisper = ap.whisper_engine(device="cpu", cpu_threads=2)
    whisper.load()
    whisper.warm_up()
    engine = LlamaEngine(
        LlamaConfig(str(resolve_model(lp.model, kind="llm")), n_ctx=lp.n_ctx, n_threads=2)
    ).load()
    constrained = engine.chat_template.is_bundled
    profile = load_profile(lp.profile)
    dialogue = lp.dialogue(profile, constrained)
    runner = TurnRunner(engine, dialogue, profile.registry, RunnerConfig(constrained=constrained))
    knobs = Knobs(enable_thinking=lp.enable_thinking, conversational_mode=lp.conversational_mode)
    n_finished, n_paused = (3, 3) if quick else (None, None)
    splits = {
        split: ([*finished][:n_finished], [*paused][:n_paused])
        for split, (finished, paused) in UTTERANCE_SPLITS.items()
    }
    voices = VOICES[:2] if quick else VOICES

    def hint(utterance_id: str, text: str) -> float | None:
        """The LLM's end-of-turn probability, as llm_node answers ``llm/end_of_turn``."""
        return runner.end_of_turn_probability(
            TurnRequest(utterance_id, text, knobs, lp.tool_choice)
        )

    t0 = time.perf_counter()
    per_voice: dict[str, Any] = {}
    for voice in voices:
        per_voice[voice.name] = {}
        for split, (finished, paused) in splits.items():
            items = [Said(t, trim(speak(voice, t))) for t in finished]
            for head, rest in paused:
                gap = np.zeros(int(PAUSE_S * SAMPLE_RATE), np.float32)
                audio = np.concatenate([trim(speak(voice, head)), gap, trim(speak(voice, rest))])
                items.append(Said(f"{head} {rest}", audio, paused=True))
            heard: list[list[Any]] = []

            def note(result: Any, final: bool, heard: list[list[Any]] = heard) -> None:
                confidences = (result.confidence, result.last_word_confidence)
                heard.append([result.text, *(round(c, 3) for c in confidences), final])

            run_ = _VoiceRun(Recorded(whisper, note), ap, hint, asr_speed)
            raw_wer = []
            for item in items:
                heard.clear()
                run_.hints = []
                run_.play(item)
                item.heard, item.hints = list(heard), run_.hints
                raw = whisper.transcribe(item.audio)
                raw_wer.append(wer(item.text, raw.text if raw is not None else ""))
            v = per_voice[voice.name][split] = _figures(items, raw_wer)
            log(
                f"{voice.name}, {split}: paused kept whole {v['paused_kept_whole']:.0%}, end "
                f"of turn p50 {v['end_of_turn_p50_s']:.2f} s, WER {v['wer']:.1%} (raw "
                f"{v['wer_raw_whisper']:.1%})"
            )
    engine.close()
    whisper.close()
    return {
        "per_voice": per_voice,
        **{split: _across(per_voice, split) for split in splits},
        "seconds": time.perf_counter() - t0,
    }


def table(result: dict[str, Any]) -> str:
    def f(v: Any) -> str:
        return "-" if v is None else f"{v:.2f}"

    rows = [
        "| voice | split | paused sentences kept whole | last voiced → final p50 / p90 s | "
        "false endpoints | WER (raw whisper) |",
        "|---|---|---|---|---|---|",
    ]
    for name, splits in result["per_voice"].items():
        for split, v in splits.items():
            rows.append(
                f"| {name} | {split} | {v['paused_kept_whole']:.0%} of {v['paused']} | "
                f"{f(v['end_of_turn_p50_s'])} / {f(v['end_of_turn_p90_s'])} | "
                f"{v['false_endpoints']} of {v['utterances']} | {v['wer']:.1%} "
                f"({v['wer_raw_whisper']:.1%}) |"
            )
    for split in UTTERANCE_SPLITS:
        a = result.get(split)
        if a:
            rows.append(
                f"| **all** | {split} | {a['paused_kept_whole']:.0%} | "
                f"{f(a['end_of_turn_p50_s_median_of_voices'])} (median of the voices) | "
                f"{a['false_endpoints']} of {a['utterances']} | {a['wer']:.1%} "
                f"({a['wer_raw_whisper']:.1%}) |"
            )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    from bolt_agent.benchmarks.report import write_table_report

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="bench_out/voices.json")
    ap.add_argument("--quick", action="store_true", help="2 voices, 3 + 3 utterances")
    ap.add_argument("--trust-confidence", type=float, default=None,
                    help="asr_node's end_of_turn_trust_confidence for this run")  # fmt: skip
    ap.add_argument("--last-word-confidence", type=float, default=None,
                    help="asr_node's end_of_turn_last_word_confidence for this run")  # fmt: skip
    ap.add_argument("--asr-speed", type=float, default=1.0,
                    help="a model, not a measurement: whisper's time here divided by this "
                    "(echo_bench's --asr-speed)")  # fmt: skip
    args = ap.parse_args(argv)
    result = run(
        quick=args.quick,
        trust_confidence=args.trust_confidence,
        asr_speed=args.asr_speed,
        last_word_confidence=args.last_word_confidence,
    )
    result["end_of_turn_trust_confidence"] = args.trust_confidence
    result["end_of_turn_last_word_confidence"] = args.last_word_confidence
    result["asr_speed"] = args.asr_speed
    write_table_report(Path(args.out), result, table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

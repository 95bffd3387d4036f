"""Calibrate the semantic end of turn on our own audio: Piper speaks finished requests and their
unfinished beginnings, whisper transcribes them as the ASR node's early final would, and
the resident LLM judges each transcript as llm_node does (``TurnRunner.end_of_turn_probability``
with the profile's prompt, examples and template). Reports the separation (AUC) of
``p_complete`` between finished and unfinished words, the text rule's accuracy, and the
threshold that keeps every unfinished beginning waiting while ending the most finished turns.

    python -m bolt_agent.benchmarks.end_of_turn_calibration --out eot.json [--profile P]

The sentences here are the calibration set: the acoustic benchmark's pause utterances
(``voice_loop``) are separate, so the benchmark measures the thresholds chosen here.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

#: "unfinished beginning | the rest": the whole is a finished request, the beginning is not
SENTENCES = {
    "reachy_mini": (
        "Could you turn your head towards | the window?",
        "I want you to look at | the door.",
        "Can you show me how | happy you are?",
        "Can you guess how old | I am?",
        "Tell me what you see on | the table.",
        "Please nod your head if | you agree.",
        "I was wondering if you could | do a little dance.",
        "What do you think about | the weather today?",
        "Could you look to the left and | then to the right?",
        "My favourite thing about robots is | their antennas.",
        "I would really like you to | shake your head for me.",
        "Let me tell you about | my trip to the mountains.",
        "When I was at school | I built a small robot.",
    ),
    "blacksmith_npc": (
        "I would like to buy | a long sword and a shield.",
        "How much do you want for | the iron helmet?",
        "I have some leather boots that | I could sell you.",
        "Could you sharpen | my old axe?",
        "Do you have any | steel daggers for sale?",
        "I found this silver ring in | the forest.",
        "What is the price of | your best war hammer?",
        "My horse needs | new horseshoes.",
        "Can I trade my bow for | one of your swords?",
        "Show me the armour that | you made this week.",
        "I need something to protect me from | the wolves.",
        "Would you give me a discount if | I buy two?",
        "Can you tell me how much | it is?",
    ),
}


#: the middle band's lower bounds the summary compares (at the default threshold, 0.05)
LIKELY_THRESHOLDS = (0.003, 0.005, 0.01, 0.02, 0.03, 0.05)


def auc(positives: list[float], negatives: list[float]) -> float | None:
    """Share of (finished, unfinished) pairs ranked the right way (ties count half)."""
    if not positives or not negatives:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


def best_threshold(positives: list[float], negatives: list[float]) -> dict[str, Any]:
    """The threshold just above every unfinished beginning (no turn split by a pause), and how
    many finished requests it still ends early; also the threshold of best balanced accuracy."""
    top_negative = max(negatives)
    safe = float(np.nextafter(top_negative, 1.0))
    recall = sum(p >= safe for p in positives) / len(positives)
    candidates = sorted(set(positives) | set(negatives))
    scored = []
    for t in candidates:
        tpr = sum(p >= t for p in positives) / len(positives)
        tnr = sum(n < t for n in negatives) / len(negatives)
        scored.append(((tpr + tnr) / 2, t))
    balanced, t_bal = max(scored)
    return {
        "no_split_threshold": safe,
        "no_split_recall": recall,
        "balanced_threshold": t_bal,
        "balanced_accuracy": balanced,
    }


def ended_after(text: str, p_complete: float, settings) -> float | None:
    """The silence in ms after which the listener's rule (``EndOfTurn`` with this hint) ends a
    turn on these words; None: it waits for the cap."""
    from bolt_agent.core.asr.end_of_turn import EndOfTurn

    eot = EndOfTurn(settings)
    eot.start("calibration")
    eot.hint("calibration", text, p_complete)
    decision = eot.judge(text, 0.0)
    return decision.silence_ms if decision is not None and decision.complete else None


def sweep(
    rows: list[dict[str, Any]],
    thresholds=(0.03, 0.04, 0.05, 0.06, 0.07, 0.1, 0.15),
    likely_threshold: float | None = None,
) -> list:
    """The listener's whole rule (``EndOfTurn``: p >= threshold and the last word does not ask
    for more; the likely band below it) at several thresholds: unfinished beginnings it would
    end after the short silence or the middle one (split turns when the pause is longer) and
    finished requests it ends there. ``likely_threshold``: None = the default, capped at the
    threshold (= the threshold: no middle band)."""
    from bolt_agent.core.asr.end_of_turn import EndOfTurnSettings

    default = EndOfTurnSettings()
    fin = [r for r in rows if r["complete"]]
    unf = [r for r in rows if not r["complete"]]
    out = []
    for t in thresholds:
        likely = default.likely_threshold if likely_threshold is None else likely_threshold
        settings = EndOfTurnSettings("semantic", threshold=t, likely_threshold=min(likely, t))

        def share(group, silence_ms, settings=settings) -> float:
            ended = [ended_after(r["heard"], r["p_complete"], settings) for r in group]
            return sum(s == silence_ms for s in ended) / len(group)

        short, middle = settings.complete_silence_ms, settings.likely_silence_ms
        out.append(
            {
                "threshold": t,
                "likely_threshold": settings.likely_threshold,
                "unfinished_ended": share(unf, short),
                "finished_ended_early": share(fin, short),
                "unfinished_ended_likely": share(unf, middle),
                "finished_ended_likely": share(fin, middle),
            }
        )
    return out


def run(profile_name: str, log=print, with_nearest: bool = False) -> dict[str, Any]:
    from bolt_agent.core.asr.end_of_turn import text_looks_complete
    from bolt_agent.core.asr.vad_segmenter import SAMPLE_RATE
    from bolt_agent.core.audio.audio_io import StreamResampler, int16_to_float
    from bolt_agent.core.llm.chat_template import Knobs
    from bolt_agent.core.llm.llama.engine import LlamaConfig, LlamaEngine
    from bolt_agent.core.llm.profile import load_profile
    from bolt_agent.core.llm.turn_runner import RunnerConfig, TurnRequest, TurnRunner
    from bolt_agent.core.models import resolve_model
    from bolt_agent.core.tts.tts_engine import PiperEngine
    from bolt_agent.nodes.asr_node import AsrParams
    from bolt_agent.nodes.llm_params import LlmParams

    lp, ap = LlmParams(), AsrParams()
    profile = load_profile(profile_name)
    engine = LlamaEngine(
        LlamaConfig(str(resolve_model(lp.model, kind="llm")), n_ctx=lp.n_ctx, n_threads=2)
    ).load()
    constrained = engine.chat_template.is_bundled  # llm_node's `constrained: auto`
    dialogue = lp.dialogue(profile, constrained)  # `few_shot: auto`
    runner = TurnRunner(engine, dialogue, profile.registry, RunnerConfig(constrained=constrained))
    asr = ap.whisper_engine("cpu", cpu_threads=1)
    asr.load()
    tts = PiperEngine(resolve_model("", kind="tts"), seed=11)
    tts.load()
    knobs = Knobs(enable_thinking=lp.enable_thinking, conversational_mode=lp.conversational_mode)

    rows = []
    for k, line in enumerate(SENTENCES[profile_name]):
        head, rest = (part.strip() for part in line.split("|"))
        for complete, words in ((False, head), (True, f"{head} {rest}")):
            audio = tts.synthesize_sentence(words)
            x = StreamResampler(tts.sample_rate, SAMPLE_RATE).process(int16_to_float(audio))
            heard = asr.transcribe(x, final=True)
            text = heard.text if heard is not None else ""
            request = TurnRequest(f"c{k}", text, knobs, lp.tool_choice)
            runner.prewarm(TurnRequest(f"c{k}", "", knobs, lp.tool_choice))  # speech start
            t0 = time.perf_counter()
            p = runner.end_of_turn_probability(request, with_nearest)
            row = {
                "spoken": words,
                "heard": text,
                "complete": complete,
                "p_complete": p,
                "probe_s": time.perf_counter() - t0,
                "text_rule": text_looks_complete(text),
            }
            rows.append(row)
            log(f"{'done' if complete else 'part'} p={p:.4f} text={row['text_rule']!s:5} {text!r}")
    engine.close()
    asr.close()
    tts.close()
    pos = [r["p_complete"] for r in rows if r["complete"]]
    neg = [r["p_complete"] for r in rows if not r["complete"]]
    text_ok = sum(r["text_rule"] == r["complete"] for r in rows) / len(rows)
    return {
        "profile": profile_name,
        "template": engine.chat_template.name,
        "auc": auc(pos, neg),
        "finished_median": float(np.median(pos)),
        "finished_min": min(pos),
        "unfinished_median": float(np.median(neg)),
        "unfinished_max": max(neg),
        "text_rule_accuracy": text_ok,
        "probe_s_median": float(np.median([r["probe_s"] for r in rows])),
        **best_threshold(pos, neg),
        "sweep": sweep(rows),
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", action="append", choices=sorted(SENTENCES))
    ap.add_argument("--out", type=Path, default=Path("eot_calibration.json"))
    ap.add_argument(
        "--with-nearest",
        action="store_true",
        help="judge with the turn's nearest few-shot exchanges in the prompt (slower probe)",
    )
    args = ap.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)  # before minutes of work, not after
    results = [run(n, with_nearest=args.with_nearest) for n in args.profile or sorted(SENTENCES)]
    rows = [row for r in results for row in r["rows"]]
    summary = {
        "with_nearest": args.with_nearest,
        "profiles": results,
        "sweep_all_profiles": sweep(rows),
        "likely_sweep_all_profiles": [
            {**row, "likely_threshold": lt}
            for lt in LIKELY_THRESHOLDS
            for row in sweep(rows, (0.05,), lt)
        ],
    }
    args.out.write_text(json.dumps(summary, indent=2))
    print(
        "| profile | AUC | finished median (min) | unfinished median (max) | no-split "
        "threshold (finished ended early) | text rule accuracy |"
    )
    print("|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['profile']} | {r['auc']:.2f} | {r['finished_median']:.3g} "
            f"({r['finished_min']:.3g}) | {r['unfinished_median']:.3g} ({r['unfinished_max']:.3g})"
            f" | {r['no_split_threshold']:.3g} ({r['no_split_recall']:.0%}) | "
            f"{r['text_rule_accuracy']:.0%} |"
        )
    print(
        "\n| threshold (likely threshold) | unfinished beginnings ended: short silence / middle "
        "| finished ended: short silence / middle |"
    )
    print("|---|---|---|")
    for row in summary["sweep_all_profiles"] + summary["likely_sweep_all_profiles"]:
        print(
            f"| {row['threshold']} ({row['likely_threshold']}) | {row['unfinished_ended']:.0%} / "
            f"{row['unfinished_ended_likely']:.0%} | {row['finished_ended_early']:.0%} / "
            f"{row['finished_ended_likely']:.0%} |"
        )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

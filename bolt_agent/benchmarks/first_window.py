"""What asr_node's shorter first encoder window (``encoder_first_window_s``) saves and costs.

    python -m bolt_agent.benchmarks.first_window [--windows 6] [--seeds 11,17,23] [--limit N]
        [--out F.json]

Piper speaks the sentences of ``pad_accuracy`` with each voice seed; each utterance goes
through the real ``VadSegmenter`` and asr_node's whisper (its parameters, 2 threads)
transcribes the audio of the last early start once with the full window only
(``encoder_first_window_s`` 0) and once with each first window, in alternating order. Reports
the median and p90 time of each as a ratio to the full window, the word errors against the
spoken text, the transcripts that differ, and how many first-window transcripts were redone
with the full window (and why).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bolt_agent.benchmarks.pad_accuracy import (
    _floats,
    _ints,
    early_audio,
    node_whisper,
    spoken,
    word_errors,
)
from bolt_agent.benchmarks.report import write_json


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def run(windows: list[float], seeds: list[int], limit: int = 0, log=print) -> dict[str, Any]:
    from bolt_agent.nodes.asr_node import AsrParams

    pad_ms = AsrParams().speech_pad_ms
    asr = node_whisper()
    variants = [0.0, *windows]
    redone: dict[str, dict[str, int]] = {str(w): {} for w in variants}
    kept = dict.fromkeys(map(str, variants), 0)
    rows: list[dict[str, Any]] = []
    for seed, text, x in spoken(seeds, log):
        if limit and len(rows) >= limit:
            break
        audio = early_audio(x, pad_ms)
        if audio is None:
            continue
        i = len(rows)
        row: dict[str, Any] = {"seed": seed, "text": text, "audio_s": audio.size / 16000}
        for w in variants if i % 2 == 0 else variants[::-1]:
            asr.first_window_s = w
            before_kept, before = asr.first_window_counts()
            t0 = time.perf_counter()
            got = asr.transcribe(audio)
            row[f"{w}_s"] = time.perf_counter() - t0
            row[str(w)] = got.text if got else ""
            row[f"{w}_errors"], row["words"] = word_errors(text, row[str(w)])
            after_kept, after = asr.first_window_counts()
            kept[str(w)] += after_kept - before_kept
            for why, n in after.items():
                redone[str(w)][why] = redone[str(w)].get(why, 0) + n - before.get(why, 0)
        rows.append(row)
    full = [r["0.0_s"] for r in rows]
    words = sum(r["words"] for r in rows)
    summary = {}
    for w in variants:
        times = [r[f"{w}_s"] for r in rows]
        errors = sum(r[f"{w}_errors"] for r in rows)
        summary[str(w)] = {
            "median_s": statistics.median(times),
            "p90_s": _p90(times),
            "median_vs_full": statistics.median(times) / statistics.median(full),
            "p90_vs_full": _p90(times) / _p90(full),
            "wer": errors / max(1, words),
            "word_errors": errors,
            "differs_from_full": sum(r[str(w)] != r["0.0"] for r in rows),
            "first_window_kept": kept[str(w)],
            "redone": {why: n for why, n in redone[str(w)].items() if n},
        }
    return {
        "windows": variants,
        "seeds": seeds,
        "utterances": len(rows),
        "words": words,
        "summary": summary,
        "different": [
            {"text": r["text"], "full": r["0.0"], **{str(w): r[str(w)] for w in windows}}
            for r in rows
            if any(r[str(w)] != r["0.0"] for w in windows)
        ],
        "rows": rows,
    }


def table(result: dict[str, Any]) -> str:
    out = [
        "| first window | median s (÷ full) | p90 s (÷ full) | WER (word errors) | "
        "transcripts ≠ full | first window kept / redone with the full window |",
        "|---|---|---|---|---|---|",
    ]
    for w, s in result["summary"].items():
        name = "none (full window only)" if float(w) == 0 else f"{float(w):g} s"
        redone = ", ".join(f"{why} {n}" for why, n in s["redone"].items()) or "0"
        out.append(
            f"| {name} | {s['median_s']:.3f} ({s['median_vs_full']:.2f}) | {s['p90_s']:.3f} "
            f"({s['p90_vs_full']:.2f}) | {s['wer']:.2%} ({s['word_errors']}) | "
            f"{s['differs_from_full']} of {result['utterances']} | {s['first_window_kept']} / "
            f"{redone} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("first_window.json"))
    ap.add_argument("--windows", type=_floats, default=[6.0])
    ap.add_argument("--seeds", type=_ints, default=[11, 17, 23])
    ap.add_argument("--limit", type=int, default=0, help="utterances (0 = all)")
    args = ap.parse_args(argv)
    result = run(args.windows, args.seeds, args.limit)
    print(table(result))
    for d in result["different"]:
        print(f"  differs: {d}")
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

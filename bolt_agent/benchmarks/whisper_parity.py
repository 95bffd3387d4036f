"""Does asr_node's whisper (``WhisperEngine``, CTranslate2 without faster-whisper) hear what
faster-whisper hears, as fast?

    python -m bolt_agent.benchmarks.whisper_parity [--seeds 11,17,23] [--out F.json]

Piper speaks the sentences of ``pad_accuracy`` (the acoustic bench's and the end-of-turn
calibration's) with each voice seed; each utterance goes through the real ``VadSegmenter`` and
both transcribe the audio of the last early start (asr_node's pad and encoder window):
``WhisperEngine.transcribe`` and faster-whisper's ``WhisperModel.transcribe`` with the same
settings (greedy, temperature fallback, no timestamps, the same encoder window), in alternating
order. Reports identical transcripts, the ones that differ, and the median times' ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bolt_agent.benchmarks.pad_accuracy import _ints, early_audio, node_whisper, spoken
from bolt_agent.benchmarks.report import write_json


def run(seeds: list[int], limit: int = 0, log=print) -> dict[str, Any]:
    from faster_whisper import WhisperModel

    from bolt_agent.benchmarks.offline import library_transcribe, windowed_whisper_model
    from bolt_agent.nodes.asr_node import AsrParams

    p = AsrParams()
    ours = node_whisper()
    ours.first_window_s = 0.0  # faster-whisper has no first window: the same decoding
    ref = windowed_whisper_model(WhisperModel)(
        str(ours.model_dir), device="cpu", compute_type="int8", cpu_threads=ours.cpu_threads
    )

    def faster_whisper(audio) -> str:
        segments = library_transcribe(
            ref, audio, p.encoder_window_s, p.beam_size, p.no_speech_threshold,
            p.log_prob_threshold,
        )  # fmt: skip
        return " ".join(s.text.strip() for s in segments)

    def engine(audio) -> str:
        got = ours.transcribe(audio)
        return got.text if got else ""

    rows = []
    for i, (seed, text, x) in enumerate(spoken(seeds, log)):
        if limit and i >= limit:
            break
        audio = early_audio(x, p.speech_pad_ms)
        if audio is None:
            continue
        row: dict[str, Any] = {"seed": seed, "text": text}
        order = (("ours", engine), ("faster_whisper", faster_whisper))
        for name, fn in order if i % 2 == 0 else order[::-1]:
            t0 = time.perf_counter()
            row[name] = fn(audio)
            row[f"{name}_s"] = time.perf_counter() - t0
        rows.append(row)
    ours_s = statistics.median(r["ours_s"] for r in rows)
    ref_s = statistics.median(r["faster_whisper_s"] for r in rows)
    return {
        "seeds": seeds,
        "utterances": len(rows),
        "identical": sum(r["ours"] == r["faster_whisper"] for r in rows),
        "different": [
            {k: r[k] for k in ("seed", "text", "ours", "faster_whisper")}
            for r in rows
            if r["ours"] != r["faster_whisper"]
        ],
        "median_s": {"ours": ours_s, "faster_whisper": ref_s},
        "time_ratio": ours_s / ref_s if ref_s else None,
        "rows": rows,
    }


def table(result: dict[str, Any]) -> str:
    m = result["median_s"]
    return "\n".join(
        [
            "| utterances | identical transcripts | median s: ours / faster-whisper | ratio |",
            "|---|---|---|---|",
            f"| {result['utterances']} | {result['identical']} | {m['ours']:.3f} / "
            f"{m['faster_whisper']:.3f} | {result['time_ratio']:.2f} |",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("whisper_parity.json"))
    ap.add_argument("--seeds", type=_ints, default=[11, 17, 23])
    ap.add_argument("--limit", type=int, default=0, help="utterances (0 = all)")
    args = ap.parse_args(argv)
    result = run(args.seeds, args.limit)
    print(table(result))
    for d in result["different"]:
        print(f"  differs: {d['ours']!r} / {d['faster_whisper']!r}")
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

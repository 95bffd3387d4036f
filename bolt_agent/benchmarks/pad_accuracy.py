"""Does a shorter pad after speech cost words? Whisper on the early transcript's audio for
several ``speech_pad_ms`` values.

    python -m bolt_agent.benchmarks.pad_accuracy --out /tmp/pad.json [--pads 80,96,112,48,32]
        [--seeds 11,17,23]

The early final (asr_node) waits for ``speech_pad_ms`` of audio after Silero's silence
onset before whisper starts, so every ms of pad is a ms of end-of-turn delay. Piper speaks the
acoustic benchmark's sentences and the end-of-turn calibration set's whole requests (42) with
each voice seed; each utterance goes through the real ``VadSegmenter`` in 10 ms blocks, and
whisper (asr_node's settings) transcribes what the last ``pending_end`` would hand it. Reports
the word error rate per pad and, per pad, on how many utterances it did better or worse than
the first pad: whisper answers a slightly different input differently, so a pad that is worse
on a few lines and better on as many is noise, one that is mostly worse cuts words.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bolt_agent.benchmarks.report import write_json

_SPELLING = {"favorite": "favourite", "armor": "armour", "color": "colour"}


def words(text: str) -> list[str]:
    """Lower-case words, hyphens split, British spelling (the voice says the same word)."""
    found = re.findall(r"[a-z']+", text.lower().replace("-", " "))
    return [_SPELLING.get(w, w) for w in found]


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """(substitutions + insertions + deletions, reference words): Levenshtein over words."""
    ref, hyp = words(reference), words(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1], len(ref)


def last_early_audio(segmenter: Any, audio: np.ndarray, block: int = 160) -> np.ndarray | None:
    """The audio of the last early transcript the listener would start: what
    ``audio_between(start, pending_end)`` holds when the final silence's pad is in."""
    from bolt_agent.core.asr.vad_segmenter import SpeechEnd

    last, taken = None, None
    for i in range(0, len(audio), block):
        events = segmenter.push(audio[i : i + block])
        end = segmenter.pending_end
        if end is not None and end != last:
            last, taken = end, segmenter.audio_between(segmenter.speech_start, end)
        if any(isinstance(e, SpeechEnd) for e in events):
            break
    return taken


def sentences() -> list[str]:
    from bolt_agent.benchmarks.end_of_turn_calibration import SENTENCES
    from bolt_agent.benchmarks.voice_loop import PAUSE_UTTERANCES, UTTERANCES

    whole = [s.replace(" | ", " ") for group in SENTENCES.values() for s in group]
    return whole + list(UTTERANCES) + [f"{a} {b}" for a, b, _ in PAUSE_UTTERANCES]


def spoken(seeds: list[int], log=print) -> Iterator[tuple[int, str, np.ndarray]]:
    """(seed, sentence, 16 kHz audio) for every sentence spoken by Piper with each voice seed,
    with 0.3 s of silence before and 1.5 s after (room for the VAD's silence)."""
    from bolt_agent.core.asr.vad_segmenter import SAMPLE_RATE
    from bolt_agent.core.audio.audio_io import StreamResampler, int16_to_float
    from bolt_agent.core.models import resolve_model
    from bolt_agent.core.tts.tts_engine import PiperEngine

    texts = sentences()
    lead = np.zeros(SAMPLE_RATE * 3 // 10, np.float32)
    tail = np.zeros(SAMPLE_RATE * 3 // 2, np.float32)
    for seed in seeds:
        tts = PiperEngine(resolve_model("", kind="tts"), seed=seed)
        tts.load()
        for text in texts:
            pcm = np.concatenate([c.audio for c in tts.synthesize(text)])
            x = StreamResampler(tts.sample_rate, SAMPLE_RATE).process(
                int16_to_float(pcm), last=True
            )
            yield seed, text, np.concatenate([lead, x, tail])
        log(f"seed {seed}: {len(texts)} utterances")


def node_whisper():
    """asr_node's whisper (its default parameters; 2 threads, as the stack gives it), loaded."""
    from bolt_agent.nodes.asr_node import AsrParams

    asr = AsrParams().whisper_engine("cpu", cpu_threads=2)
    asr.load()
    return asr


def early_audio(x: np.ndarray, pad_ms: int) -> np.ndarray | None:
    """What the last early start gives whisper, with ``speech_pad_ms`` = ``pad_ms``."""
    from bolt_agent.core.asr.vad_segmenter import VadConfig, VadSegmenter

    return last_early_audio(VadSegmenter(VadConfig(speech_pad_ms=pad_ms, min_silence_ms=1200)), x)


def run(pads: list[int], seeds: list[int], log=print) -> dict[str, Any]:
    asr = node_whisper()
    rows = []
    for seed, text, x in spoken(seeds, log):
        row: dict[str, Any] = {"seed": seed, "text": text, "heard": {}, "errors": {}}
        for pad in pads:
            audio = early_audio(x, pad)
            result = asr.transcribe(audio) if audio is not None else None
            heard = result.text if result else ""
            row["heard"][str(pad)] = heard
            row["errors"][str(pad)], row["words"] = word_errors(text, heard)
        rows.append(row)
    first = str(pads[0])
    summary = {}
    for pad in map(str, pads):
        errors = sum(r["errors"][pad] for r in rows)
        summary[pad] = {
            "wer": errors / max(1, sum(r["words"] for r in rows)),
            "word_errors": errors,
            "lines_with_errors": sum(r["errors"][pad] > 0 for r in rows),
            "better_than_first": sum(r["errors"][pad] < r["errors"][first] for r in rows),
            "worse_than_first": sum(r["errors"][pad] > r["errors"][first] for r in rows),
        }
    return {"pads": pads, "seeds": seeds, "utterances": len(rows), "summary": summary,
            "rows": rows}  # fmt: skip


def table(result: dict[str, Any]) -> str:
    first = result["pads"][0]
    out = [
        f"| speech_pad_ms | WER | lines with an error | better / worse than {first} |",
        "|---|---|---|---|",
    ]
    for pad, s in result["summary"].items():
        out.append(
            f"| {pad} | {s['wer']:.2%} ({s['word_errors']}) | {s['lines_with_errors']} of "
            f"{result['utterances']} | {s['better_than_first']} / {s['worse_than_first']} |"
        )
    return "\n".join(out)


def _numbers(text: str, convert, what: str, low: str, ok) -> list:
    """Comma-separated values for an argparse option: ``convert`` each, all must pass ``ok``."""
    try:
        values = [convert(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"comma-separated {what}: {text!r}") from exc
    if not values or not all(ok(v) for v in values):
        raise argparse.ArgumentTypeError(f"comma-separated {what} {low}: {text!r}")
    return values


def _ints(text: str) -> list[int]:
    return _numbers(text, int, "integers", ">= 0", lambda v: v >= 0)


def _floats(text: str) -> list[float]:
    return _numbers(text, float, "seconds", "> 0", lambda v: v > 0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("pad_accuracy.json"))
    ap.add_argument("--pads", type=_ints, default=[80, 96, 112, 48, 32])
    ap.add_argument("--seeds", type=_ints, default=[11, 17, 23])
    args = ap.parse_args(argv)
    result = run(args.pads, args.seeds)
    print(table(result))
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Speech benchmark: our core stages next to the same calls made on the raw libraries.

    python -m bolt_agent.benchmarks.speech_bench [--runs 3] [--threads 1] [--out speech_bench.json]

- ASR real-time factor: ``WhisperEngine.transcribe`` vs ``WhisperModel.transcribe``.
- End of speech → final transcript: the streaming ``VadSegmenter`` (32 ms blocks) + final
  transcription, measured as (detection delay after the true end of speech) + compute time;
  raw: ``get_speech_timestamps`` over the whole recording (offline, so its detection delay is
  the ``min_silence_duration_ms`` it needs) + ``WhisperModel.transcribe`` of the segment.
- TTS time to first audio: ``PiperEngine.synthesize`` vs ``PiperVoice.synthesize`` (first chunk).
No ROS, no audio device. The test audio is made with the bundled Piper voice.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from bolt_agent.core.asr.asr_engine import WhisperEngine
from bolt_agent.core.asr.vad_segmenter import SpeechEnd, VadConfig, VadSegmenter
from bolt_agent.core.audio.audio_io import int16_to_float, resample
from bolt_agent.core.models import resolve_model
from bolt_agent.core.tts.tts_engine import PiperEngine

TEXTS = (
    "Hello there, let me check the back room for you.",
    "I have iron helmets, leather boots and a fine steel breastplate.",
)
TTS_TEXT = "Welcome to the forge, traveller. What can I make for you today?"
SR = 16000


def timed(fn, *args, **kwargs) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t0, out


def make_audio(tts: PiperEngine) -> tuple[np.ndarray, list[tuple[int, int]]]:
    parts, truth, pos = [np.zeros(SR // 2, np.float32)], [], SR // 2
    for text in TEXTS:
        pcm = np.concatenate([c.audio for c in tts.synthesize(text)])
        x = resample(int16_to_float(pcm), tts.sample_rate, SR)
        loud = np.nonzero(np.abs(x) > 0.01)[0]
        truth.append((pos + int(loud[0]), pos + int(loud[-1]) + 1))
        parts += [x, np.zeros(SR, np.float32)]
        pos += len(x) + SR
    return np.concatenate(parts), truth


def bench_asr(audio, truth, threads: int, runs: int) -> dict:
    from faster_whisper import WhisperModel
    from faster_whisper.vad import VadOptions, get_speech_timestamps

    model_dir = resolve_model("", kind="asr")
    ours = WhisperEngine(model_dir, "cpu", "int8", threads)
    ours.load()
    raw = WhisperModel(str(model_dir), device="cpu", compute_type="int8", cpu_threads=threads)
    utt = audio[truth[0][0] : truth[0][1]]
    dur = len(utt) / SR

    def raw_transcribe(x):
        segments, _ = raw.transcribe(x, beam_size=1, language="en", without_timestamps=True)
        return " ".join(s.text.strip() for s in segments)

    ours.transcribe(utt)  # warm-up both
    raw_transcribe(utt)
    ours_t = [timed(ours.transcribe, utt)[0] for _ in range(runs)]
    raw_t = [timed(raw_transcribe, utt)[0] for _ in range(runs)]

    config = VadConfig()
    ours_lat, raw_lat = [], []
    for _ in range(runs):
        seg, ends = VadSegmenter(config), []
        for i in range(0, len(audio), 512):
            t_push, events = timed(seg.push, audio[i : i + 512])
            for ev in events:
                if isinstance(ev, SpeechEnd):
                    t_asr, _ = timed(ours.transcribe, ev.audio)
                    ends.append((i + 512, t_push + t_asr))
        for (detected_at, compute), (_, true_end) in zip(ends, truth, strict=True):
            ours_lat.append((detected_at - true_end) / SR + compute)
        opts = VadOptions(
            threshold=config.threshold,
            min_silence_duration_ms=config.min_silence_ms,
            speech_pad_ms=config.speech_pad_ms,
            min_speech_duration_ms=config.min_speech_ms,
        )
        t_vad, stamps = timed(get_speech_timestamps, audio, opts)
        for st, (_, true_end) in zip(stamps, truth, strict=True):
            t_asr, _ = timed(raw_transcribe, audio[st["start"] : st["end"]])
            detect = max(0.0, (st["end"] - true_end) / SR) + config.min_silence_ms / 1000
            raw_lat.append(detect + t_asr + t_vad / len(stamps))
    return {
        "utterance_s": dur,
        "rtf": {"ours": statistics.median(ours_t) / dur, "raw": statistics.median(raw_t) / dur},
        "eos_to_final_s": {"ours": statistics.median(ours_lat), "raw": statistics.median(raw_lat)},
        "text": ours.transcribe(utt).text,
    }


def bench_tts(threads: int, runs: int) -> dict:
    from piper import PiperVoice

    model = resolve_model("", kind="tts")
    load_ours, ours = timed(lambda: PiperEngine(model, cpu_threads=threads))
    load_t, _ = timed(ours.load)
    load_raw, raw = timed(PiperVoice.load, model)

    def first_ours():
        return next(iter(ours.synthesize(TTS_TEXT)))

    def first_raw():
        return next(iter(raw.synthesize(TTS_TEXT)))

    first_ours(), first_raw()  # warm-up
    ours_t = [timed(first_ours)[0] for _ in range(runs)]
    raw_t = [timed(first_raw)[0] for _ in range(runs)]
    return {
        "load_s": {"ours": load_ours + load_t, "raw": load_raw},
        "first_audio_s": {"ours": statistics.median(ours_t), "raw": statistics.median(raw_t)},
        "raw_threads": "onnxruntime default (all cores)",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="cpu_threads for whisper and Piper")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    args = ap.parse_args()

    tts = PiperEngine(resolve_model("", kind="tts"), cpu_threads=args.threads)
    tts.load()
    audio, truth = make_audio(tts)
    asr = bench_asr(audio, truth, args.threads, args.runs)
    tts_r = bench_tts(args.threads, args.runs)
    rows = [
        ("ASR real-time factor", asr["rtf"]),
        ("ASR end of speech → final (s)", asr["eos_to_final_s"]),
        ("TTS time to first audio (s)", tts_r["first_audio_s"]),
        ("TTS load (s)", tts_r["load_s"]),
    ]
    print(f"{'metric':32} {'ours':>9} {'raw lib':>9} {'ratio':>7}")
    for name, r in rows:
        print(f"{name:32} {r['ours']:9.3f} {r['raw']:9.3f} {r['ours'] / r['raw']:7.2f}")
    print(f"(threads={args.threads}, runs={args.runs}, utterance {asr['utterance_s']:.2f} s: "
          f"{asr['text']!r}; raw Piper uses {tts_r['raw_threads']})")  # fmt: skip
    if args.out:
        result = {
            "machine": platform.platform(),
            "threads": args.threads,
            "runs": args.runs,
            "asr": asr,
            "tts": tts_r,
        }
        args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Memory probe: RSS of the three engines the stack loads, over N voice turns, without ROS.

    python -m bolt_agent.benchmarks.memory_probe --turns 10 --out /tmp/mem.json [fixes]

Loads what the stack loads with the stack's voice settings (``stack.sim_overrides``): Silero VAD
(``VadSegmenter``) + ``WhisperEngine`` (2 threads), ``LlamaEngine`` through ``TurnRunner``
(constrained, reachy_mini tools, thinking budget 24, conversational mode, decode 1 thread /
prefill 2) and ``PiperEngine`` (1 thread). Each engine runs in a worker thread of its own, as
in the nodes (glibc arenas are per thread). A turn: VAD + transcribe a Piper-made utterance,
run the turn with a growing dialogue (tool calls succeed at once), synthesize its sentences.
Prints RSS (MiB) after loading and after each turn; writes JSON with the per-stage RSS,
glibc's ``mallinfo2`` (bytes held free by malloc) and stage timings.

Each fix is a flag; unset, the code's defaults apply (docs/benchmarks.md has the results):
``--arena-max N`` / ``--mmap-threshold BYTES`` (glibc ``M_ARENA_MAX`` / ``M_MMAP_THRESHOLD``
through ``BOLT_MALLOC_*``, 0 = glibc's default; the process re-executes itself so that they
apply before any thread starts), ``--trim`` (``core.memory.release_free_memory`` after each
turn), ``--swa-full/--no-swa-full``, ``--n-ubatch``, ``--flash-attn``, ``--ort-arena/
--no-ort-arena`` and ``--ort-shrink-chars`` (Piper's onnxruntime arena), ``--only`` (a subset
of asr,llm,tts, to attribute growth), ``--malloc-info FILE`` (glibc's per-arena free lists).
Before/after: ``--arena-max 0 --mmap-threshold 0 --ort-shrink-chars -1 --swa-full`` vs none.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from bolt_agent.benchmarks.stack_host import rss_mb

MODULE = "bolt_agent.benchmarks.memory_probe"


_MALLINFO2 = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (*_MALLINFO2, "fordblks", "keepcost")]


def _libc():
    try:
        libc = ctypes.CDLL(None)
        libc.mallinfo2.restype = _MallInfo2
        return libc
    except (OSError, AttributeError):
        return None


def memory(libc) -> dict[str, float]:
    """RSS figures (MiB) plus malloc's in-use / held-free bytes (MiB, all arenas)."""
    out = {k: round(v, 1) for k, v in rss_mb().items()}
    if libc is not None:
        info = libc.mallinfo2()
        out["malloc_in_use"] = round((info.uordblks + info.hblkhd) / 2**20, 1)
        out["malloc_free_held"] = round(info.fordblks / 2**20, 1)
    return out


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--out", default="")
    ap.add_argument("--only", default="asr,llm,tts", help="engines to load: asr,llm,tts")
    ap.add_argument("--arena-max", type=int, default=None, help="0 = glibc default")
    ap.add_argument("--trim", action="store_true", help="core.memory.release_free_memory per turn")
    ap.add_argument("--mmap-threshold", type=int, default=None, help="bytes; 0 = glibc dynamic")
    ap.add_argument("--swa-full", action=argparse.BooleanOptionalAction, default=None)
    ap.add_argument("--n-ubatch", type=int, default=None)
    ap.add_argument("--flash-attn", choices=("on", "off", "auto"), default=None)
    ap.add_argument("--ort-arena", action=argparse.BooleanOptionalAction, default=None)
    ap.add_argument("--ort-shrink-chars", type=int, default=None, help="-1 = never shrink")
    ap.add_argument("--malloc-info", default="", help="write glibc's malloc_info XML here")
    ap.add_argument("--max-new-tokens", type=int, default=192, help="per step (llm_node: 192)")
    return ap.parse_args(argv)


def _reexec_for_malloc(args: argparse.Namespace, argv: list[str]) -> None:
    """glibc settings apply before threads exist: bolt_agent/__init__ sets them at import from
    the environment, so a different setting re-executes this process with it."""
    want = {
        "BOLT_MALLOC_ARENA_MAX": args.arena_max,
        "BOLT_MALLOC_MMAP_THRESHOLD": args.mmap_threshold,
    }
    want = {k: str(v) for k, v in want.items() if v is not None}
    if all(os.environ.get(k) == v for k, v in want.items()):
        return
    env = {**os.environ, **want}
    for glibc in ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_"):
        env.pop(glibc, None)
    os.execve(sys.executable, [sys.executable, "-m", MODULE, *argv], env)


def utterances(tts, n: int) -> list[np.ndarray]:
    """The voice benchmark's user lines, Piper-made, 16 kHz, with 0.3 s lead and 0.8 s tail."""
    from bolt_agent.benchmarks.voice_loop import UTTERANCES
    from bolt_agent.core.audio.audio_io import int16_to_float, resample

    out = []
    for text in UTTERANCES[: min(n, len(UTTERANCES))]:
        x = resample(int16_to_float(tts.synthesize_sentence(text)), tts.sample_rate, 16000)
        out.append(np.concatenate([np.zeros(4800, np.float32), x, np.zeros(12800, np.float32)]))
    return out


class _Sink:
    """TurnSink: collects sentences; every tool call succeeds at once."""

    def __init__(self) -> None:
        self.sentences: list[str] = []

    def __getattr__(self, _name):
        return lambda *a, **k: None

    def on_sentence(self, _turn_id, _seq, text) -> None:
        self.sentences.append(text)

    def dispatch(self, *_a):
        from concurrent.futures import Future

        from bolt_agent.core.llm.turn_runner import ToolResult

        f: Future = Future()
        f.set_result(ToolResult(True, "done"))
        return f


def _given(pairs) -> dict:
    return {k: v for k, v in pairs if v is not None}


class _Engines:
    """The three engines, each driven from a worker thread of its own (as in the nodes)."""

    def __init__(self, args: argparse.Namespace, libc) -> None:
        from bolt_agent.core.asr.asr_engine import WhisperEngine
        from bolt_agent.core.asr.vad_segmenter import VadSegmenter
        from bolt_agent.core.llm.llama.engine import LlamaConfig, LlamaEngine
        from bolt_agent.core.models import resolve_model
        from bolt_agent.core.tts.tts_engine import PiperEngine

        self.args, self.libc, self.only = args, libc, set(args.only.split(","))
        self.pools = {k: ThreadPoolExecutor(1, thread_name_prefix=k) for k in ("asr", "llm", "tts")}
        self.mem = {"start": memory(libc)}
        tts_kw = _given(
            (("mem_arena", args.ort_arena), ("shrink_above_chars", args.ort_shrink_chars))
        )
        self.tts = PiperEngine(resolve_model("", kind="tts"), cpu_threads=1, **tts_kw)
        self.pools["tts"].submit(self.tts.load).result()
        self.wavs = utterances(self.tts, args.turns)  # made first: the stack gets them as audio
        if "tts" not in self.only:
            self.tts.close()
        self.mem["tts"] = memory(libc)
        self.asr = self.seg = None
        if "asr" in self.only:
            asr = WhisperEngine(resolve_model("", kind="asr"), device="cpu", cpu_threads=2)
            seg = VadSegmenter()
            self.pools["asr"].submit(lambda: (asr.load(), seg.model.load())).result()
            self.asr, self.seg = asr, seg
        self.mem["asr"] = memory(libc)
        self.engine = self.runner = None
        if "llm" in self.only:
            llm_kw = _given(
                (
                    ("swa_full", args.swa_full),
                    ("n_ubatch", args.n_ubatch),
                    ("flash_attn", args.flash_attn),
                )
            )
            path = str(resolve_model("", kind="llm"))
            self.engine = LlamaEngine(LlamaConfig(path, n_threads=1, n_threads_batch=2, **llm_kw))
            self.pools["llm"].submit(self.engine.load).result()
            self.runner = self._runner()
        self.mem["llm"] = memory(libc)

    def _runner(self):
        from bolt_agent.core.llm.dialogue import Dialogue
        from bolt_agent.core.llm.profile import load_profile
        from bolt_agent.core.llm.turn_runner import RunnerConfig, TurnRunner
        from bolt_agent.core.llm.types import SamplingParams

        prof = load_profile("reachy_mini")
        config = RunnerConfig(
            sampling=SamplingParams(seed=7),
            constrained=self.engine.chat_template.is_bundled,
            max_new_tokens=self.args.max_new_tokens,
        )
        return TurnRunner(self.engine, Dialogue(prof.persona), prof.registry, config)

    def _listen(self, audio: np.ndarray) -> tuple[str, float]:
        t0 = time.perf_counter()
        events = [e for k in range(0, len(audio), 512) for e in self.seg.push(audio[k : k + 512])]
        heard = [e for e in events + self.seg.flush() if hasattr(e, "audio")]
        res = self.asr.transcribe(heard[-1].audio if heard else audio)
        return (res.text if res else ""), time.perf_counter() - t0

    def turn(self, i: int) -> dict:
        from bolt_agent.core.llm.chat_template import Knobs
        from bolt_agent.core.llm.turn_runner import TurnRequest
        from bolt_agent.core.memory import release_free_memory

        row: dict = {"turn": i}
        text = "Hello there! What is your name?"
        if self.asr is not None:
            audio = self.wavs[i % len(self.wavs)]
            text, row["asr_s"] = self.pools["asr"].submit(self._listen, audio).result()
            text = text or "Hello there!"
            row["asr"] = memory(self.libc)
        sentences = [text]
        if self.runner is not None:
            sink, t0 = _Sink(), time.perf_counter()
            req = TurnRequest(f"m{i}", text, Knobs(True, 24, True))  # the stack's voice knobs
            res = self.pools["llm"].submit(self.runner.run, req, sink).result()
            row["llm_s"] = time.perf_counter() - t0
            row["prompt_tokens"], row["completion_tokens"] = (
                res.prompt_tokens,
                res.completion_tokens,
            )
            row["reused_tokens"] = [s.reused_tokens for s in res.stats]
            row["decode_tok_s"] = [round(s.decode_tok_s, 1) for s in res.stats]
            row["n_past"] = self.engine.llm.n_tokens
            sentences = sink.sentences or ["Okay."]
            row["llm"] = memory(self.libc)
        if "tts" in self.only:
            t0, synth = time.perf_counter(), self.tts.synthesize_sentence
            samples = sum(len(self.pools["tts"].submit(synth, s).result()) for s in sentences)
            row["tts_s"] = time.perf_counter() - t0
            row["tts_rtf"] = row["tts_s"] / max(samples / self.tts.sample_rate, 1e-6)
            row["tts_chars"] = sum(len(s) for s in sentences)
            row["tts"] = memory(self.libc)
        if self.args.trim:
            t0 = time.perf_counter()
            release_free_memory()
            row["trim_ms"] = (time.perf_counter() - t0) * 1000
        row["end"] = memory(self.libc)
        return row

    def close(self) -> None:
        for pool in self.pools.values():
            pool.shutdown()


def _write_malloc_info(libc, path: str) -> None:
    libc.fopen.restype = ctypes.c_void_p
    f = libc.fopen(path.encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(f))
    libc.fclose(ctypes.c_void_p(f))


def run(args: argparse.Namespace) -> dict:
    from bolt_agent.benchmarks.run_inputs import model_bytes

    libc = _libc()
    engines = _Engines(args, libc)
    loaded = dict(engines.mem["llm"])
    print(f"loaded: {loaded}", flush=True)
    turns = []
    for i in range(args.turns):
        row = engines.turn(i)
        turns.append(row)
        end = row["end"]
        print(
            f"turn {i}: RSS {end['VmRSS']:.0f} MiB (anon {end['RssAnon']:.0f}, malloc free "
            f"{end.get('malloc_free_held', 0):.0f}) n_past {row.get('n_past', 0)} "
            f"llm {row.get('llm_s', 0):.1f}s",
            flush=True,
        )
    engines.close()
    if args.malloc_info and libc is not None:
        _write_malloc_info(libc, args.malloc_info)
    end = turns[-1]["end"] if turns else loaded
    weights = model_bytes()
    wb = sum(v for k, v in weights.items() if k in engines.only) / 1e6
    med = statistics.median

    def median(key: str) -> float:
        return med(t.get(key, 0.0) for t in turns) if turns else 0.0

    return {
        "args": vars(args),
        "malloc_env": {k: v for k, v in os.environ.items() if "MALLOC" in k},
        "llama": engines.engine.llama_kwargs() if engines.engine else None,
        "model_bytes": weights,
        "memory": engines.mem,
        "turns": turns,
        "summary": {
            "rss_loaded_mib": loaded["VmRSS"],
            "rss_end_mib": end["VmRSS"],
            "rss_max_turn_end_mib": max((t["end"]["VmRSS"] for t in turns), default=0.0),
            "growth_mib": end["VmRSS"] - loaded["VmRSS"],
            "beyond_weights_loaded_mb": loaded["VmRSS"] * 1.048576 - wb,
            "beyond_weights_end_mb": end["VmRSS"] * 1.048576 - wb,
            "median_llm_s": median("llm_s"),
            "median_asr_s": median("asr_s"),
            "median_tts_rtf": median("tts_rtf"),
            "median_trim_ms": median("trim_ms"),
        },
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    _reexec_for_malloc(args, argv)
    out = run(args)
    print(json.dumps(out["summary"], indent=1), flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

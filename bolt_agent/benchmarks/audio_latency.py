"""How long audio takes through the stack's own device classes, by block size (PulseAudio).

    python -m bolt_agent.benchmarks.audio_latency --out /tmp/lat.json [--bursts 12]
        [--output-blocks 20,10,5] [--input-blocks 32,16,10]

Output: a ``Player`` (tts_node's, PortAudio low latency) in a child process writes a 1 kHz
burst every ~0.4 s; the benchmark's recorder (``bench_mix.monitor``, as ``bolt-agent bench``)
finds each burst's onset; write → onset is the delay, one block size after the other.

Input: one ``MicCapture`` (asr_node's) per block size, all open at once on the same null sink's
monitor, and a player child that writes bursts into that sink; write → the first callback that
carries the burst. Every block size sees the same bursts at the same time, so only the
differences count (the player's own delay is in every figure).

Prints a table and writes JSON (median / min / max seconds per block size). The delays of a
real robot's sound card are its own; the differences between block sizes carry over.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bolt_agent.benchmarks.report import write_json

MODULE = "bolt_agent.benchmarks.audio_latency"
BURST_LEVEL = 0.05  # |x| above this is the burst (the null sinks are silent otherwise)
GAP_S = 0.4  # between bursts: each one is over (and heard) before the next


def _burst(rate: int) -> np.ndarray:
    t = np.arange(int(rate * 0.08)) / rate
    return (np.sin(2 * np.pi * 1000 * t) * 12000).astype(np.int16)


def play(block_ms: int, rate: int) -> int:
    """Child: a Player on the default output; ``burst`` on stdin → writes one, answers its
    wall-clock time."""
    from bolt_agent.core.audio.playback import Player

    player = Player("pulse", rate, block_ms=block_ms, latency="low")
    player.open()
    print("ready", flush=True)
    burst = _burst(rate)
    for i, line in enumerate(sys.stdin):
        if line.strip() != "burst":
            break
        t = time.time()
        player.write(i, burst)
        print(f"{t:.6f}", flush=True)
    player.close()
    return 0


def listen(block_ms: int) -> int:
    """Child: a MicCapture on the default input; ``arm`` → the next callback with the burst is
    timed; ``get`` answers that time (0 when none came)."""
    from bolt_agent.core.audio.audio_io import MicCapture

    state = {"armed": False, "hit": 0.0}

    def on_audio(x: np.ndarray, _stamp_ns: int, _lost_ns: int) -> None:
        if state["armed"] and len(x) and float(np.abs(x).max()) > BURST_LEVEL:
            state["hit"], state["armed"] = time.time(), False

    mic = MicCapture("pulse", on_audio, 16000, block_ms)
    mic.open()
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "arm":
            state["armed"], state["hit"] = True, 0.0
        elif cmd == "get":
            print(f"{state['hit']:.6f}", flush=True)
        else:
            break
    mic.close()
    return 0


def _child(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", MODULE, *args],
        env={**os.environ, **env},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("ready"):
        proc.kill()
        raise RuntimeError(f"{' '.join(args)}: the child did not start ({line!r})")
    return proc


def _ask(proc: subprocess.Popen, line: str) -> str:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
    reply = proc.stdout.readline().strip()
    if not reply:
        raise RuntimeError(f"{' '.join(map(str, proc.args))}: the child ended (exit {proc.poll()})")
    return reply


def _stop(proc: subprocess.Popen) -> None:
    try:
        if proc.stdin is not None:
            proc.stdin.write("quit\n")
            proc.stdin.flush()
        proc.wait(5)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()


def summary(delays: list[float], sent: int) -> dict[str, float | int]:
    if not delays:
        return {"n": 0, "sent": sent}
    return {
        "n": len(delays),
        "sent": sent,
        "median_s": statistics.median(delays),
        "min_s": min(delays),
        "max_s": max(delays),
    }


def burst_onsets(audio: np.ndarray, clock: np.ndarray, rate: int = 16000) -> np.ndarray:
    """Wall-clock times of the bursts' onsets in one recorded channel."""
    from bolt_agent.benchmarks.voice_loop import frame_to_wall

    loud = np.flatnonzero(np.abs(audio) > BURST_LEVEL)
    if not len(loud):
        return np.zeros(0)
    starts = loud[np.insert(np.diff(loud) > rate // 10, 0, True)]
    return np.array([frame_to_wall(clock, f) for f in starts])


def measure_output(pulse, work: Path, blocks: list[int], bursts: int) -> dict[str, dict]:
    from bolt_agent.benchmarks.audio_procs import read_recording

    rec = subprocess.Popen(
        [sys.executable, "-m", "bolt_agent.benchmarks.audio_procs", "recorder", str(work / "rec")],
        env={**os.environ, **pulse.env(source="bench_mix.monitor")},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    writes: dict[int, list[float]] = {}
    try:
        if not (rec.stdout and rec.stdout.readline().startswith("ready")):
            raise RuntimeError("the recorder did not start")
        for block in blocks:
            player = _child(["play", str(block)], pulse.env(sink="robot_speaker"))
            try:
                time.sleep(0.5)
                writes[block] = []
                for i in range(bursts):
                    writes[block].append(float(_ask(player, "burst")))
                    time.sleep(GAP_S + 0.013 * (i % 7))  # not locked to the block clock
            finally:
                _stop(player)
        _ask(rec, "flush")
    finally:
        _stop(rec)
    audio, clock = read_recording(work / "rec")
    onsets = burst_onsets(audio[:, 1], clock)
    out = {}
    for block, sent in writes.items():
        delays = []
        for w in sent:
            after = onsets[(onsets > w) & (onsets < w + GAP_S)]
            if len(after):
                delays.append(float(after[0] - w))
        out[str(block)] = summary(delays, len(sent))
    return out


def measure_input(pulse, blocks: list[int], bursts: int) -> dict[str, dict]:
    player = _child(["play", "10", "--rate", "16000"], pulse.env(sink="user_mouth"))
    mics = {}
    try:
        for block in blocks:
            mics[block] = _child(["listen", str(block)], pulse.env(source="user_mouth.monitor"))
        time.sleep(0.5)
        delays: dict[int, list[float]] = {b: [] for b in blocks}
        for i in range(bursts):
            for mic in mics.values():
                mic.stdin.write("arm\n")  # type: ignore[union-attr]
                mic.stdin.flush()  # type: ignore[union-attr]
            time.sleep(0.05)
            sent = float(_ask(player, "burst"))
            time.sleep(GAP_S + 0.013 * (i % 7))
            for block, mic in mics.items():
                heard = float(_ask(mic, "get"))
                if heard > sent:
                    delays[block].append(heard - sent)
    finally:
        for proc in [*mics.values(), player]:
            _stop(proc)
    return {str(b): summary(d, bursts) for b, d in delays.items()}


def table(result: dict) -> str:
    rows = ["| path | block | median | min | max | bursts heard |", "|---|---|---|---|---|---|"]
    for path, label in (("output", "Player write → heard"), ("input", "burst → MicCapture")):
        for block, s in result.get(path, {}).items():
            if not s.get("n"):
                rows.append(f"| {label} | {block} ms | – | – | – | 0 of {s['sent']} |")
                continue
            rows.append(
                f"| {label} | {block} ms | {s['median_s'] * 1000:.0f} ms | "
                f"{s['min_s'] * 1000:.0f} ms | {s['max_s'] * 1000:.0f} ms | "
                f"{s['n']} of {s['sent']} |"
            )
    return "\n".join(rows)


def _blocks(text: str) -> list[int]:
    values = [int(v) for v in text.split(",") if v.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"block sizes in ms, comma-separated: {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["play"]:
        rate = int(argv[3]) if argv[2:3] == ["--rate"] else 22050
        return play(int(argv[1]), rate)
    if argv[:1] == ["listen"]:
        return listen(int(argv[1]))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("audio_latency.json"))
    ap.add_argument("--bursts", type=int, default=12)
    ap.add_argument("--output-blocks", type=_blocks, default=[20, 10, 5])
    ap.add_argument("--input-blocks", type=_blocks, default=[32, 16, 10])
    args = ap.parse_args(argv)
    if args.bursts < 1:
        ap.error("--bursts must be at least 1")
    from bolt_agent.benchmarks.pulse import start_bench_pulse

    work = Path(tempfile.mkdtemp(prefix="bolt-latency-"))
    pulse = start_bench_pulse(work)
    try:
        result = {
            "bursts": args.bursts,
            "output": measure_output(pulse, work, args.output_blocks, args.bursts),
            "input": measure_input(pulse, args.input_blocks, args.bursts),
        }
    finally:
        pulse.stop()
    print(table(result))
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())

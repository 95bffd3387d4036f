"""The benchmark's player and recorder, each in its own process (never in the nodes' process).

``python -m bolt_agent.benchmarks.audio_procs player``: one output stream on the default device
(``PULSE_SINK`` routes it), opened once; reads ``play <wav>`` lines on stdin, answers
``started <wall> <frame>`` / ``done <wall>`` on stdout. Silence is written between utterances.

``python -m bolt_agent.benchmarks.audio_procs recorder OUT``: one stereo input stream at 16 kHz on
the default source (``PULSE_SOURCE``); appends int16 frames to ``OUT.raw`` and, once per block,
``frames_so_far wall_time`` to ``OUT.clock`` (to map recorded frames to wall-clock time).
"""

from __future__ import annotations

import sys
import threading
import time
import wave
from pathlib import Path

import numpy as np

RATE = 16000


def _device():
    from bolt_agent.core.audio.audio_io import find_device

    return find_device("pulse", "output").index


def player() -> int:
    import sounddevice as sd

    from bolt_agent.core.audio.audio_io import find_device

    lock = threading.Lock()
    state = {"buf": np.zeros(0, np.int16), "pos": 0, "frame": 0, "done_at": None}

    def callback(outdata, frames, _time, _status):
        with lock:
            buf, pos = state["buf"], state["pos"]
            n = max(0, min(frames, len(buf) - pos))
            outdata[:n, 0] = buf[pos : pos + n]
            outdata[n:, 0] = 0
            state["pos"] = pos + n
            state["frame"] += frames
            if n and state["pos"] >= len(buf):
                state["done_at"] = time.time()

    dev = find_device("pulse", "output")
    stream = sd.OutputStream(
        device=dev.index,
        samplerate=RATE,
        channels=1,
        dtype="int16",
        blocksize=RATE // 50,
        latency="low",
        callback=callback,
    )
    stream.start()
    print("ready", flush=True)
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        if cmd == "quit":
            break
        if cmd != "play":
            continue
        with wave.open(arg, "rb") as w:
            data = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
        with lock:
            state.update(buf=data, pos=0, done_at=None)
        print(f"started {time.time():.6f}", flush=True)
        while True:
            with lock:
                done = state["done_at"]
            if done is not None:
                break
            time.sleep(0.01)
        print(f"done {done:.6f}", flush=True)
    stream.stop()
    stream.close()
    return 0


def recorder(out: str) -> int:
    import sounddevice as sd

    from bolt_agent.core.audio.audio_io import find_device

    raw = open(out + ".raw", "wb")  # noqa: SIM115 - closed below
    clock = open(out + ".clock", "w")  # noqa: SIM115
    frames = [0]

    def callback(indata, n, _time, _status):
        raw.write(np.ascontiguousarray(indata).tobytes())
        frames[0] += n
        clock.write(f"{frames[0]} {time.time():.6f}\n")

    dev = find_device("pulse", "input")
    stream = sd.InputStream(
        device=dev.index,
        samplerate=RATE,
        channels=2,
        dtype="int16",
        blocksize=RATE // 50,
        latency="low",
        callback=callback,
    )
    stream.start()
    print("ready", flush=True)
    try:
        for line in sys.stdin:
            if line.strip() == "quit":
                break
            raw.flush()
            clock.flush()
            print("flushed", flush=True)
    finally:
        stream.stop()
        stream.close()
        raw.close()
        clock.close()
    return 0


def read_recording(out: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """(frames x 2 float32 in -1..1, clock rows [frames_so_far, wall])."""
    data = np.fromfile(str(out) + ".raw", dtype=np.int16)
    audio = data[: len(data) // 2 * 2].reshape(-1, 2).astype(np.float32) / 32768.0
    clock = (
        np.loadtxt(str(out) + ".clock", ndmin=2)
        if Path(str(out) + ".clock").stat().st_size
        else np.zeros((0, 2))
    )
    return audio, clock


if __name__ == "__main__":
    role = sys.argv[1] if len(sys.argv) > 1 else ""
    if role == "player":
        raise SystemExit(player())
    if role == "recorder":
        raise SystemExit(recorder(sys.argv[2]))
    raise SystemExit("usage: audio_procs player | recorder OUT")

"""Record Pollen's simulated Reachy Mini as it moves, and render it to a GIF with MuJoCo.

Run by the daemon's own interpreter (``.venv-reachy``: it has the SDK, MuJoCo and Pillow; the
stack's environment has no MuJoCo), as a script, so it imports nothing of bolt_agent::

    .venv-reachy/bin/python reachy_recorder.py --port P --out demo.gif [--fps 8]

While it runs it samples the robot's measured motor angles (the body, the six Stewart-platform
motors, the antennas) through Pollen's SDK at ``fps``. When its standard input closes (or on
SIGINT/SIGTERM) it replays them into Pollen's MJCF in its own MuJoCo model, the way the daemon
drives its simulation (motor targets as position controls, physics stepped one frame's time so
the passive joints follow), renders each frame from the model's ``studio_close`` camera through
OSMesa and writes the GIF. The picture shows the poses the robot measured, not the commands.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time

os.environ.setdefault("MUJOCO_GL", "osmesa")  # headless: before mujoco is imported
# run as a script from core/motion/, whose reachy_mini.py would shadow Pollen's package
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(__file__)]


def record(port: int, fps: float, stop: threading.Event) -> list[tuple[list[float], list[float]]]:
    from reachy_mini import ReachyMini

    mini = ReachyMini(
        host="127.0.0.1",
        port=port,
        connection_mode="localhost_only",
        media_backend="no_media",
        timeout=10.0,
    )
    samples, period, next_t = [], 1.0 / fps, time.monotonic()
    print(f"recording at {fps:g} fps", flush=True)  # the owner waits for this line
    try:
        while not stop.is_set():
            head, antennas = mini.get_current_joint_positions()
            samples.append((list(head), list(antennas)))
            next_t += period
            stop.wait(max(0.0, next_t - time.monotonic()))
    finally:
        mini.client.disconnect()
    return samples


def render(samples, out: str, fps: float, width: int, height: int, max_frames: int) -> int:
    from importlib.resources import files

    import mujoco
    import numpy as np
    import reachy_mini
    from PIL import Image

    mjcf = files(reachy_mini).joinpath("descriptions/reachy_mini/mjcf/scenes/empty.xml")
    model = mujoco.MjModel.from_xml_path(str(mjcf))
    data = mujoco.MjData(model)
    model.opt.timestep = 0.002  # as Pollen's daemon
    # a long run is rendered from evenly spaced samples (each frame costs a fraction of a
    # second through OSMesa); the GIF keeps the run's real duration
    every = max(1, -(-len(samples) // max_frames))
    samples, fps = samples[::every], fps / every
    steps = max(1, round(1.0 / fps / model.opt.timestep))
    renderer = mujoco.Renderer(model, height, width)
    frames = []
    for i, (head, antennas) in enumerate(samples):
        data.ctrl[:7] = head
        data.ctrl[-2:] = -np.asarray(antennas)  # the daemon's own mapping onto its actuators
        for _ in range(steps if i else 25 * steps):  # the first pose settled from rest
            mujoco.mj_step(model, data)
        renderer.update_scene(data, camera="studio_close")
        frames.append(Image.fromarray(renderer.render()).quantize(colors=128))
    if not frames:
        return 0
    frames[0].save(out, save_all=True, append_images=frames[1:], duration=round(1000 / fps), loop=0)
    return len(frames)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--fps", type=float, default=8.0)
    ap.add_argument("--width", type=int, default=320)
    ap.add_argument("--height", type=int, default=240)
    ap.add_argument("--max-frames", type=int, default=240, help="more samples are thinned")
    args = ap.parse_args()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    samples = record(args.port, args.fps, stop)
    print(f"rendering {len(samples)} frames", flush=True)
    n = render(samples, args.out, args.fps, args.width, args.height, args.max_frames)
    print(f"wrote {args.out} ({n} frames)", flush=True)
    return 0 if n else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Thread pools every bolt_agent process sets up before the models load (bolt_agent/__init__):
numpy's OpenBLAS runs on the calling thread, so no BLAS worker spins on a core after a matrix
product while whisper, llama.cpp and Piper share the two cores. Fresh processes: OpenBLAS reads
its setting when numpy is first loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = """
import json, os, threading, time
import bolt_agent
import numpy as np

def others_cpu_s():
    me = str(threading.get_native_id())
    return sum(int(open(f"/proc/self/task/{t}/schedstat").read().split()[0])
               for t in os.listdir("/proc/self/task") if t != me) / 1e9

a = np.random.rand(80, 201).astype(np.float32)  # whisper's mel filterbank ...
b = np.random.rand(201, 300).astype(np.float32)  # ... times 3 s of spectrum
burned = 0.0
for _ in range(5):
    a @ b
    before = others_cpu_s()
    time.sleep(0.3)  # the caller is idle: any CPU now is another thread's
    burned += others_cpu_s() - before
print(json.dumps({"burned_s": burned, "omp": os.environ["OMP_WAIT_POLICY"],
                  "blas": os.environ["OPENBLAS_NUM_THREADS"]}))
"""


def _probe(**env: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_no_blas_thread_spins_after_a_matrix_product(monkeypatch):
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    got = _probe()
    assert got["blas"] == "1" and got["omp"] == "PASSIVE"
    assert got["burned_s"] < 0.02, got


def test_a_blas_thread_count_set_by_the_user_is_kept_and_its_workers_spin():
    """The control: with two OpenBLAS threads its worker spins after every product (~0.1 s of
    CPU each here), which is what the default avoids, and the user's setting is not overridden."""
    got = _probe(OPENBLAS_NUM_THREADS="2")
    assert got["blas"] == "2"
    assert got["burned_s"] > 0.05, got

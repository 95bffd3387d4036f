"""Stamps and a scripted VAD model for driving the ASR stage's Listener block by block."""

from __future__ import annotations

import numpy as np

from bolt_agent.core.asr.vad_segmenter import WINDOW

NS_PER_SAMPLE = 62_500  # 1e9 / 16 kHz
BASE = 7_000_000_000
DRIFT = 7_000  # ns added per block: stamps map offsets through the latest block's stamp


def block_stamp(k: int) -> int:
    return BASE + k * WINDOW * NS_PER_SAMPLE + k * DRIFT


def at(k: int, offset: int) -> int:
    """The stamp of sample ``offset`` as seen while block ``k`` is pushed."""
    return block_stamp(k) + (offset - k * WINDOW) * NS_PER_SAMPLE


class ByPosition:
    """Fake VAD model: the probability of each 512-sample window is scripted by its position in
    the stream (sample i of the stream holds the value i), so skipped blocks keep it aligned."""

    def __init__(self, probs: list[float]) -> None:
        self.probs = probs

    def reset(self) -> None:
        pass

    def __call__(self, windows: np.ndarray) -> np.ndarray:
        ks = [int(w[0]) // WINDOW for w in windows]
        return np.array([self.probs[k] if k < len(self.probs) else 0.0 for k in ks], np.float32)

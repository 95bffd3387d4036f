"""The queue between audio callbacks and the ASR's VAD thread (core/asr/audio_ingest.py),
synchronously: blocks put and taken on one thread, losses and drops asserted. No ROS."""

from __future__ import annotations

import queue

import numpy as np
import pytest

from bolt_agent.core.asr.audio_ingest import AudioBlock, AudioIngest

NS = 1_000_000_000


def block(n: int, value: float = 0.1) -> np.ndarray:
    return np.full(n, value, np.float32)


def test_blocks_come_out_in_order_with_what_is_still_queued_behind_them():
    ingest = AudioIngest()
    assert ingest.put(block(160, 0.1), 1_000, 0, max_queued=1_000)
    assert ingest.put(block(160, 0.2), 2_000, 0, max_queued=1_000)
    first, behind = ingest.get(timeout=0)
    assert isinstance(first, AudioBlock)
    assert (first.stamp_ns, first.lost, float(first.samples[0])) == (1_000, 0, pytest.approx(0.1))
    assert behind == 160
    second, behind = ingest.get(timeout=0)
    assert (second.stamp_ns, behind) == (2_000, 0)
    with pytest.raises(queue.Empty):
        ingest.get(timeout=0)


def test_a_flood_is_dropped_and_the_next_block_carries_the_loss():
    ingest = AudioIngest()
    assert ingest.put(block(600), 1, 0, max_queued=1_000)
    assert not ingest.put(block(600), 2, 0, max_queued=1_000)  # 1,200 > 1,000: dropped
    assert not ingest.put(block(500), 3, 7, max_queued=1_000)  # its own loss is kept too
    counts = ingest.counts()
    assert (counts.queued, counts.depth, counts.dropped) == (600, 1, 1_100)
    ingest.get(timeout=0)
    assert ingest.put(block(100), 4, 0, max_queued=1_000)
    taken, _ = ingest.get(timeout=0)
    assert taken.lost == 600 + 7 + 500  # not joined across the gap
    ingest.skipped(taken.lost)  # the consumer stepped over it
    assert ingest.counts().skipped == 1_107


def test_a_loss_up_to_the_tolerance_is_jitter_and_beyond_it_a_counted_gap():
    ingest = AudioIngest()
    tolerance = NS // 4
    assert ingest.lost_samples(NS // 5, tolerance) == 0
    assert ingest.lost_samples(NS, 0) == 0  # tolerance 0: never skip
    assert ingest.lost_samples(NS // 2, tolerance) == 8_000  # 0.5 s at 16 kHz
    counts = ingest.counts()
    assert (counts.gaps, counts.gap_samples) == (1, 8_000)


def test_stream_gaps_find_a_block_missing_by_its_stamps():
    ingest = AudioIngest()
    ten_ms = NS // 100
    assert ingest.stream_gaps.block(NS, ten_ms) == 0
    assert ingest.stream_gaps.block(NS + ten_ms, ten_ms) == 0
    assert ingest.stream_gaps.block(NS + 5 * ten_ms, ten_ms) == 3 * ten_ms  # three missing
    ingest.reset()  # a new activation starts a new stream
    assert ingest.stream_gaps.block(5 * NS, ten_ms) == 0


def test_close_wakes_the_consumer_and_reset_empties_the_queue_but_keeps_the_totals():
    ingest = AudioIngest()
    ingest.put(block(100), 1, 0, max_queued=100)
    assert not ingest.put(block(100), 2, 0, max_queued=100)
    ingest.reset()
    assert ingest.counts().queued == 0 and ingest.counts().dropped == 100
    ingest.close()
    assert ingest.get(timeout=0) == (None, 0)
    # the loss before the reset belonged to the old stream: the next block carries none
    ingest.put(block(10), 3, 0, max_queued=100)
    assert ingest.get(timeout=0)[0].lost == 0

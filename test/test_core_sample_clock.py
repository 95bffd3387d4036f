"""The capture stamps' sample clock (core/audio/sample_clock.py): contiguous through jitter and
stalls, gaps only where the device lost audio. Synchronous: blocks pushed with their arrival."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest

from bolt_agent.core.asr.audio_ingest import StreamGaps
from bolt_agent.core.audio.audio_io import MicCapture
from bolt_agent.core.audio.sample_clock import SampleClock

NS = 1_000_000_000
RATE = 48_000
FRAMES = 480  # 10 ms
BLOCK_NS = FRAMES * NS // RATE
T0 = 1_000 * NS


def run(clock: SampleClock, arrivals: list[int], overflow_at: int = -1) -> list[tuple[int, int]]:
    return [clock.block(FRAMES, a, overflow=i == overflow_at) for i, a in enumerate(arrivals)]


def on_time(n: int, start: int = T0, jitter: tuple[int, ...] = (0,)) -> list[int]:
    """Arrivals of ``n`` blocks captured from ``start`` on, each late by its jitter (ns)."""
    return [start + (i + 1) * BLOCK_NS + jitter[i % len(jitter)] for i in range(n)]


def gaps_on_replay(stamps: list[tuple[int, int]]) -> list[int]:
    """What the ASR finds missing when it gets these stamps back (a replayed bag)."""
    gaps = StreamGaps(tolerance_ns=NS // 4)
    return [g for s, _ in stamps if (g := gaps.block(s, BLOCK_NS))]


def test_stamps_are_contiguous_through_callback_jitter():
    stamps = run(SampleClock(RATE), on_time(300, jitter=(0, 3_000_000, 17_000_000, 1_000_000)))
    assert stamps[0] == (T0, 0)
    assert [s for s, _ in stamps] == [T0 + i * BLOCK_NS for i in range(300)]
    assert not any(lost for _, lost in stamps)


def test_a_stall_and_its_burst_keep_the_stamps_contiguous_where_arrival_stamps_jump():
    arrivals = on_time(100)
    stall = 600 * 1_000_000  # the callback did not run for 0.6 s; then the backlog at once
    burst_at = arrivals[49] + stall
    arrivals = arrivals[:50] + [burst_at] * 60 + [a + stall for a in on_time(100)[110:]]
    arrivals += [arrivals[-1] + (i + 1) * BLOCK_NS for i in range(100)]  # on time for 1 s more
    clock = SampleClock(RATE)
    stamps = run(clock, arrivals)
    assert [s for s, _ in stamps] == [T0 + i * BLOCK_NS for i in range(len(arrivals))]
    assert not any(lost for _, lost in stamps) and clock.jumps == 0
    assert gaps_on_replay(stamps) == []
    by_arrival = [(a - BLOCK_NS, 0) for a in arrivals]  # what the node stamped before
    assert gaps_on_replay(by_arrival) == [stall - BLOCK_NS]


def test_an_overflow_moves_the_clock_over_what_was_lost():
    dropped = 400 * 1_000_000
    arrivals = on_time(50) + [a + dropped for a in on_time(50, start=T0 + 50 * BLOCK_NS)]
    clock = SampleClock(RATE)
    stamps = run(clock, arrivals, overflow_at=50)
    assert stamps[50] == (T0 + 50 * BLOCK_NS + dropped, dropped)
    assert [s for s, _ in stamps[51:]] == [T0 + (51 + i) * BLOCK_NS + dropped for i in range(49)]
    assert (clock.jumps, clock.jumped_ns) == (1, dropped)
    assert gaps_on_replay(stamps) == [dropped]


def test_audio_lost_without_a_report_shows_once_every_block_comes_late():
    dropped = 300 * 1_000_000
    arrivals = on_time(50) + [a + dropped for a in on_time(150, start=T0 + 50 * BLOCK_NS)]
    stamps = run(SampleClock(RATE), arrivals)
    lost = [(i, n) for i, (_, n) in enumerate(stamps) if n]
    assert len(lost) == 1 and lost[0][1] == dropped
    assert 50 < lost[0][0] <= 50 + 51  # within half a second of host time
    assert gaps_on_replay(stamps) == [dropped]


def test_a_backlog_that_drains_slowly_is_not_taken_for_lost_audio():
    """A busy process may drain its backlog at little more than real time: every block of a
    window is late, but less and less."""
    stall = 800 * 1_000_000
    arrivals = on_time(50)
    resumed = arrivals[-1] + stall
    backlog = stall // BLOCK_NS
    # the backlog and what comes meanwhile, 1.5 blocks per block time, then on time again
    t, k = resumed, 0
    while t - BLOCK_NS > T0 + (50 + k) * BLOCK_NS:
        arrivals.append(t)
        t += BLOCK_NS * 2 // 3
        k += 1
    assert k > backlog
    arrivals += [T0 + (51 + k + i) * BLOCK_NS for i in range(100)]
    clock = SampleClock(RATE)
    stamps = run(clock, arrivals)
    assert clock.jumps == 0 and not any(lost for _, lost in stamps)
    assert [s for s, _ in stamps] == [T0 + i * BLOCK_NS for i in range(len(arrivals))]


def test_a_device_clock_off_by_a_little_is_followed_without_a_gap():
    n = 600 * 100  # ten minutes of 10 ms blocks
    slow = [T0 + (i + 1) * BLOCK_NS * 1_000_500 // 1_000_000 for i in range(n)]  # -500 ppm
    clock = SampleClock(RATE)
    stamps = run(clock, slow)
    assert clock.jumps >= 1 and all(lost <= clock.resync_ns * 2 for _, lost in stamps)
    assert abs(stamps[-1][0] - (slow[-1] - BLOCK_NS)) <= clock.resync_ns * 2
    assert gaps_on_replay(stamps) == []
    fast = [T0 + (i + 1) * BLOCK_NS * 999_500 // 1_000_000 for i in range(n)]  # +500 ppm
    stamps = run(SampleClock(RATE), fast)
    assert not any(lost for _, lost in stamps)
    assert all(b > a for (a, _), (b, _) in itertools.pairwise(stamps))  # never back
    assert abs(stamps[-1][0] - (fast[-1] - BLOCK_NS)) <= BLOCK_NS  # it follows the arrivals


def test_a_clock_set_by_a_late_first_block_is_pulled_back_by_half_a_block_at_most():
    arrivals = [T0 + BLOCK_NS + 30_000_000, *on_time(20)[1:]]  # the first came 30 ms late
    clock = SampleClock(RATE)
    stamps = [s for s, _ in run(clock, arrivals)]
    assert all(BLOCK_NS // 2 <= b - a <= BLOCK_NS for a, b in itertools.pairwise(stamps))
    assert stamps[-1] == T0 + 19 * BLOCK_NS  # on the arrivals once pulled back
    clock.reset()
    assert clock.block(FRAMES, T0 + 5 * NS) == (T0 + 5 * NS - BLOCK_NS, 0)
    with pytest.raises(ValueError):
        SampleClock(0)


def test_an_overflow_that_comes_early_loses_nothing_and_an_overflow_restarts_the_resampler():
    clock = SampleClock(RATE)
    run(clock, on_time(10))
    assert clock.block(FRAMES, T0 + 11 * BLOCK_NS - 2_000_000, overflow=True)[1] == 0
    got: list[tuple[np.ndarray, int, int]] = []
    now = {"mono": T0, "wall": 1_800_000_000 * NS}

    def on_audio(x: np.ndarray, stamp: int, lost: int) -> None:
        got.append((x, stamp, lost))

    mic = MicCapture(
        None, on_audio, 16000, 10, clock_ns=lambda: now["wall"], monotonic_ns=lambda: now["mono"]
    )
    mic._start(RATE)  # (open() does this for the device it opens)
    big, big_ns = FRAMES * 10, BLOCK_NS * 10  # 0.1 s blocks: soxr's delay is not all of it
    tone = np.sin(np.arange(big) * 0.3).astype(np.float32)[:, None]
    quiet = np.zeros((big, 1), np.float32)
    for block in (tone, tone, quiet):
        for key in now:
            now[key] += big_ns
        mic._callback(block, big, None, None)
    assert [lost for _, _, lost in got] == [0, 0, 0]
    assert float(np.abs(got[-1][0]).max()) > 0.05  # the filter's delay: the tone's tail
    assert [stamp for _, stamp, _ in got] == [1_800_000_000 * NS + i * big_ns for i in range(3)]
    now["wall"] += 3600 * NS + big_ns  # the wall clock steps (NTP): stamps follow, none lost
    now["mono"] += big_ns
    mic._callback(quiet, big, None, None)
    assert got[-1][1:] == (1_800_003_600 * NS + 3 * big_ns, 0)
    for key in now:
        now[key] += big_ns
    mic._callback(tone, big, None, None)  # its tail is still in the filter, then:
    for key in now:  # PortAudio lost 0.4 s and says so
        now[key] += 400_000_000 + big_ns
    mic._callback(quiet, big, None, SimpleNamespace(input_overflow=True))
    assert got[-1][2] == 400_000_000 and mic.errors == 1
    assert got[-1][1] == 1_800_003_600 * NS + 5 * big_ns + 400_000_000
    assert float(np.abs(got[-1][0]).max()) == 0.0  # nothing of before the loss

"""Stamps for a capture device's blocks by the samples it delivered, not by when they arrived.

A PortAudio callback that stalls (a busy machine) and then delivers its backlog in a burst gives
arrival stamps a jump where nothing was lost, then blocks stamped on top of each other. Replayed
from a recorded bag, the jump reads as lost audio (``StreamGaps``) and cuts the utterance in two.
Counted in samples, the stamps stay contiguous through the stall; what the device really lost
still shows as a gap: an input overflow that PortAudio reports, or blocks that keep arriving
later than the sample clock says (samples lost without a report, or a device clock slower than
the host's), which moves the clock forward. A device clock faster than the host's (blocks
arriving sooner than the sample clock says) pulls the clock back to their arrival.
"""

from __future__ import annotations

_NS = 1_000_000_000


class SampleClock:
    """``block(frames, arrival_ns, overflow)`` -> (stamp of the block's first sample, ns lost
    in front of it). Not thread-safe: one capture callback calls it.

    ``resync_ns``: lateness that every block arriving within ``window_ns`` (host time) must show
    before the clock moves forward without an overflow report. Jitter and bursts stay under it:
    a burst arrives at once, and its last block about on time."""

    def __init__(self, rate: int, resync_ns: int = _NS // 10, window_ns: int = _NS // 2) -> None:
        if rate <= 0:
            raise ValueError(f"sample rate must be positive, not {rate}")
        self.rate, self.resync_ns, self.window_ns = rate, resync_ns, window_ns
        self._next_ns: int | None = None  # the stamp of the next block's first sample
        self._samples = 0  # since the clock was last set (stamps are exact, not summed ns)
        self._origin_ns = 0  # where it was set
        self._least_late: int | None = None  # least lateness seen in the current window
        self._window_end_ns = 0  # arrival that closes it
        self.jumps = 0  # times the clock moved forward: audio lost, or a slow device clock
        self.jumped_ns = 0

    def reset(self) -> None:
        """Start afresh: the next block sets the clock by its arrival (a stream (re)opened)."""
        self._next_ns, self._least_late = None, None

    def block(self, frames: int, arrival_ns: int, overflow: bool = False) -> tuple[int, int]:
        """The block of ``frames`` samples whose last one arrived at ``arrival_ns``; ``overflow``:
        the device reported input lost before it."""
        duration = frames * _NS // self.rate
        start = arrival_ns - duration  # where the host clock puts it, at the earliest
        if self._next_ns is None:
            self._set(start)
            return self._advance(frames), 0
        late = start - self._next_ns
        lost = 0
        if late < 0:  # it came sooner than the sample clock says: the clock was set late
            self._set(start)
        elif overflow:
            lost = late
        else:
            if self._least_late is None:
                self._least_late, self._window_end_ns = late, arrival_ns + self.window_ns
            self._least_late = min(self._least_late, late)
            if arrival_ns >= self._window_end_ns:
                if self._least_late > self.resync_ns:
                    lost = self._least_late
                self._least_late = None
        if lost:
            self.jumps += 1
            self.jumped_ns += lost
            self._set(self._next_ns + lost)
        return self._advance(frames), lost

    def _set(self, origin_ns: int) -> None:
        self._origin_ns, self._samples = origin_ns, 0
        self._next_ns, self._least_late = origin_ns, None

    def _advance(self, frames: int) -> int:
        stamp = self._next_ns
        assert stamp is not None
        self._samples += frames
        self._next_ns = self._origin_ns + self._samples * _NS // self.rate
        return stamp

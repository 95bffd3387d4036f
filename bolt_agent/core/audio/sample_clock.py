"""Stamps for a capture device's blocks by the samples it delivered, not by when they arrived.

A PortAudio callback that stalls (a busy machine) and then delivers its backlog in a burst gives
arrival stamps a jump where nothing was lost, then blocks stamped on top of each other. Replayed
from a recorded bag, the jump reads as lost audio (``StreamGaps``) and cuts the utterance in two.
Counted in samples, the stamps stay contiguous through the stall; what the device really lost
still shows as a gap: an input overflow that PortAudio reports, or blocks that keep arriving
later than the sample clock says, by as much at the end of half a second as at its start
(samples lost without a report, or a device clock slower than the host's; a backlog that drains
arrives less and less late), which moves the clock forward. Blocks that arrive sooner than it
says (a device clock faster than the host's, a clock set by a late first block) pull it back
towards their arrival by at most half a block each, so stamps never go back.

Arrival times are monotonic (``time.monotonic_ns``): a step of the wall clock (NTP after boot)
is not lost audio. Callers add their own clock's offset to the stamps they publish.
"""

from __future__ import annotations

_NS = 1_000_000_000


class SampleClock:
    """``block(frames, arrival_ns, overflow)`` -> (stamp of the block's first sample, ns lost
    in front of it), both on the monotonic clock of ``arrival_ns``. Not thread-safe: one
    capture callback calls it.

    ``resync_ns``: lateness that every block arriving within ``window_ns`` (host time) must
    show, and the last one still (no less by half of it than the first), before the clock moves
    forward without an overflow report. Jitter and bursts stay under it: a burst arrives at
    once, and its last block about on time."""

    def __init__(self, rate: int, resync_ns: int = _NS // 10, window_ns: int = _NS // 2) -> None:
        if rate <= 0:
            raise ValueError(f"sample rate must be positive, not {rate}")
        self.rate, self.resync_ns, self.window_ns = rate, resync_ns, window_ns
        self._next_ns: int | None = None  # the stamp of the next block's first sample
        self._samples = 0  # since the clock was last set (stamps are exact, not summed ns)
        self._origin_ns = 0  # where it was set
        self._first_late = 0  # lateness of the current window's first block
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
        if overflow:
            lost = max(late, 0)  # (too much by the block's delay and any backlog behind it)
        elif late < 0:  # sooner than the sample clock says: back towards it, never past a stamp
            self._set(self._next_ns - min(-late, duration // 2))
        else:
            if self._least_late is None:
                self._first_late, self._least_late = late, late
                self._window_end_ns = arrival_ns + self.window_ns
            self._least_late = min(self._least_late, late)
            if arrival_ns >= self._window_end_ns:
                steady = late >= self._first_late - self.resync_ns // 2  # not a backlog draining
                if self._least_late > self.resync_ns and steady:
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

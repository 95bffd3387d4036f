"""A simulated room: the robot's speaker a few centimetres from its microphone.

What the microphone hears is the user, plus the robot's own voice as the room returns it, plus a
noise floor: the direct echo ``echo_delay_ms`` after the robot plays it (30-80 ms on a tabletop
robot, speaker latency included) at ``echo_gain_db`` (-6 to -12 dB), followed by a reflection
tail, exponentially decaying noise over ``tail_ms`` at ``tail_db`` below the direct echo. The
room is seeded, so a test or a benchmark hears the same room every run.

``Room.mic`` mixes whole signals (tests, the benchmark); ``RoomStream`` does the same block by
block on a sample time line, for a process that listens to ``audio/output`` and publishes
``audio/input`` (``bolt-agent room``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bolt_agent.core.audio.echo_canceller import SAMPLE_RATE, ReferenceTimeline


@dataclass(frozen=True)
class RoomSettings:
    echo_delay_ms: float = 50.0
    echo_gain_db: float = -9.0
    tail_ms: float = 120.0
    tail_db: float = -10.0  # the reflections' peak, relative to the direct echo
    noise_db: float = -55.0  # the noise floor's RMS, dB full scale
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.echo_delay_ms <= 1000.0:
            raise ValueError(f"echo_delay_ms must be within 0..1000, not {self.echo_delay_ms}")
        if self.tail_ms < 0.0:
            raise ValueError(f"tail_ms must be >= 0, not {self.tail_ms}")


class Room:
    def __init__(self, settings: RoomSettings | None = None) -> None:
        self.settings = s = settings or RoomSettings()
        rng = np.random.default_rng(s.seed)
        delay = round(s.echo_delay_ms * SAMPLE_RATE / 1000)
        tail = round(s.tail_ms * SAMPLE_RATE / 1000)
        ir = np.zeros(delay + 1 + tail, np.float32)
        gain = 10.0 ** (s.echo_gain_db / 20.0)
        ir[delay] = gain
        if tail:
            decay = np.exp(-np.arange(tail) / (tail / 4.0))  # ~35 dB down by the tail's end
            ir[delay + 1 :] = gain * 10.0 ** (s.tail_db / 20.0) * rng.standard_normal(tail) * decay
        self.impulse_response = ir
        self._noise_rms = 10.0 ** (s.noise_db / 20.0)
        self._rng = rng

    def echo(self, robot: np.ndarray) -> np.ndarray:
        """The robot's voice as it reaches the microphone (same length as ``robot``)."""
        robot = np.asarray(robot, np.float32)
        return np.convolve(robot, self.impulse_response)[: len(robot)].astype(np.float32)

    def noise(self, samples: int) -> np.ndarray:
        return (self._noise_rms * self._rng.standard_normal(samples)).astype(np.float32)

    def mic(
        self, robot: np.ndarray, user: np.ndarray | None = None, user_at: int = 0
    ) -> np.ndarray:
        """Robot echo + the user's voice from sample ``user_at`` + noise; as long as the longer
        of the two signals."""
        robot = np.asarray(robot, np.float32)
        n = len(robot)
        if user is not None:
            n = max(n, user_at + len(user))
        out = np.zeros(n, np.float32)
        out[: len(robot)] += self.echo(robot)
        if user is not None:
            out[user_at : user_at + len(user)] += np.asarray(user, np.float32)
        return out + self.noise(n)


class RoomStream:
    """The room block by block: ``played`` what the robot's speaker played (stamped, any block
    size, any order), ``heard`` the microphone's block over the same time line."""

    def __init__(self, room: Room) -> None:
        self.room = room
        self._robot = ReferenceTimeline(keep_s=5.0)
        self._spectrum: tuple[int, np.ndarray] | None = None

    def _ir_spectrum(self, size: int) -> np.ndarray:
        if self._spectrum is None or self._spectrum[0] != size:
            self._spectrum = (size, np.fft.rfft(self.room.impulse_response, size))
        return self._spectrum[1]

    def played(self, samples: np.ndarray, start: int) -> None:
        self._robot.write(samples, start)

    def heard(self, start: int, count: int, user: np.ndarray | None = None) -> np.ndarray:
        ir = self.room.impulse_response
        robot = self._robot.read(start - len(ir) + 1, count + len(ir) - 1)
        # by FFT: the direct sum cost 10 M multiply-adds a block, a third of a core in real time
        n = len(robot) + len(ir) - 1
        size = 1 << (n - 1).bit_length()
        full = np.fft.irfft(np.fft.rfft(robot, size) * self._ir_spectrum(size), size)[:n]
        out = full[len(ir) - 1 : len(ir) - 1 + count].astype(np.float32)
        if user is not None:
            out[: len(user)] += np.asarray(user, np.float32)[:count]
        return out + self.room.noise(count)

"""Lower the robot's voice while someone speaks over it, until the words are judged.

With ``echo_mode: aec`` the ASR does not stop the robot on a voice alone: it waits for words
(a backchannel must not stop it), which takes 0.6-1.6 s on 2 CPU cores. Meanwhile the user
hears the robot talk on over them. Ducking answers the voice at once: ``asr/voice_activity``
with ``speaking`` (and no ``barge_in``) lowers the robot by ``duck_db``; the end of that voice
(a backchannel, echo) brings it back, and a barge-in stops it anyway. The canceller gets the
quieter voice as its reference too (it is what plays), and the user's words compete with less
echo.

A lost "voice ended" must not leave the robot quiet: the duck lasts ``max_s`` at most. A voice
that is the robot's own echo (a canceller still learning the room lets some through) ducks it
too, until the ASR drops that voice as echo at its end.
Pure: the node feeds it the voice events and the clock, and applies the gains it returns.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DuckingSettings:
    duck_db: float = 0.0  # the robot's level while a voice is judged (0: no ducking)
    max_s: float = 5.0  # the longest duck (a lost end of voice)

    def __post_init__(self) -> None:
        if not -60.0 <= self.duck_db <= 0.0:
            raise ValueError(f"duck_db must be within [-60, 0], not {self.duck_db}")
        if self.max_s <= 0:
            raise ValueError(f"max_s must be > 0, not {self.max_s}")

    @property
    def gain(self) -> float:
        return 10.0 ** (self.duck_db / 20.0)


class Ducking:
    """Which gain the robot's voice should have; each method returns a new gain to apply, or
    None when it stays as it is."""

    def __init__(self, settings: DuckingSettings | None = None) -> None:
        self.settings = settings or DuckingSettings()
        self._since: float | None = None  # when the current duck began
        self.ducks = 0  # how many voices ducked the robot (diagnostics)
        self.expired = 0  # ... and of those, how many outlasted max_s (no end of voice came)

    @property
    def ducked(self) -> bool:
        return self._since is not None

    def voice(self, speaking: bool, barge_in: bool, now: float) -> float | None:
        """An ``asr/voice_activity`` message at ``now`` (monotonic s)."""
        if speaking and not barge_in and self.settings.duck_db < 0.0:
            if self._since is None:
                self.ducks += 1
            self._since = now  # (a second voice start renews it)
            return self.settings.gain
        return self.restore()  # the voice ended, or it is a barge-in (the robot stops)

    def tick(self, now: float) -> float | None:
        """Called now and then: a duck older than ``max_s`` ends."""
        if self._since is not None and now - self._since >= self.settings.max_s:
            self.expired += 1
            return self.restore()
        return None

    def restore(self) -> float | None:
        """Full level again (the voice ended; a stop or an interrupting say); None when it
        already was."""
        if self._since is None:
            return None
        self._since = None
        return 1.0

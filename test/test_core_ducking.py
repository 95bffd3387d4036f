"""Ducking the robot's voice while someone speaks over it (synchronous; no ROS, no sleeps)."""

from __future__ import annotations

import numpy as np
import pytest

from bolt_agent.core.audio.playback import _SegmentQueue
from bolt_agent.core.tts.ducking import Ducking, DuckingSettings


def test_a_voice_over_the_robot_ducks_it_until_the_voice_ends():
    duck = Ducking(DuckingSettings(duck_db=-12.0))
    gain = duck.voice(True, False, now=10.0)
    assert gain == pytest.approx(10 ** (-12 / 20)) and duck.ducked
    assert duck.voice(True, False, now=10.5) == pytest.approx(gain)  # a second start renews
    assert duck.voice(False, False, now=11.0) == 1.0 and not duck.ducked
    assert duck.voice(False, False, now=11.2) is None  # already at full level
    assert duck.ducks == 1


def test_a_barge_in_ends_the_duck_and_no_ducking_is_the_default():
    duck = Ducking(DuckingSettings(duck_db=-12.0))
    duck.voice(True, False, now=0.0)
    assert duck.voice(True, True, now=0.8) == 1.0  # (the robot stops; its next turn is loud)
    assert duck.voice(True, True, now=0.9) is None  # a barge-in alone never ducks
    off = Ducking()
    assert off.voice(True, False, now=0.0) is None and not off.ducked


def test_a_duck_whose_voice_never_ends_lasts_max_s():
    duck = Ducking(DuckingSettings(duck_db=-12.0, max_s=5.0))
    duck.voice(True, False, now=100.0)
    assert duck.tick(104.9) is None
    duck.voice(True, False, now=104.0)  # renewed: counted from here
    assert duck.tick(108.9) is None
    assert duck.tick(109.0) == 1.0 and not duck.ducked
    assert duck.expired == 1 and duck.tick(200.0) is None


@pytest.mark.parametrize("settings", [{"duck_db": 3.0}, {"duck_db": -80.0}, {"max_s": 0.0}])
def test_ducking_settings_are_checked(settings):
    with pytest.raises(ValueError):
        DuckingSettings(**settings)


def test_the_queue_ramps_to_a_new_gain_over_one_block_and_holds_it():
    q = _SegmentQueue(None)
    q.add("s", np.full(600, 10000, np.int16), 600)
    out = np.zeros(100, np.int16)
    q.fill(out)
    assert (out == 10000).all()  # full level until told
    q.set_gain(0.25)
    q.fill(out)
    assert out[0] == 10000 and out[-1] == 2500  # ramped, not stepped (a step clicks)
    assert np.all(np.diff(out.astype(np.int32)) <= 0)
    q.fill(out)
    assert (out == 2500).all()
    q.set_gain(4.0)  # more than full level would wrap int16: held at 1
    q.fill(out)
    q.fill(out)
    assert (out == 10000).all()


def test_a_gain_set_while_nothing_plays_is_the_next_lines_level_at_once():
    """A paced sink only fills while it has audio: a duck that ends after the robot's line
    must not fade the next line in from the ducked level."""
    q = _SegmentQueue(None)
    q.set_gain(0.25)
    q.add("a", np.full(100, 10000, np.int16), 100)
    out = np.zeros(100, np.int16)
    q.fill(out)
    assert (out == 2500).all()  # ducked from its first sample: nothing played to ramp from
    q.set_gain(1.0)  # the voice ended with the queue empty
    q.add("b", np.full(100, 10000, np.int16), 100)
    q.fill(out)
    assert (out == 10000).all()

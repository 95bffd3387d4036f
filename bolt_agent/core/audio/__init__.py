"""Audio devices: PortAudio streams, playback, sample clocks and PulseAudio routing."""

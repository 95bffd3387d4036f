"""Support shared by the tests and the benchmarks (a private PulseAudio server); no node uses it."""

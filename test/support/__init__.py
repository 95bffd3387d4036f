"""Helpers shared by the test modules (and two benchmarks): no test module imports another."""

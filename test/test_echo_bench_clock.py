"""The echo benchmark's stream clock: a job holds it for its own time (÷ the modelled speed)."""

import pytest

from bolt_agent.benchmarks import echo_bench
from bolt_agent.benchmarks.echo_bench import VirtualRunner


@pytest.mark.parametrize("speed, held", [(1.0, 0.4), (4.0, 0.1)])
def test_a_job_holds_the_stream_for_its_time_over_the_speed(monkeypatch, speed, held):
    clock = iter([10.0, 10.4, 10.4])  # the job's start, its event, its end (perf seconds)
    monkeypatch.setattr(echo_bench.time, "perf_counter", lambda: next(clock))
    runner = VirtualRunner(lambda: 2.0, speed)
    seen: list[float] = []
    handle = runner.submit(lambda: seen.append(runner.now()))
    assert seen == [pytest.approx(2.0 + held)] and handle.until == pytest.approx(2.0 + held)
    assert not handle.done()  # the stream is still at 2.0
    # the next job waits for this one
    clock = iter([20.0, 20.0])
    assert runner.submit(lambda: None).until == pytest.approx(2.0 + held)


def test_a_speed_must_be_positive():
    with pytest.raises(ValueError, match="speed"):
        VirtualRunner(lambda: 0.0, 0.0)

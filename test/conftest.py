"""Test session set-up: DDS stays on this machine, on a random domain of its own."""

from __future__ import annotations

import os
import random

# Before anything imports rclpy: discovery limited to localhost, one random domain per session.
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ["ROS_DOMAIN_ID"] = str(random.SystemRandom().randint(1, 101))
os.environ.setdefault(
    "FASTDDS_DEFAULT_PROFILES_FILE",
    os.path.join(os.path.dirname(__file__), "..", "config", "dds", "fastdds_localhost.xml"),
)

from pathlib import Path

import pytest

from support.launch import Launch
from support.ros_helpers import NodeProcess


@pytest.fixture
def node_process(tmp_path: Path):
    """Factory: start `python <args>` as a separate process; all are stopped at teardown."""
    started: list[NodeProcess] = []

    def start(*args: str, env: dict[str, str] | None = None, name: str = "node") -> NodeProcess:
        proc = NodeProcess(list(args), tmp_path / f"{name}-{len(started)}.log", env)
        started.append(proc)
        return proc

    yield start
    for proc in reversed(started):
        proc.stop()


@pytest.fixture
def launch(tmp_path: Path):
    """Factory: `ros2 launch bolt_agent bolt_agent.launch.py ARGS`; every one killed at teardown."""
    started: list[Launch] = []

    def start(*args: str) -> Launch:
        proc = Launch(tmp_path / f"launch-{len(started)}.log", *args)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()


@pytest.fixture
def unique_ns(request) -> str:
    """A topic namespace unique to this test, so tests never see each other's traffic."""
    return "/t_" + "".join(c if c.isalnum() else "_" for c in request.node.name)[:60]


def pytest_addoption(parser) -> None:
    parser.addoption(
        "--fuzz-long",
        action="store_true",
        help="run the test_fuzz_* Hypothesis suites with 10,000 cases each (default: 2,000)",
    )


def pytest_configure(config) -> None:
    """The fuzz suites read their case count from here (``FUZZ_EXAMPLES``)."""
    default = os.environ.get("BOLT_FUZZ_EXAMPLES", "2000")
    os.environ["BOLT_FUZZ_EXAMPLES"] = "10000" if config.getoption("--fuzz-long") else default

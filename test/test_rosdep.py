"""The README's rosdep line, verbatim, with the real rosdep, offline: every key of both
package.xml files resolves on Humble (Ubuntu jammy) and Jazzy (noble).

rosdep's database comes from a rosdistro snapshot (test/data/rosdep, the excerpt that
scripts/rosdep_snapshot.py copies from a pinned rosdistro commit) instead of the network;
``--simulate`` prints the install commands instead of running them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "test" / "data" / "rosdep"
OS = {"humble": "ubuntu:jammy", "jazzy": "ubuntu:noble"}


def readme_rosdep_line() -> str:
    lines = [ln for ln in (ROOT / "README.md").read_text().splitlines() if ln.startswith("rosdep ")]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("distro", sorted(OS))
def test_readme_rosdep_line_resolves_every_key(tmp_path, distro):
    sources = tmp_path / "sources.list.d"
    sources.mkdir()
    (sources / "20-default.list").write_text(
        f"yaml file://{DATA}/base.yaml\nyaml file://{DATA}/python.yaml\n"
    )
    # a machine without ROS sourced: --ignore-src would skip every ROS package it finds on
    # AMENT_PREFIX_PATH (here the venv's wheels), and nothing would be left to resolve
    hidden = ("AMENT_PREFIX_PATH", "ROS_PACKAGE_PATH", "CMAKE_PREFIX_PATH")
    env = {
        **{k: v for k, v in os.environ.items() if k not in hidden},
        "ROSDEP_SOURCE_PATH": str(sources),
        "ROSDISTRO_INDEX_URL": f"file://{DATA}/index-v4.yaml",
        "ROS_HOME": str(tmp_path / "ros_home"),
        "ROS_DISTRO": distro,
    }
    update = subprocess.run(
        ["rosdep", "update", "--rosdistro", distro],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert update.returncode == 0, update.stdout + update.stderr
    # the workspace the README sets up: ~/bolt_ws/src/bolt_agent is this repository
    ws = tmp_path / "bolt_ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "bolt_agent").symlink_to(ROOT)
    line = readme_rosdep_line().replace(" -y", "")
    args = [*line.split()[1:], "--simulate", "--rosdistro", distro, "--os", OS[distro]]
    run = subprocess.run(
        ["rosdep", *args], cwd=ws, capture_output=True, text=True, env=env, timeout=120
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "Cannot locate rosdep definition" not in out and "ERROR" not in out, out
    assert f"ros-{distro}-rclpy" in out, out  # what the robot would install
    # and each key resolves, also those --simulate skips (pip packages the venv has)
    paths = line.split("--from-paths", 1)[1].split("--")[0].split()
    keys = subprocess.run(
        ["rosdep", "keys", "--from-paths", *paths, "--ignore-src"],
        cwd=ws, capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert keys.returncode == 0, keys.stdout + keys.stderr
    names = keys.stdout.split()
    assert "rclpy" in names and "python-piper-tts-pip" in names, names
    resolved = subprocess.run(
        ["rosdep", "resolve", *names, "--rosdistro", distro, "--os", OS[distro]],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert resolved.returncode == 0, resolved.stdout + resolved.stderr
    assert (
        f"ros-{distro}-rclpy" in resolved.stdout and f"ros-{distro}-launch-ros" in resolved.stdout
    )
    assert "#pip" in resolved.stdout and "piper-tts" in resolved.stdout, resolved.stdout

"""The README's colcon lines in a scratch workspace: `colcon build` of this checkout (both
packages), then from the installed workspace `ros2 launch … --show-args`, `ros2 pkg executables`,
`bag:=` (its player from the package's lib/, not PATH) and `colcon test` running pytest.

One build (module fixture) in a temporary directory; the checkout's files are copied there (what
git tracks or would track), so nothing is written into the checkout.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: this machine only: the ROS wheels' CMake targets carry their build machine's include paths
#: (docs: ../shared/notes/ros2-from-pip.md); a ROS install needs no extra argument
CMAKE_FIX = ROOT / "scripts" / "cmake" / "fix_wheel_include_dirs.cmake"
NODES = {"llm_node", "asr_node", "tts_node", "perception_node", "animation_node", "game_state_node"}
NEW_ARGUMENTS = ("params_file", "use_sim_time", "log_level", "respawn", "exit_on_failure")


def in_workspace(
    ws: Path, script: str, timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """bash in the workspace; ``source install/setup.bash`` first once it exists (not under
    ``set -u``: colcon's setup script reads unset variables)."""
    setup = "source install/setup.bash && " if (ws / "install" / "setup.bash").exists() else ""
    return subprocess.run(
        ["bash", "-c", f"set -eo pipefail; {setup}{script}"],
        cwd=ws,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, (
        f"{result.args}\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    return result.stdout


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    ws = tmp_path_factory.mktemp("bolt_ws")
    src = ws / "src" / "bolt_agent"
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (f.decode() for f in files)):
        if (ROOT / name).is_file():  # a deleted-but-tracked file is skipped
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    # the README's line, plus this machine's CMake fix for the interface package
    build = (
        "colcon build --base-paths src/bolt_agent src/bolt_agent/bolt_agent_interfaces"
        f" --cmake-args -DCMAKE_PROJECT_INCLUDE={shlex.quote(str(CMAKE_FIX))}"
        f" -DPython3_EXECUTABLE={shlex.quote(sys.executable)}"
    )
    # colcon-cmake's default `make -jN -lN` stalls at a load of N (2 cores, other tests running):
    # the interface package took 103 s that way, 52 s with the load limit off
    ok(in_workspace(ws, build, timeout=600, env={"MAKEFLAGS": f"-j{os.cpu_count() or 2}"}))
    return ws


def test_installed_package_is_the_workspace_one(workspace):
    script = (
        "ros2 pkg prefix bolt_agent && python -c 'import bolt_agent; print(bolt_agent.__file__)'"
    )
    out = ok(in_workspace(workspace, script, 60))
    prefix, module = out.split()
    assert Path(prefix) == workspace / "install" / "bolt_agent"
    assert Path(module).is_relative_to(workspace / "install" / "bolt_agent")
    # the interface package was built too (rosidl Python for our messages)
    assert list((workspace / "install" / "bolt_agent_interfaces").rglob("_spoken_text.py"))


def test_launch_file_and_arguments_from_the_install(workspace):
    out = ok(in_workspace(workspace, "ros2 launch bolt_agent bolt_agent.launch.py --show-args", 60))
    for name in ("namespace", "bag", *NEW_ARGUMENTS):
        assert f"'{name}':" in out, name
    share = workspace / "install" / "bolt_agent" / "share" / "bolt_agent"
    assert (share / "launch" / "bolt_agent.launch.py").is_file()
    assert (share / "config" / "params" / "llm_node.yaml").is_file()


def test_node_executables_are_where_launch_looks(workspace):
    out = ok(in_workspace(workspace, "ros2 pkg executables bolt_agent", 60))
    listed = {line.split()[1] for line in out.splitlines() if line.startswith("bolt_agent ")}
    assert NODES | {"bolt-agent"} <= listed, listed
    lib = workspace / "install" / "bolt_agent" / "lib" / "bolt_agent"
    assert all((lib / n).is_file() for n in NODES)


def test_bag_player_runs_from_the_install(workspace, tmp_path):
    """`bag:=` with every node off: the player (lib/bolt_agent/bolt-agent; the venv's bin/ is
    taken off PATH, as in a colcon install) plays the bag and the launch ends by itself."""
    from rclpy.serialization import serialize_message
    from std_msgs.msg import String

    from bolt_agent.core.sim.bag_io import BagWriter

    writer = BagWriter(tmp_path / "bag")
    writer.add_topic("/chatter", "std_msgs/msg/String")
    writer.write("/chatter", 1, serialize_message(String(data="hi")))
    writer.close()
    ros2 = shutil.which("ros2")
    assert ros2 is not None
    bin_dir = str(Path(ros2).parent)
    path = ":".join(p for p in os.environ["PATH"].split(":") if p != bin_dir)
    off = " ".join(f"{n}:=false" for n in ("llm", "asr", "tts", "animation", "perception"))
    script = (
        f"PATH={shlex.quote(path)}; ! command -v bolt-agent"
        f" && {shlex.quote(ros2)} launch bolt_agent bolt_agent.launch.py {off}"
        f" namespace:=/colcon_bag bag:={shlex.quote(str(tmp_path / 'bag'))} 2>&1"
    )
    out = ok(in_workspace(workspace, script, 120))
    assert "played 1 messages" in out, out
    assert re.search(r"\[bag_play-\d+\]: process has finished cleanly", out), out


def test_colcon_test_runs_pytest(workspace):
    selection = "test/test_launch_static.py"
    result = in_workspace(
        workspace,
        f"colcon test --packages-select bolt_agent --pytest-args {selection}"
        " && colcon test-result --test-result-base build/bolt_agent",
        300,
    )
    ok(result)
    suite = ET.parse(workspace / "build" / "bolt_agent" / "pytest.xml").getroot()
    cases = [c.get("classname", "") for c in suite.iter("testcase")]
    assert cases and all("test_launch_static" in c for c in cases), cases
    assert not any("missing_result" in c.get("name", "") for c in suite.iter("testcase"))

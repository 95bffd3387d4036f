"""Foundation: real DDS between processes with our own types, packaging, set-up, doctor."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import pkgutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml
from rclpy.action import ActionClient
from rclpy.node import Node

import bolt_agent.core
from bolt_agent.nodes.qos import RELIABLE
from bolt_agent_interfaces.action import ExecuteTool
from bolt_agent_interfaces.msg import SpokenText
from support.ros_helpers import ros_node, spin_until

ROOT = Path(__file__).resolve().parents[1]
PROCS = Path(__file__).parent / "procs"


def test_discovery_stays_on_this_machine():
    assert os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"
    assert 1 <= int(os.environ["ROS_DOMAIN_ID"]) <= 101


def test_spoken_text_crosses_processes(node_process, unique_ns):
    with ros_node("listener", unique_ns) as (node, executor):
        got: list[SpokenText] = []
        node.create_subscription(SpokenText, "speech/say", got.append, RELIABLE)
        node_process(
            str(PROCS / "spoken_publisher.py"),
            "5",
            "--ros-args",
            "-r",
            f"__ns:={unique_ns}",
            name="publisher",
        )
        spin_until(executor, lambda: len(got) == 5, 30, "5 SpokenText messages")
    assert [m.seq for m in got] == list(range(5))
    assert got[-1].is_last_in_turn and got[0].text == "sentence 0"


def send_goal(executor, client: ActionClient, goal, feedback: list[str]):
    """Send the first goal to a server just discovered. ``server_is_ready`` says this client
    matched the server, not that the server matched this client's response reader: a response
    sent before that is lost (seen once in a full run on 2 busy cores). No answer in 10 s: the
    goal is sent once more, with a warning; the server is what is tested, not discovery."""
    attempt = [1]  # the feedback of the goal in use only (the lost one may still run)

    def feedback_of(n: int):
        return lambda f: feedback.append(f.feedback.status) if attempt[0] == n else None

    send = client.send_goal_async(goal, feedback_of(1))
    try:
        spin_until(executor, send.done, 10, "goal response")
    except AssertionError:
        warnings.warn("no response to the first goal: sent again", stacklevel=2)
        attempt[0] = 2
        feedback.clear()
        send = client.send_goal_async(goal, feedback_of(2))
        spin_until(executor, send.done, 10, "goal response (second try)")
    return send


def test_execute_tool_goal_feedback_result_and_cancel(node_process, unique_ns):
    node_process(
        str(PROCS / "slow_tool_server.py"),
        "6",
        "--ros-args",
        "-r",
        f"__ns:={unique_ns}",
        name="tool_server",
    )
    with ros_node("tool_client", unique_ns) as (node, executor):
        client = ActionClient(node, ExecuteTool, "game/execute_tool")
        spin_until(executor, client.server_is_ready, 30, "the ExecuteTool server")

        feedback: list[str] = []
        goal = ExecuteTool.Goal(tool_name="check_shop_inventory", arguments_json='{"a": 1}')
        send = send_goal(executor, client, goal, feedback)
        result = send.result().get_result_async()
        spin_until(executor, result.done, 20, "result")
        assert result.result().result.success
        assert json.loads(result.result().result.result_json) == {"echo": {"a": 1}}
        assert feedback[:2] == ["step 0", "step 1"]

        # second goal: cancel after the first feedback
        slow = ExecuteTool.Goal(tool_name="x", arguments_json="{}")
        feedback.clear()
        send = client.send_goal_async(slow, lambda f: feedback.append(f.feedback.status))
        spin_until(executor, lambda: send.done() and feedback, 10, "feedback")
        cancel = send.result().cancel_goal_async()
        spin_until(executor, cancel.done, 10, "cancel response")
        result = send.result().get_result_async()
        spin_until(executor, result.done, 10, "cancelled result")
        assert not result.result().result.success
        assert "cancelled at step" in result.result().result.error


def test_core_never_imports_rclpy():
    walk = pkgutil.walk_packages(bolt_agent.core.__path__, "bolt_agent.core.")
    modules = [m.name for m in walk]
    assert "bolt_agent.core.llm.llama.speculative.decoder" in modules  # subpackages are walked
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('rclpy', 'rosidl_runtime_py')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def _node_class(module_name: str) -> type[Node]:
    module = importlib.import_module(f"bolt_agent.nodes.{module_name}")
    classes = [
        c
        for _, c in inspect.getmembers(module, inspect.isclass)
        if issubclass(c, Node) and c.__module__ == module.__name__
    ]
    assert len(classes) == 1, f"{module_name}: expected one node class, found {classes}"
    return classes[0]


@pytest.mark.parametrize(
    "yaml_path", sorted((ROOT / "config" / "params").glob("*.yaml")), ids=lambda p: p.stem
)
def test_parameter_yaml_matches_the_declared_defaults(yaml_path):
    """Parameters are declared once in code; the YAML must not drift from them."""
    ((key, content),) = yaml.safe_load(yaml_path.read_text()).items()
    # keyed `/**/<node_name>`: the file applies under any namespace
    assert key.startswith("/**/"), f"{yaml_path.name}: {key} does not apply under a namespace"
    node_name = key.removeprefix("/**/")
    params = content["ros__parameters"]
    with ros_node("param_probe") as (probe, _):
        cls = _node_class(yaml_path.stem)
        node = cls(context=probe.context)
        try:
            assert node.get_name() == node_name
            for name, value in params.items():
                assert node.has_parameter(name), f"{yaml_path.name}: {name} is not declared"
                assert node.get_parameter(name).value == value, name
        finally:
            node.destroy_node()


def test_bootstrap_is_idempotent_and_fast():
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "bootstrap.sh")],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    assert "ready" in out and "installing" not in out and "building" not in out


def test_lock_pins_every_top_level_requirement():
    lock = (ROOT / "requirements" / "requirements.lock").read_text().lower().replace("_", "-")
    for line in (ROOT / "requirements" / "requirements.in").read_text().splitlines():
        name = line.split("#")[0].strip().split("==")[0].split("[")[0].lower()
        if name:
            assert f"\n{name}" in lock or lock.startswith(name), name


def test_colcon_finds_both_packages_with_the_documented_command():
    out = subprocess.run(
        [
            "colcon",
            "list",
            "--names-only",
            "--base-paths",
            str(ROOT),
            str(ROOT / "bolt_agent_interfaces"),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        cwd="/tmp",
    ).stdout.split()
    assert sorted(out) == ["bolt_agent", "bolt_agent_interfaces"]


def test_doctor_reports_ready_and_names_a_missing_model():
    ok = subprocess.run(
        [sys.executable, "-m", "bolt_agent.cli", "doctor"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "rmw_fastrtps_cpp" in ok.stdout and "gemma3-270m" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "bolt_agent.cli", "doctor", "--llm", "bolt-e4b-q4km"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert bad.returncode == 1
    assert "model 'bolt-e4b-q4km' missing" in bad.stdout


def test_missing_model_error_says_which_file_and_how_to_get_it():
    from bolt_agent.core.models import ModelNotFoundError, resolve_model

    with pytest.raises(ModelNotFoundError, match=r"Bolt-E4B-Q4_K_M\.gguf.*Download"):
        resolve_model("bolt-e4b-q4km")
    with pytest.raises(ModelNotFoundError, match="neither an existing file"):
        resolve_model("no-such-model")


def test_robot_requirements_use_the_same_pins():
    pins = {}
    for line in (ROOT / "requirements" / "requirements.in").read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==")
            pins[name.split("[")[0].lower()] = version
    for line in (ROOT / "requirements" / "robot.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            assert pins.get(name.lower()) == version, line

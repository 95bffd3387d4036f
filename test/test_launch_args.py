"""`ros2 launch bolt_agent bolt_agent.launch.py` with its process arguments, for real: a
``params_file`` over the installed defaults under a namespace (checked with `ros2 param get`),
``use_sim_time``, ``log_level``, a lifecycle node that cannot configure (exits, or stays
unconfigured), ``respawn``; and SIGINT to the launch's process group leaves no process behind.

Cheap nodes only: animation_node, and llm_node with a model that does not exist (it fails before
loading anything). Each test has its own namespace; everything is polled with deadlines.
"""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from bolt_agent.stack import launch_builder
from bolt_agent.stack.spec import StackSpec, effective_params, load_params
from support.launch import Launch, assert_nothing_survives, cmdline

#: names a namespaced node may still use outside its namespace (ROS-wide by convention)
GLOBAL_NAMES = {"/rosout", "/parameter_events", "/clock", "/diagnostics"}
NOTHING_ELSE = ("llm:=false", "asr:=false", "tts:=false", "perception:=false")


def ros2(*args: str, timeout: float = 30.0) -> subprocess.CompletedProcess:
    """One `ros2` CLI call without the daemon (nothing left running per domain)."""
    verb = list(args[:2])
    return subprocess.run(
        ["ros2", *verb, "--no-daemon", "--spin-time", "2", *args[2:]],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def param_get(launch: Launch, node: str, name: str, timeout: float = 60.0) -> str:
    """`ros2 param get NODE NAME`, retried until the node answers."""
    out: list[str] = []

    def answered() -> bool:
        result = ros2("param", "get", node, name)
        out[:] = [result.stdout + result.stderr]
        return result.returncode == 0 and "value is" in result.stdout

    launch.wait_for(answered, timeout, f"`ros2 param get {node} {name}` (last: {out})")
    return out[0].strip()


def test_params_file_namespace_sim_time_and_log_level(launch, tmp_path, unique_ns):
    params = tmp_path / "override.yaml"
    params.write_text(
        "/**:\n  ros__parameters:\n    feedback_rate_hz: 4.0\n"
        "/**/animation_node:\n  ros__parameters:\n    idle_after_s: 7.5\n"
    )
    stack = launch(
        "sim:=true", f"namespace:={unique_ns}", *NOTHING_ELSE, f"params_file:={params}",
        "use_sim_time:=true", "log_level:=debug",
    )  # fmt: skip
    node = f"{unique_ns}/animation_node"
    assert param_get(stack, node, "idle_after_s") == "Double value is: 7.5"
    dumped = ros2("param", "dump", node)
    assert dumped.returncode == 0, dumped.stderr
    values = yaml.safe_load(dumped.stdout)[node]["ros__parameters"]
    assert values["feedback_rate_hz"] == 4.0  # the `/**:` key
    assert values["rate_hz"] == 50.0 and values["policy"] == "preempt"  # installed defaults stay
    assert values["use_sim_time"] is True

    found: list = []

    def info_found() -> bool:  # Jazzy's discovery may need more than one --spin-time
        found[:] = [ros2("node", "info", node)]
        return found[0].returncode == 0

    stack.wait_for(info_found, 60, f"`ros2 node info {node}` (last: {found})")
    info = found[0]
    names = set(re.findall(r"^\s+(/\S+): ", info.stdout, re.M))
    assert f"{unique_ns}/animation/play" in names and f"{unique_ns}/robot/joint_states" in names
    outside = {n for n in names if not n.startswith(unique_ns + "/")} - GLOBAL_NAMES
    assert not outside, outside  # every topic, service and action moved with the node

    argv = cmdline(stack.node_pid("animation_node"))
    assert "--log-level" in argv and argv[argv.index("--log-level") + 1] == "debug", argv
    assert stack.stop() == 0, stack.log()
    assert_nothing_survives(stack)


def test_missing_model_exits_non_zero_and_launch_reports_it(launch, unique_ns):
    stack = launch(
        "sim:=true", f"namespace:={unique_ns}", "llm_model:=/nonexistent.gguf",
        "asr:=false", "tts:=false", "perception:=false", "animation:=false",
    )  # fmt: skip
    # its only node died: the launch is idle and ends
    stack.wait_for(lambda: stack.proc.poll() is not None, 120, "ros2 launch to end")
    log = stack.log()
    assert "configure failed" in log and "/nonexistent.gguf" in log, log
    assert re.search(r"\[llm_node-1\]: process has died \[pid \d+, exit code 1\b", log), log
    stack.stop()
    assert_nothing_survives(stack)


def test_respawn_restarts_a_node_that_died(launch, unique_ns):
    stack = launch(
        "sim:=true", f"namespace:={unique_ns}", "llm_model:=/nonexistent.gguf",
        "asr:=false", "tts:=false", "perception:=false", "animation:=false",
        "respawn:=true", "respawn_delay:=0.5",
    )  # fmt: skip
    started = r"\[llm_node-1\]: process started with pid \[(\d+)\]"
    stack.wait_for(
        lambda: (
            stack.log().count("configure failed") >= 2
            and len(set(re.findall(started, stack.log()))) >= 2
        ),
        180,
        "a second start of llm_node",
    )
    assert stack.proc.poll() is None  # respawning keeps the launch up
    assert stack.stop() == 0, stack.log()
    assert_nothing_survives(stack)


def test_exit_on_failure_false_keeps_the_node_unconfigured(launch, unique_ns):
    stack = launch(
        "sim:=true", f"namespace:={unique_ns}", "llm_model:=/nonexistent.gguf",
        "asr:=false", "tts:=false", "perception:=false", "animation:=false",
        "exit_on_failure:=false",
    )  # fmt: skip
    stack.wait_for(lambda: "configure failed" in stack.log(), 120, "the configure failure")
    state: list[str] = []

    def unconfigured() -> bool:
        result = ros2("lifecycle", "get", f"{unique_ns}/llm_node")
        state[:] = [result.stdout + result.stderr]
        return result.returncode == 0 and result.stdout.startswith("unconfigured")

    stack.wait_for(unconfigured, 60, f"llm_node reported unconfigured (last: {state})")
    assert "process has died" not in stack.log()
    assert stack.stop() == 0, stack.log()
    assert_nothing_survives(stack)


# -- the same rules without processes ------------------------------------------------------------


def test_user_params_file_must_exist(tmp_path):
    assert launch_builder.user_params_file("") == ""
    with pytest.raises(FileNotFoundError, match=r"nope\.yaml"):
        launch_builder.user_params_file(str(tmp_path / "nope.yaml"))
    (tmp_path / "p.yaml").write_text("/**: {ros__parameters: {}}\n")
    assert launch_builder.user_params_file(str(tmp_path / "p.yaml")) == str(tmp_path / "p.yaml")


def test_installed_params_and_params_file_apply_under_any_namespace(tmp_path):
    """The embedded runner reads the files as rcl does: ``/**/node`` and ``/**`` everywhere, a
    plain ``node`` key only in the root namespace, later keys winning."""
    assert load_params("llm_node", namespace="/robot1")["n_ctx"] == load_params("llm_node")["n_ctx"]
    user = tmp_path / "user.yaml"
    user.write_text(
        "/**:\n  ros__parameters: {n_ctx: 1024, n_batch: 64}\n"
        "/**/llm_node:\n  ros__parameters: {n_ctx: 2048}\n"
        "llm_node:\n  ros__parameters: {max_steps: 9}\n"
    )
    assert load_params("llm_node", user, "/robot1") == {"n_ctx": 2048, "n_batch": 64}
    assert load_params("llm_node", user)["max_steps"] == 9
    spec = StackSpec.from_args({"params_file": str(user), "namespace": "robot1"})
    given = effective_params(spec, "llm_node")
    assert given["n_ctx"] == 2048 and given["n_batch"] == 64 and given["top_k"] == 64
    assert "max_steps" not in load_params("llm_node", user, "/robot1")


def test_bag_topics_move_into_the_namespace(tmp_path):
    from rclpy.serialization import serialize_message
    from std_msgs.msg import String

    from bolt_agent.core.sim.bag_io import BagWriter

    writer = BagWriter(tmp_path / "bag")
    writer.add_topic("/chatter", "std_msgs/msg/String")
    writer.write("/chatter", 1, serialize_message(String(data="hi")))
    writer.close()
    bag = str(tmp_path / "bag")
    assert launch_builder.bag_remaps(bag, "") == []
    assert launch_builder.bag_remaps(bag, "robot1") == ["/chatter:=/robot1/chatter"]
    assert launch_builder.bag_remaps(str(tmp_path / "missing"), "/r") == []

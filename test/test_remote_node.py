"""llm_node with ``engine: openai`` in its own process, over real DDS, against a real
llama-cpp-python server that demands a key: speech before the tool goal, the server's time to
first token in /diagnostics, and the server killed between turns → the local fallback answers,
with a log line and a diagnostics entry. Plus ``bolt-agent doctor`` on the configured server."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import yaml
from rclpy.action import ActionServer
from rclpy.callback_groups import ReentrantCallbackGroup
from std_msgs.msg import String

from bolt_agent.nodes.qos import RELIABLE
from bolt_agent_interfaces.action import PlayAnimation
from bolt_agent_interfaces.msg import SpokenText, TurnMetrics
from support.diagnostics import Diagnostics
from support.remote_server import LlamaServer, free_port
from support.ros_helpers import ros_node, spin_until, wait_for_subscriber

KEY = "sk-bolt-test-4f1c"  # the server refuses requests without it


@pytest.fixture
def keyed_server(tmp_path):
    srv = LlamaServer(tmp_path, api_key=KEY).start()
    yield srv
    srv.stop()


def test_node_on_the_server_then_on_the_fallback_when_it_dies(
    node_process, unique_ns, keyed_server
):
    params = {
        "engine": "openai",
        "base_url": keyed_server.base_url,
        "api_key_env": "BOLT_LLM_KEY",
        "remote_fallback": "local",
        "remote_timeout_s": "60.0",  # a cold prefill on one busy core; a kill refuses at once
        "n_threads": "1",
        "n_ctx": "2048",
        "enable_thinking": "false",
        "tool_choice": "required",
        "max_steps": "1",
        "max_speech_chars": "40",
        "max_new_tokens": "96",
        "seed": "11",
        "tool_server_wait_s": "1.0",
        "diagnostics_period_s": "0.2",
    }
    args = ["-m", "bolt_agent.nodes.llm_node", "--ros-args", "-r", f"__ns:={unique_ns}"]
    for k, v in params.items():
        args += ["-p", f"{k}:={v}"]
    llm = node_process(*args, name="llm_node", env={"BOLT_LLM_KEY": KEY})
    with ros_node("recorder", unique_ns) as (node, ex):
        said: list[tuple[float, SpokenText]] = []
        goals: list[float] = []

        def execute(goal_handle):
            goals.append(time.monotonic())
            goal_handle.succeed()
            return PlayAnimation.Result(success=True, message="played")

        node.create_subscription(
            SpokenText, "speech/say", lambda m: said.append((time.monotonic(), m)), RELIABLE
        )
        ActionServer(
            node, PlayAnimation, "animation/play", execute, callback_group=ReentrantCallbackGroup()
        )
        metrics: dict[str, TurnMetrics] = {}
        node.create_subscription(
            TurnMetrics, "bolt/turn_metrics", lambda m: metrics.update({m.turn_id: m}), RELIABLE
        )
        diag = Diagnostics(node, unique_ns)
        prompt = node.create_publisher(String, "teleop/prompt", RELIABLE)
        wait_for_subscriber(ex, prompt, timeout=90)

        def over(turn: str) -> bool:
            return any(m.turn_id == turn and m.is_last_in_turn for _, m in said)

        prompt.publish(String(data="Please look around."))
        spin_until(ex, lambda: over("teleop-1"), 90, lambda: f"turn 1\n{llm.log()[-3000:]}")
        speech = [t for t, m in said if m.turn_id == "teleop-1" and m.text]
        assert speech and goals and speech[0] < goals[0]  # spoken first, over the network
        _, _, values = diag.wait(
            ex, "llm_node", lambda lv, msg, v: v.get("remote_ttft_s"), 10, [llm]
        )
        assert values["device"] == "remote" and values["remote_fallbacks"] == "0"
        spin_until(ex, lambda: "teleop-1" in metrics, 10, "turn 1's metrics")
        assert metrics["teleop-1"].outcome == "ok" and metrics["teleop-1"].network_ttft_s > 0

        keyed_server.kill()  # the server dies; the robot keeps talking
        prompt.publish(String(data="Please look around again."))
        spin_until(ex, lambda: over("teleop-2"), 120, lambda: f"turn 2\n{llm.log()[-3000:]}")
        assert [m for _, m in said if m.turn_id == "teleop-2" and m.text]
        # one fallback per decode: the reply guard samples a repeated first sentence again,
        # and each try asks the server first (on an Intel Xeon the turn took three)
        _, _, values = diag.wait(
            ex, "llm_node", lambda lv, msg, v: int(v.get("remote_fallbacks", 0)) >= 1, 30, [llm]
        )
        assert values.get("failures.remote_fallback") == values["remote_fallbacks"]
        spin_until(ex, lambda: "teleop-2" in metrics, 10, "turn 2's metrics")
        assert metrics["teleop-2"].outcome == "ok"  # answered, by the local engine
        assert metrics["teleop-2"].network_ttft_s == 0.0
    log = llm.log()
    assert "LLM server failed" in log and "refused" in log
    assert KEY not in log  # the key is named in the parameters, never shown
    assert llm.alive()


def _doctor(tmp_path, base_url: str, env_key: str | None) -> subprocess.CompletedProcess:
    params = {
        "/**/llm_node": {
            "ros__parameters": {
                "engine": "openai",
                "base_url": base_url,
                "api_key_env": "BOLT_DOC_KEY",
            }
        }
    }
    path = tmp_path / "llm_remote.yaml"
    path.write_text(yaml.safe_dump(params))
    env = dict(os.environ, COLUMNS="250")
    env.pop("BOLT_DOC_KEY", None)
    if env_key is not None:
        env["BOLT_DOC_KEY"] = env_key
    cmd = [sys.executable, "-m", "bolt_agent.cli", "doctor", "--params-file", str(path)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


def test_doctor_checks_the_configured_server(tmp_path, keyed_server):
    ok = _doctor(tmp_path, keyed_server.base_url, KEY)
    assert "LLM server" in ok.stdout and "first token" in ok.stdout, ok.stdout
    assert "problem: LLM server" not in ok.stdout.replace("\n", " ")
    assert KEY not in ok.stdout
    wrong_key = _doctor(tmp_path, keyed_server.base_url, "sk-wrong")
    assert wrong_key.returncode != 0 and "problem: LLM server" in wrong_key.stdout
    assert "HTTP 401" in wrong_key.stdout.replace("\n", " ")
    dead = _doctor(tmp_path, f"http://127.0.0.1:{free_port()}/v1", KEY)
    assert dead.returncode != 0 and "refused" in dead.stdout.replace("\n", " ")

"""The real `ros2` command line against `ros2 launch bolt_agent bolt_agent.launch.py sim:=true`.

Two launches, one per namespace case, each shared by its tests (module-scoped, in file order):

- root namespace: every line of README.md's "Teleop override from an operator's terminal" block,
  read from the README and run verbatim in bash, with its effect observed by a probe node;
- a unique namespace: all nodes listed and the lifecycle nodes active, `ros2 param describe` /
  `set`, `ros2 lifecycle set` pausing and resuming llm_node, a `ros2 topic pub` prompt answered
  on `speech/say` (seen by `ros2 topic echo`), `ros2 action send_goal` playing an animation.

Each launch ends with SIGINT (Ctrl-C to the group for the first, to `ros2 launch` alone for the
second): every node it started must be gone within 10 s, none killed by escalation.

The bundled LLM is a tiny base model: its words are nonsense, so turns are checked by structure
(a SpokenText for the turn, a tool event), never by content. `tool_choice: required` (set with
`ros2 param set`) makes every turn's first step call the motion tool, so the override hold shows.
"""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import time
import uuid
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from std_msgs.msg import Bool, String
from std_srvs.srv import Trigger

from bolt_agent.nodes.action_client import ActionClient
from bolt_agent.nodes.llm_params import LlmParams
from bolt_agent.nodes.messages import tool_event_dict
from bolt_agent.nodes.params import descriptor, parameter_fields
from bolt_agent.nodes.qos import AUDIO, LATCHED, RELIABLE
from bolt_agent.stack.table import defaults, select
from bolt_agent_interfaces.action import PlayAnimation
from bolt_agent_interfaces.msg import (
    AnimationEvent,
    AudioChunk,
    JointCommand,
    SpokenText,
    ToolEvent,
    TtsState,
    TurnMetrics,
)
from support.ros_helpers import (
    Ros2Launch,
    Streaming,
    ros2,
    shell,
    spinning_node,
    stop_ros2_daemon,
    wait_until,
)

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SECTION = "### Teleop override from an operator's terminal"
LAUNCH = ["bolt_agent", "bolt_agent.launch.py"]
#: the root-namespace stack needs no microphone or camera path for the teleop lines
ROOT_ARGS = {"sim": "true", "asr": "false", "perception": "false"}
BRING_UP_S = 150.0  # model loads on 2 shared cores
HELD = "held: the operator has taken over"

#: every line of the README's teleop block: (verb, topic, text its values contain)
TELEOP_LINES = {
    "override_on": ("pub", "/teleop/override", "data: true"),
    "override_off": ("pub", "/teleop/override", "data: false"),
    "joint_command": ("pub", "/teleop/joint_command", ""),
    "animation": ("pub", "/teleop/animation", ""),
    "say": ("pub", "/teleop/say", ""),
    "prompt": ("pub", "/teleop/prompt", ""),
    "mute": ("pub", "/teleop/mute", "data: true"),
    "echo_override_state": ("echo", "/teleop/override_state", ""),
}


# --- the README --------------------------------------------------------------------------------
def readme_teleop_block() -> list[str]:
    text = README.read_text()
    assert SECTION in text, f"README.md has no {SECTION!r} section"
    section = text.split(SECTION, 1)[1]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    return [line.strip() for line in block.splitlines() if line.strip()]


def _matches(line: str, key: str) -> bool:
    verb, topic, contains = TELEOP_LINES[key]
    tokens = shlex.split(line, comments=True)
    return tokens[:3] == ["ros2", "topic", verb] and topic in tokens and contains in tokens[-1]


def readme_line(key: str) -> str:
    found = [line for line in readme_teleop_block() if _matches(line, key)]
    assert len(found) == 1, f"README teleop block: {len(found)} lines for {key}: {found}"
    return found[0]


def readme_values(key: str) -> dict:
    """The message values (the YAML argument) of a README `ros2 topic pub` line."""
    return yaml.safe_load(shlex.split(readme_line(key), comments=True)[-1])


def assert_published(run: subprocess.CompletedProcess, what: str) -> None:
    """`ros2 topic pub` succeeded. A SIGSEGV after the message went out is tolerated with a
    warning: Fast DDS (Kilted wheels) now and then crashes in its `dds.tls.replies` thread while
    the CLI process exits (seen in the kernel log); the message was sent, the effect is checked."""
    if run.returncode == -signal.SIGSEGV and "publishing #1" in run.stdout:
        warnings.warn(f"`{what}` crashed (SIGSEGV) at exit after publishing", stacklevel=2)
        return
    assert run.returncode == 0, f"`{what}` failed ({run.returncode}):\n{run.stdout}{run.stderr}"


def run_readme(key: str) -> str:
    line = readme_line(key)
    run = shell(line, timeout=60)
    assert_published(run, line)
    return run.stdout


def test_readme_teleop_block_is_what_these_tests_run():
    """Each README teleop line is one of the lines tested below, and each is there once."""
    lines = readme_teleop_block()
    for line in lines:
        keys = [k for k in TELEOP_LINES if _matches(line, k)]
        assert len(keys) == 1, f"README teleop line not covered by a test: {line}"
    assert len(lines) == len(TELEOP_LINES)


def llm_lines(log: str, n: int = 40) -> str:
    """The last ``n`` lines llm_node wrote into a launch log."""
    return "\n".join([line for line in log.splitlines() if "llm_node" in line][-n:])


# --- the stack ---------------------------------------------------------------------------------
def expected_nodes(args: dict[str, str]) -> tuple[set[str], set[str]]:
    """(every node, the lifecycle ones), fully qualified, that the launch arguments start."""
    plan = select({**defaults(), **args})
    ns = "/" + args.get("namespace", "").strip("/")
    prefix = ns.rstrip("/") + "/"
    return {prefix + e.name for e, _ in plan}, {prefix + e.name for e, _ in plan if e.lifecycle}


class Probe:
    """What the stack publishes, collected by a node spun in the background."""

    def __init__(self, node, ns: str):
        self.node, self.ns = node, ns
        self.commands: list[JointCommand] = []
        self.events: list[AnimationEvent] = []
        self.said: list[SpokenText] = []
        self.tool_events: list[dict] = []
        self.tts: list[TtsState] = []
        self.metrics: list[TurnMetrics] = []
        self.audio_chunks = 0
        self.override_state: list[bool] = []
        self.stops: list[str] = []

        def sub(msg_type, topic, callback, qos=RELIABLE):
            node.create_subscription(msg_type, self.topic(topic), callback, qos)

        sub(JointCommand, "robot/joint_commands", self.commands.append)
        sub(AnimationEvent, "animation/events", self.events.append)
        sub(SpokenText, "speech/say", self.said.append)
        sub(ToolEvent, "llm/tool_events", lambda m: self.tool_events.append(tool_event_dict(m)))
        sub(TtsState, "tts/state", self.tts.append, LATCHED)
        sub(TurnMetrics, "bolt/turn_metrics", self.metrics.append)
        sub(AudioChunk, "audio/output", self._on_audio, AUDIO)
        sub(Bool, "teleop/override_state", lambda m: self.override_state.append(m.data), LATCHED)
        sub(String, "tts/stop", lambda m: self.stops.append(m.data))
        self.animation = ActionClient(node, PlayAnimation, self.topic("animation/play"))

    def topic(self, name: str) -> str:
        return f"{self.ns.rstrip('/')}/{name}"

    def _on_audio(self, _msg: AudioChunk) -> None:
        self.audio_chunks += 1

    def teleop_turns(self) -> set[str]:
        """Teleop turns llm_node has spoken, called a tool or finished in."""
        ids = {m.turn_id for m in self.said}
        ids |= {e["turn_id"] for e in self.tool_events}
        ids |= {m.turn_id for m in self.metrics if m.source == "llm"}
        return {i for i in ids if i.startswith("teleop-")}

    def new_turn(self, before: set[str], timeout: float, log: Callable[[], str] = str) -> str:
        """The first teleop turn not in ``before``; ``log`` (the launch's) goes into a failure."""
        wait_until(
            lambda: self.teleop_turns() - before,
            timeout,
            lambda: f"a new teleop turn; llm_node's last lines:\n{llm_lines(log())}",
        )
        return sorted(self.teleop_turns() - before, key=lambda i: int(i.split("-")[1]))[0]

    def tool_event(self, turn_id: str, timeout: float) -> dict:
        wait_until(
            lambda: any(e["turn_id"] == turn_id for e in self.tool_events),
            timeout,
            f"a tool event of {turn_id}",
        )
        return next(e for e in self.tool_events if e["turn_id"] == turn_id)

    def turn_finished(self, turn_id: str) -> bool:
        return any(m.turn_id == turn_id and m.source == "llm" for m in self.metrics)

    def send_goal(self, name: str, source: str, timeout: float = 20.0):
        assert self.animation.wait_for_server(timeout_sec=timeout), "no animation/play server"
        future = self.animation.send_goal_async(PlayAnimation.Goal(name=name, source=source))
        wait_until(future.done, timeout, f"the answer to goal {name!r} ({source})")
        return future.result()


@dataclass
class Stack:
    launch: Ros2Launch
    probe: Probe
    nodes: set[str]
    lifecycle: set[str]
    node_list: str
    states: dict[str, str]
    ns: str  # "" for the root namespace
    read_only: list[str] = field(default_factory=list)  # found by `ros2 param describe`


@contextmanager
def bring_up(args: dict[str, str], log_dir: Path, probe_name: str):
    """Start `ros2 launch` with ``args`` and a probe; wait until every node is up and active."""
    nodes, lifecycle = expected_nodes(args)
    ns = args.get("namespace", "")
    launch_args = [*LAUNCH, *(f"{k}:={v}" for k, v in args.items())]
    with spinning_node(probe_name) as node:
        probe = Probe(node, "/" + ns if ns else "")
        with Ros2Launch(launch_args, log_dir / "launch.log") as launch:
            t0 = time.monotonic()
            listing = launch.wait_for_nodes(nodes, BRING_UP_S)
            states = launch.wait_active(lifecycle, BRING_UP_S - (time.monotonic() - t0))
            print(f"{' '.join(launch_args)}: up in {time.monotonic() - t0:.1f}s")
            # from here on the CLI asks the daemon, warmed up now: ~0.5 s a call, not ~3 s
            ros2("daemon", "start", timeout=30)
            wait_until(
                lambda: nodes <= set(ros2("node", "list", timeout=30).stdout.split()),
                30,
                "the ros2 daemon to list every node",
            )
            yield Stack(launch, probe, nodes, lifecycle, listing, states, ns)


@pytest.fixture(scope="module", autouse=True)
def stop_the_daemon():
    """`ros2 topic echo` (as the README writes it) starts a daemon for this domain: stop it."""
    yield
    hung, said = stop_ros2_daemon()
    if hung:  # upstream's teardown, not this stack's: reported, not failed
        warnings.warn(said, stacklevel=1)


@pytest.fixture(scope="module")
def operator(tmp_path_factory):
    """The stack in the root namespace, as the README's lines address it; every turn's first
    step calls the motion tool, without thinking (set at runtime with `ros2 param set`)."""
    with bring_up(ROOT_ARGS, tmp_path_factory.mktemp("root_stack"), "operator_probe") as stack:
        for name, value in (("tool_choice", "required"), ("enable_thinking", "false")):
            run = ros2("param", "set", "/llm_node", name, value)
            assert "Set parameter successful" in run.stdout, run.stdout + run.stderr
        yield stack


def readme_prompt_turn(stack: Stack, before: set[str]) -> str:
    """Run the README's prompt line; the id of the teleop turn llm_node starts for it.

    llm_node logs each prompt it takes. When none is logged within 30 s the message never
    reached it: a reliable sample is repaired only while its writer lives (seen once in CI when
    the README's lines kept it 0.1 s; they keep it 3 s now). The line is then run once more,
    with a warning: what is tested is what the node does with the prompt."""
    received = "teleop/prompt: turn teleop-"
    seen = stack.launch.log().count(received)

    def arrived() -> bool:
        return stack.launch.log().count(received) > seen

    run_readme("prompt")
    try:
        wait_until(arrived, 30, "llm_node to log the prompt")
    except AssertionError:
        warnings.warn("the README prompt never reached llm_node: sent again", stacklevel=2)
        run_readme("prompt")
        wait_until(
            arrived, 30, lambda: f"llm_node to log the prompt\n{llm_lines(stack.launch.log())}"
        )
    return stack.probe.new_turn(before, 120, stack.launch.log)


# --- README teleop lines, root namespace -------------------------------------------------------
def test_readme_override_is_latched_and_holds_llm_motion(operator):
    probe = operator.probe
    before = probe.teleop_turns()
    run_readme("override_on")
    # the README's echo line prints the latched state (a late joiner gets it)
    with Streaming(readme_line("echo_override_state")) as echo:
        echo.wait_for("data: true", 30)
    # animation_node refuses llm goals
    assert not probe.send_goal("happy_nod", "llm").accepted
    # llm_node got the override too: its motion tool is refused before any goal is sent
    turn = readme_prompt_turn(operator, before)
    event = probe.tool_event(turn, 120)
    assert not event["ok"] and event["error"] == HELD, event
    run_readme("override_off")
    with Streaming(readme_line("echo_override_state")) as echo:
        echo.wait_for("data: false", 30)
    wait_until(lambda: probe.override_state[-1:] == [False], 10, "override_state false")


def test_readme_joint_command_drives_the_joints(operator):
    probe = operator.probe
    values = readme_values("joint_command")
    target = dict(zip(values["name"], values["position"], strict=True))
    since = len(probe.commands)
    run_readme("joint_command")

    def reached() -> bool:
        for m in probe.commands[since:]:
            pose = dict(zip(m.name, m.position, strict=True))
            if m.origin == "teleop" and all(abs(pose[j] - v) < 1e-3 for j, v in target.items()):
                return True
        return False

    wait_until(reached, 20, f"robot/joint_commands at {target} from teleop")


def test_readme_animation_plays(operator):
    probe = operator.probe
    name = readme_values("animation")["data"]
    since_events, since_cmds = len(probe.events), len(probe.commands)
    run_readme("animation")
    accepted = ("accepted", name, "teleop")
    wait_until(
        lambda: accepted in [(e.event, e.name, e.source) for e in probe.events[since_events:]],
        20,
        f"{accepted} on events",
    )

    def poses() -> set[tuple[float, ...]]:
        return {tuple(m.position) for m in probe.commands[since_cmds:] if m.origin == "teleop"}

    wait_until(lambda: len(poses()) > 10, 20, f"{name} moving the joints (teleop)")


def test_readme_say_is_spoken(operator):
    probe = operator.probe
    text = readme_values("say")["data"]
    audio_before = probe.audio_chunks

    def spoken() -> bool:
        return any(
            s.turn_id.startswith("teleop-say-") and s.spoken_text == text and not s.speaking
            for s in probe.tts
        )

    def arrived() -> bool:  # tts_node publishes a state for every say it takes
        return any(s.turn_id.startswith("teleop-say-") for s in probe.tts)

    run_readme("say")
    try:
        wait_until(arrived, 30, "a teleop-say state")
    except AssertionError:  # never reached tts_node (see readme_prompt_turn): sent once more
        tts_lines = [line for line in operator.launch.log().splitlines() if "tts_node" in line]
        warnings.warn(
            "the README say never reached tts_node: sent again; its last lines:\n"
            + "\n".join(tts_lines[-20:]),
            stacklevel=2,
        )
        run_readme("say")
    wait_until(spoken, 30, lambda: f"tts/state having said {text!r}; last: {probe.tts[-3:]}")
    assert probe.audio_chunks > audio_before  # sim: the voice goes out on audio/output


def test_readme_prompt_is_answered_with_speech(operator):
    probe = operator.probe
    turn = readme_prompt_turn(operator, probe.teleop_turns())
    wait_until(
        lambda: any(m.turn_id == turn and m.text for m in probe.said),
        120,
        f"speech/say for {turn}",
    )
    event = probe.tool_event(turn, 120)  # override is off again: not held by llm_node
    assert event["error"] != HELD, event


def test_readme_mute_holds_speech_and_tools(operator):
    probe = operator.probe
    run_readme("mute")
    before = probe.teleop_turns()
    since_events = len(probe.events)
    turn = readme_prompt_turn(operator, before)
    wait_until(
        lambda: probe.turn_finished(turn),
        180,
        lambda: f"{turn} to finish while muted:\n{llm_lines(operator.launch.log())}",
    )
    assert [m for m in probe.said if m.turn_id == turn] == []
    assert [e for e in probe.tool_events if e["turn_id"] == turn] == []
    llm_goals = [
        e for e in probe.events[since_events:] if e.event == "accepted" and e.source == "llm"
    ]
    assert llm_goals == []


def test_ctrl_c_stops_the_root_stack(operator):
    log = operator.launch.log()
    assert "incompatible QoS" not in log  # the operator's volatile publishers match quietly
    result = operator.launch.stop(group=True)
    result.check()
    assert_clean_exit(operator.launch.log(), operator.nodes, sigint_deaths=True)


def assert_clean_exit(log: str, nodes: set[str], sigint_deaths: bool = False) -> None:
    """No node needed SIGTERM/SIGKILL; each finished cleanly. ``sigint_deaths``: a node may
    also have died of SIGINT (exit code -2): on Ctrl-C to the group a node gets SIGINT twice
    (from the terminal and from `ros2 launch`), and the second one can end its shutdown."""
    assert "escalating to" not in log, log[-3000:]
    done = log.count("process has finished cleanly")
    if sigint_deaths:
        done += len(re.findall(r"process has died \[pid \d+, exit code -2,", log))
    assert done == len(nodes), log[-3000:]


# --- ros2 CLI verbs, a unique namespace --------------------------------------------------------
@pytest.fixture(scope="module")
def ns_stack(tmp_path_factory):
    ns = f"t_cli_{uuid.uuid4().hex[:8]}"
    args = {"sim": "true", "namespace": ns}
    with bring_up(args, tmp_path_factory.mktemp("ns_stack"), "ns_probe") as stack:
        yield stack


def test_launch_lists_every_node_with_lifecycle_nodes_active(ns_stack):
    assert ns_stack.nodes <= set(ns_stack.node_list.split())
    assert len(ns_stack.nodes) >= 5  # animation, perception, tts, asr, llm
    assert ns_stack.states == {n: "active [3]" for n in ns_stack.lifecycle}


def _describe_blocks(text: str) -> dict[str, str]:
    blocks = text.split("Parameter name: ")[1:]
    return {b.split("\n", 1)[0].strip(): b for b in blocks}


def test_param_describe_shows_descriptions_ranges_and_read_only(ns_stack):
    node = f"/{ns_stack.ns}/llm_node"
    names = ros2("param", "list", node).stdout.split()
    assert "n_ctx" in names, names
    run = ros2("param", "describe", node, *names)
    assert run.returncode == 0, run.stdout + run.stderr
    blocks = _describe_blocks(run.stdout)
    for f in parameter_fields(LlmParams):
        want = descriptor(f)
        block = blocks[f.name]
        assert f"  Description: {want.description}\n" in block, block
        for r in [*want.integer_range, *want.floating_point_range][:1]:
            assert f"    Min value: {r.from_value}\n" in block, block
            assert f"    Max value: {r.to_value}\n" in block, block
        if want.additional_constraints:
            assert f"    Additional constraints: {want.additional_constraints}" in block
    assert blocks["n_ctx"].count("[load-time: applied at configure]") == 1
    assert "[load-time" not in blocks["enable_thinking"]
    read_only = [n for n, b in blocks.items() if "    Read only: true\n" in b]
    assert read_only, "no read-only parameter shown"
    ns_stack.read_only = read_only


def test_param_set_refusals_say_why(ns_stack):
    node = f"/{ns_stack.ns}/llm_node"

    def set_(name: str, value: str) -> str:
        for _ in range(3):  # each run is a new process that must discover the node again
            run = ros2("param", "set", node, name, value)
            out = (run.stdout + run.stderr).strip()
            # the CLI's own 5 s wait for the node's parameter services (seen once on Jazzy
            # under CI load): the node never saw the request, so ask again
            if not out.startswith("Wait for service timed out"):
                return out
        return out

    out = set_("n_ctx", "2048")
    assert out.startswith("Setting parameter failed: n_ctx is a load-time parameter"), out
    assert "configure" in out
    out = set_("top_p", "1.5")
    assert out.startswith("Setting parameter failed") and "top_p" in out, out
    read_only = ns_stack.read_only or ["diagnostics_period_s"]
    out = set_(read_only[0], "5.0")
    assert out.startswith("Setting parameter failed") and "read-only" in out, out
    # a runtime knob is taken (and keeps the next test's turn short)
    assert set_("enable_thinking", "false") == "Set parameter successful"


def test_lifecycle_pause_resume_and_a_prompt_answered_on_speech_say(ns_stack):
    ns = ns_stack.ns
    node = f"/{ns}/llm_node"

    def lifecycle(*args: str) -> str:
        run = ros2("lifecycle", *args, timeout=60)
        return (run.stdout + run.stderr).strip()

    assert lifecycle("set", node, "deactivate") == "Transitioning successful"
    assert lifecycle("get", node) == "inactive [2]"
    converse = ros2(
        "action",
        "send_goal",
        f"/{ns}/llm/converse",
        "bolt_agent_interfaces/action/Converse",
        "{prompt: 'Are you there?', use_defaults: true}",
        timeout=60,
    )
    # an inactive node takes no goal: rejected, and logged (counted as ignored_inactive)
    assert "Goal was rejected" in converse.stdout, converse.stdout
    wait_until(
        lambda: "action llm/converse: ignored, the node is not active" in ns_stack.launch.log(),
        10,
        "llm_node's log of the rejected goal",
    )
    # (an rclpy client: the shared ros2cli's `service call` needs a newer rclpy than Jazzy's)
    client = ns_stack.probe.node.create_client(Trigger, f"/{ns}/llm/cancel")
    wait_until(client.service_is_ready, 30, "the llm/cancel service")
    future = client.call_async(Trigger.Request())
    wait_until(future.done, 30, "llm/cancel's answer")
    answer = future.result()
    assert not answer.success and answer.message == "the node is not active", answer
    assert lifecycle("set", node, "activate") == "Transitioning successful"
    assert lifecycle("get", node) == "active [3]"
    # resumed: a prompt from `ros2 topic pub` is answered on speech/say (`ros2 topic echo`)
    say = f"/{ns}/speech/say"
    probe_node = ns_stack.probe.node
    subscribers = probe_node.count_subscribers(say)
    echo_line = f"ros2 topic echo {say} bolt_agent_interfaces/msg/SpokenText"
    with Streaming(echo_line) as echo:
        wait_until(lambda: probe_node.count_subscribers(say) > subscribers, 30, "the echo")
        pub = ros2(
            "topic",
            "pub",
            "--once",
            "--keep-alive",  # as the README's lines: a missed sample is repaired while it lives
            "3",
            f"/{ns}/teleop/prompt",
            "std_msgs/msg/String",
            "{data: 'What can you see?'}",
        )
        assert_published(pub, "ros2 topic pub --once .../teleop/prompt")
        echo.wait_for("turn_id: teleop-1", 120)
        out = echo.wait_for("is_last_in_turn: ", 10)  # the whole SpokenText
    assert "\ntext: " in out.split("turn_id: teleop-1", 1)[1], out


def test_action_send_goal_plays_an_animation(ns_stack):
    """`ros2 action send_goal` has no timeout of its own (ros2/ros2cli#1065): when the goal's
    response is lost between a just-discovered client and the server (a fresh-clone run waited
    60 s after "Sending goal:" while every other test passed), it waits forever. The
    command is then run once more, with a warning: what is tested is the server's answer."""
    since = len(ns_stack.probe.commands)
    args = (
        "action",
        "send_goal",
        f"/{ns_stack.ns}/animation/play",
        "bolt_agent_interfaces/action/PlayAnimation",
        "{name: happy_nod, source: teleop}",
    )
    try:
        run = ros2(*args, timeout=45)
    except subprocess.TimeoutExpired as exc:
        output = exc.output.decode() if isinstance(exc.output, bytes) else exc.output
        warnings.warn(
            f"ros2 action send_goal hung; sent again. It had said: {output}", stacklevel=1
        )
        run = ros2(*args, timeout=60)
    assert "Goal finished with status: SUCCEEDED" in run.stdout, run.stdout + run.stderr
    assert "success: true" in run.stdout
    assert len(ns_stack.probe.commands) > since


def test_sigint_to_ros2_launch_stops_every_node(ns_stack):
    result = ns_stack.launch.stop(group=False)  # to `ros2 launch` alone: it stops its nodes
    result.check()
    assert_clean_exit(ns_stack.launch.log(), ns_stack.nodes)

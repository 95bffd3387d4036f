"""The node table: which nodes exist, how each is started, and how arguments route them.

Plain data and pure functions (no `launch`, no `rclpy`): the one place that decides the node set,
each node's executable / module / class / parameter file, the switch that turns it on, and the
simulation routing (audio and camera through topics). Read by ``stack.launch_plan`` (the
`ros2 launch` files) and by ``stack.spec`` (the embedded runner), so both start the same nodes
with the same routing for the same arguments (``test/test_stack_table.py`` checks it).

A node runs when its switch argument is true; ``sim`` (or ``use_mic:=false`` /
``use_camera:=false``) moves audio and camera to topics, ``bag`` replays a recording into them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: launch argument → (default, description); the embedded runner takes the same names
ARGUMENTS: dict[str, tuple[str, str]] = {
    "profile": ("reachy_mini", "reachy_mini | blacksmith_npc (persona + tools)"),
    "namespace": ("", "namespace for every node"),
    "sim": ("false", "simulation: audio in/out and camera through topics, no devices"),
    "use_mic": ("true", "false: ASR listens to audio/input instead of the microphone"),
    "use_camera": ("true", "false: perception reads camera/image_raw instead of a camera"),
    "camera": ("0", "OpenCV source: device index, video file or GStreamer pipeline"),
    "bag": ("", "rosbag2 to replay into the stack (implies sim inputs)"),
    "llm_model": ("", "LLM model name from config/models.yaml or a GGUF path"),
    "asr_model": ("", "ASR model name or CTranslate2 directory"),
    "tts_model": ("", "Piper voice name or .onnx path"),
    "n_gpu_layers": ("0", "LLM layers on the GPU (-1 = all, Jetson)"),
    "robot": (
        "sim",
        "sim (an ideal robot in the process) | reachy_mini (Pollen's daemon already running: the "
        "real robot) | reachy_mini_sim (starts Pollen's daemon in MuJoCo on loopback, stopped "
        "with the launch)",
    ),
    "reachy_host": ("localhost", "robot reachy_mini: the daemon's host"),
    "reachy_port": ("8000", "robot reachy_mini / reachy_mini_sim: the daemon's port"),
    "llm": ("true", "start llm_node"),
    "asr": ("true", "start asr_node"),
    "tts": ("true", "start tts_node"),
    "animation": ("true", "start animation_node"),
    "perception": ("true", "start perception_node"),
    "game_state": ("auto", "start game_state_node (auto: with the blacksmith_npc profile)"),
    # every node alike (the embedded runner applies params_file and use_sim_time; the others
    # are about processes and only `ros2 launch` uses them)
    "params_file": (
        "",
        "YAML of parameters applied last, over the installed config/params/<node>.yaml and the "
        "other arguments (keys /**/<node_name>: or /**: apply under any namespace)",
    ),
    "use_sim_time": ("false", "every node takes its time from /clock"),
    "autostart": (
        "true",
        "lifecycle nodes configure and activate themselves; false: they wait, unconfigured, "
        "for `ros2 lifecycle set` (or a lifecycle manager)",
    ),
    "log_level": ("info", "log level of every node: debug | info | warn | error | fatal"),
    "respawn": ("false", "restart a node whose process exits (a crash, a failed configure)"),
    "respawn_delay": ("2.0", "seconds before a respawn"),
    "exit_on_failure": (
        "true",
        "a lifecycle node that cannot configure or activate at start exits with status 1 "
        "(false: it stays up, unconfigured, for `ros2 lifecycle`)",
    ),
}


@dataclass(frozen=True)
class NodeEntry:
    name: str  # node name = console script (executable) = module bolt_agent.nodes.<name>
    cls: str  # the node class in that module
    switch: str  # argument that turns it on/off ("auto": decided by ``auto_profiles``)
    lifecycle: bool
    from_args: dict[str, str] = field(default_factory=dict)  # parameter ← argument
    #: simulation routing: (parameter, value, device argument) — the parameter takes the value
    #: with ``sim``/``bag``, or when the device argument (if any, e.g. ``use_mic``) is false
    sim_params: tuple[tuple[str, str, str], ...] = ()
    auto_profiles: tuple[str, ...] = ()  # switch "auto": on with these profiles
    #: parameters computed from several arguments (e.g. the robot backend from ``robot``)
    derive: Callable[[dict[str, str]], dict[str, Any]] | None = None

    @property
    def executable(self) -> str:
        return self.name

    @property
    def module(self) -> str:
        return f"bolt_agent.nodes.{self.name}"

    @property
    def params_file(self) -> str:
        """Relative to the config directory (``config/`` here, ``share/bolt_agent/config``)."""
        return f"params/{self.name}.yaml"


ROBOTS = ("sim", "reachy_mini", "reachy_mini_sim")


def robot_params(args: dict[str, str]) -> dict[str, Any]:
    """animation_node's backend from ``robot``: the simulated daemon always on loopback."""
    robot = args["robot"].strip()
    if robot not in ROBOTS:
        raise ValueError(f"robot must be one of {', '.join(ROBOTS)}, not {robot!r}")
    if robot == "sim":
        return {"backend": "sim"}
    host = "127.0.0.1" if robot == "reachy_mini_sim" else args["reachy_host"]
    return {"backend": "reachy_mini", "reachy_host": host, "reachy_port": int(args["reachy_port"])}


#: every node, in bring-up order (cheap nodes first, the LLM last: its load is the longest)
NODES: tuple[NodeEntry, ...] = (
    NodeEntry("animation_node", "AnimationNode", "animation", True, derive=robot_params),
    NodeEntry(
        "game_state_node", "GameStateNode", "game_state", False, auto_profiles=("blacksmith_npc",)
    ),
    NodeEntry(
        "perception_node",
        "PerceptionNode",
        "perception",
        True,
        {"camera": "camera"},
        sim_params=(("camera", "topic", "use_camera"),),
    ),
    NodeEntry(
        "tts_node",
        "TtsNode",
        "tts",
        True,
        {"model": "tts_model"},
        sim_params=(("audio_sink", "topic", ""),),
    ),
    NodeEntry(
        "asr_node",
        "AsrNode",
        "asr",
        True,
        {"model": "asr_model"},
        sim_params=(("audio_source", "topic", "use_mic"),),
    ),
    NodeEntry(
        "llm_node",
        "LlmNode",
        "llm",
        True,
        {"profile": "profile", "model": "llm_model", "n_gpu_layers": "n_gpu_layers"},
    ),
)

BY_NAME: dict[str, NodeEntry] = {e.name: e for e in NODES}

#: parameters whose argument string is converted before it reaches the node
_INT_PARAMS = {"n_gpu_layers"}

_TRUE = {"true", "1", "yes", "on"}


def truthy(value: str) -> bool:
    return value.strip().lower() in _TRUE


def defaults() -> dict[str, str]:
    """Every argument at its default value."""
    return {k: v for k, (v, _) in ARGUMENTS.items()}


def is_sim(args: dict[str, str]) -> bool:
    """Simulated inputs: ``sim:=true``, or a bag replayed into the stack."""
    return truthy(args["sim"]) or bool(args["bag"])


def switched_on(entry: NodeEntry, args: dict[str, str]) -> bool:
    switch = args[entry.switch]
    if switch == "auto":
        return args["profile"] in entry.auto_profiles
    return truthy(switch)


def node_params(entry: NodeEntry, args: dict[str, str]) -> dict[str, Any]:
    """The parameters the arguments give this node: its ``from_args``, then the sim routing."""
    params: dict[str, Any] = {}
    for param, arg in entry.from_args.items():
        value = args[arg]
        if value == "":
            continue  # empty argument: the parameter file decides
        params[param] = int(value) if param in _INT_PARAMS else value
    if entry.derive is not None:
        params.update(entry.derive(args))
    sim = is_sim(args)
    for param, value, device_arg in entry.sim_params:
        if sim or (device_arg and not truthy(args[device_arg])):
            params[param] = value
    return params


def every_node_params(args: dict[str, str]) -> dict[str, Any]:
    """Parameters every node gets from the arguments (after its own, before ``params_file``)."""
    return {"use_sim_time": truthy(args["use_sim_time"])}


def select(
    args: dict[str, str], only: list[str] | None = None
) -> list[tuple[NodeEntry, dict[str, Any]]]:
    """Nodes to start (in bring-up order) and their parameter overrides, given argument values.

    ``only``: exactly these nodes, whatever their switches say.
    """
    unknown = set(only or ()) - set(BY_NAME)
    if unknown:
        raise ValueError(f"unknown node(s): {', '.join(sorted(unknown))}")
    out = []
    for entry in NODES:
        if only is not None:
            if entry.name not in only:
                continue
        elif not switched_on(entry, args):
            continue
        out.append((entry, node_params(entry, args)))
    return out

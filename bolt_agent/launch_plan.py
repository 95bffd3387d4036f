"""What the launch files start, as plain data (no `launch` import): one source for the launch
files, their static test and the docs.

A node runs when its switch argument is true; ``sim`` (or ``use_mic:=false`` /
``use_camera:=false``) moves audio and camera to topics, ``bag`` replays a recording into them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: launch argument → (default, description)
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
    "llm": ("true", "start llm_node"),
    "asr": ("true", "start asr_node"),
    "tts": ("true", "start tts_node"),
    "animation": ("true", "start animation_node"),
    "perception": ("true", "start perception_node"),
    "game_state": ("auto", "start game_state_node (auto: with the blacksmith_npc profile)"),
}


@dataclass(frozen=True)
class NodePlan:
    name: str  # node name = executable = config/params/<name>.yaml
    switch: str  # launch argument that turns it on/off
    lifecycle: bool
    from_args: dict[str, str] = field(default_factory=dict)  # parameter ← launch argument


PLAN: tuple[NodePlan, ...] = (
    NodePlan(
        "llm_node",
        "llm",
        True,
        {"profile": "profile", "model": "llm_model", "n_gpu_layers": "n_gpu_layers"},
    ),
    NodePlan("asr_node", "asr", True, {"model": "asr_model"}),
    NodePlan("tts_node", "tts", True, {"model": "tts_model"}),
    NodePlan("perception_node", "perception", True, {"camera": "camera"}),
    NodePlan("animation_node", "animation", False),
    NodePlan("game_state_node", "game_state", False),
)

_TRUE = {"true", "1", "yes", "on"}


def truthy(value: str) -> bool:
    return value.strip().lower() in _TRUE


def resolve(args: dict[str, str], only: list[str] | None = None) -> list[tuple[NodePlan, dict]]:
    """Nodes to start and their parameter overrides, given launch argument values."""
    sim = truthy(args["sim"]) or bool(args["bag"])
    out = []
    for plan in PLAN:
        if only is not None and plan.name not in only:
            continue
        switch = args[plan.switch]
        if switch == "auto":
            on = plan.name == "game_state_node" and args["profile"] == "blacksmith_npc"
        else:
            on = truthy(switch)
        if not on and only is None:
            continue
        params: dict = {}
        for param, arg in plan.from_args.items():
            value = args[arg]
            if value == "":
                continue
            params[param] = int(value) if param == "n_gpu_layers" else value
        if plan.name == "asr_node" and (sim or not truthy(args["use_mic"])):
            params["audio_source"] = "topic"
        if plan.name == "tts_node" and sim:
            params["audio_sink"] = "topic"
        if plan.name == "perception_node" and (sim or not truthy(args["use_camera"])):
            params["camera"] = "topic"
        out.append((plan, params))
    return out

"""The whole stack in one process: which nodes, with which parameters, brought up in order.

Parameters come from ``config/params/<node>.yaml`` (the same files the launch file passes), then
mode overrides (simulation: audio and camera through topics), then the caller's overrides.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml
from rclpy.node import Node
from rclpy.parameter import Parameter

from bolt_agent.core.paths import config_dir
from bolt_agent.nodes import runtime

#: node module → class name, in bring-up order (cheap nodes first, the LLM last)
NODE_CLASSES = {
    "animation_node": "AnimationNode",
    "game_state_node": "GameStateNode",
    "perception_node": "PerceptionNode",
    "tts_node": "TtsNode",
    "asr_node": "AsrNode",
    "llm_node": "LlmNode",
}


@dataclass
class StackSpec:
    profile: str = "reachy_mini"
    sim: bool = True
    nodes: list[str] = field(default_factory=list)  # empty: the profile's default set
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)  # node → params

    def node_names(self) -> list[str]:
        if self.nodes:
            return self.nodes
        names = ["animation_node", "tts_node", "asr_node", "llm_node"]
        if self.profile == "blacksmith_npc":
            names.insert(1, "game_state_node")
        return names


def sim_overrides(spec: StackSpec) -> dict[str, dict[str, Any]]:
    """Parameters every node gets in this mode (before the caller's own overrides)."""
    out: dict[str, dict[str, Any]] = {
        # voice defaults (the seed's knobs): brief answers; no thinking by default ("bypasses
        # reasoning for ultra-low TTFT on conversational turns"), a 24-token budget for requests
        # that turn it on; the first clause goes to the TTS as soon as it is complete.
        # 2 cores shared with ASR and TTS: decode on 1 thread (a busy second core made 2 threads
        # slower: 36 vs 44 tok/s in the benchmark), prefill on 2; ASR without partials gives both
        # cores to the final transcript (started speculatively when the silence begins)
        "llm_node": {
            "profile": spec.profile,
            "n_threads": 1,
            "n_threads_batch": 2,
            "conversational_mode": True,
            "enable_thinking": False,
            "thinking_token_budget": 24,
            "first_clause_chars": 4,
        },
        "asr_node": {"cpu_threads": 2, "partial_interval_s": 0.0},
        "tts_node": {"cpu_threads": 1},
    }
    if spec.sim:
        out["asr_node"]["audio_source"] = "topic"
        out["tts_node"]["audio_sink"] = "topic"
    return out


def load_params(node_name: str) -> dict[str, Any]:
    path = config_dir() / "params" / f"{node_name}.yaml"
    if not path.exists():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    return dict((data.get(node_name) or {}).get("ros__parameters") or {})


def make_node(node_name: str, params: dict[str, Any], **kwargs) -> Node:
    module = importlib.import_module(f"bolt_agent.nodes.{node_name}")
    cls = getattr(module, NODE_CLASSES[node_name])
    overrides = [Parameter(k, value=v) for k, v in params.items()]
    return cls(parameter_overrides=overrides, **kwargs)


def effective_params(spec: StackSpec, node_name: str) -> dict[str, Any]:
    """YAML defaults, then the mode's overrides, then the caller's: what the node is given."""
    mode = sim_overrides(spec).get(node_name, {})
    return {**load_params(node_name), **mode, **spec.overrides.get(node_name, {})}


def build_stack(spec: StackSpec, **node_kwargs) -> list[Node]:
    nodes = []
    for name in spec.node_names():
        params = effective_params(spec, name)
        params["autostart"] = False  # the runner drives the transitions (progress, errors)
        try:
            nodes.append(make_node(name, params, **node_kwargs))
        except Exception:
            for node in nodes:
                node.destroy_node()
            raise
    return nodes


def bring_up_all(nodes: list[Node], progress: Callable[[str], None] = print) -> list[str]:
    """configure + activate every lifecycle node; returns the names that failed."""
    failed = []
    for node in nodes:
        if not node.has_parameter("autostart"):
            continue
        progress(f"starting {node.get_name()}")
        node.set_parameters([Parameter("autostart", value=True)])
        if not runtime.bring_up(node):
            failed.append(node.get_name())
    return failed


def shut_down_all(nodes: list[Node]) -> None:
    """Lifecycle shutdown (stops worker threads, closes devices) in reverse order, then destroy."""
    for node in reversed(nodes):
        if node.has_parameter("autostart") and hasattr(node, "trigger_shutdown"):
            try:
                node.trigger_shutdown()
            except Exception as exc:  # a failing shutdown must not stop the others
                node.get_logger().error(f"shutdown failed: {exc!r}")
        node.destroy_node()

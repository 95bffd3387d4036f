"""The whole stack in one process: which nodes, with which parameters, brought up in order.

The node set and the simulation routing come from the node table (``stack.table``), the same one
`ros2 launch` reads (``stack.launch_plan``): a ``StackSpec`` is a set of launch arguments plus the
caller's parameter overrides. Parameters come from ``config/params/<node>.yaml`` (the same files
the launch file passes, keyed ``/**/<node>:``), then the table's (from the arguments, simulation
routing, ``use_sim_time``), then the in-process tuning below, then the ``params_file`` argument's
(applied last in `ros2 launch` too), then the caller's overrides.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from rclpy.node import Node
from rclpy.parameter import Parameter

from bolt_agent.core.paths import config_dir
from bolt_agent.nodes import runtime
from bolt_agent.stack import table

#: node module → class name, in bring-up order (cheap nodes first, the LLM last)
NODE_CLASSES = {e.name: e.cls for e in table.NODES}

#: where the embedded runner's argument defaults differ from `ros2 launch`'s: no camera unless
#: asked for (``args={"perception": "true"}``, or ``nodes=[...]`` naming perception_node)
RUNNER_ARGS = {"perception": "false"}


@dataclass
class StackSpec:
    profile: str = "reachy_mini"
    sim: bool = True
    nodes: list[str] = field(default_factory=list)  # empty: the table's set for the arguments
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)  # node → params
    #: more launch arguments (``table.ARGUMENTS``: switches such as ``llm``, ``use_mic``, models)
    args: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_args(cls, args: dict[str, str], **kwargs) -> StackSpec:
        """The embedded twin of ``ros2 launch bolt_agent bolt_agent.launch.py <args>``."""
        full = {**table.defaults(), **args}
        return cls(profile=full["profile"], sim=table.truthy(full["sim"]), args=full, **kwargs)

    def launch_args(self) -> dict[str, str]:
        """The launch arguments this stack corresponds to (every one, defaults filled in)."""
        unknown = set(self.args) - set(table.ARGUMENTS)
        if unknown:
            raise ValueError(f"unknown stack argument(s): {', '.join(sorted(unknown))}")
        return {
            **table.defaults(),
            **RUNNER_ARGS,
            **self.args,
            "profile": self.profile,
            "sim": "true" if self.sim else "false",
        }

    def node_names(self) -> list[str]:
        if self.nodes:
            unknown = set(self.nodes) - set(table.BY_NAME)
            if unknown:
                raise ValueError(f"unknown node(s): {', '.join(sorted(unknown))}")
            return list(self.nodes)
        return [entry.name for entry, _ in table.select(self.launch_args())]


#: in-process tuning (not the launch files': there each node has its own process)
IN_PROCESS: dict[str, dict[str, Any]] = {
    # voice defaults (the seed's knobs): brief answers; no thinking by default ("bypasses
    # reasoning for ultra-low TTFT on conversational turns"), a 24-token budget for requests
    # that turn it on; the first clause goes to the TTS as soon as it is complete (3 characters:
    # "Yes," "Hi," "Oh," alone; benchmarks/answer_path, interleaved against 4: first sentence
    # 0.37 -> 0.29 s, Piper's audio of it 0.16 -> 0.07 s).
    # 2 cores shared with ASR and TTS: decode on 1 thread (a busy second core made 2 threads
    # slower: 36 vs 44 tok/s in the benchmark), prefill on 2; ASR without partials gives both
    # cores to the final transcript (started early, when the silence begins)
    "llm_node": {
        "n_threads": 1,
        "n_threads_batch": 2,
        "conversational_mode": True,
        "enable_thinking": False,
        "thinking_token_budget": 24,
        "first_clause_chars": 3,
    },
    "asr_node": {"cpu_threads": 2, "partial_interval_s": 0.0},
    "tts_node": {"cpu_threads": 1},
}


def sim_overrides(spec: StackSpec) -> dict[str, dict[str, Any]]:
    """Parameters every node gets in this mode (before the caller's own overrides): the table's
    (profile, models, simulation routing) and the in-process tuning."""
    args = spec.launch_args()
    every = table.every_node_params(args)
    return {
        entry.name: {**params, **every, **IN_PROCESS.get(entry.name, {})}
        for entry, params in table.select(args, only=list(table.BY_NAME))
    }


def _fqn_matches(pattern: str, fqn: str) -> bool:
    """A parameter file's node key against a node's fully qualified name, as rcl matches them:
    ``/**`` any namespaces (or none), ``*`` one name; a key without a leading ``/`` is absolute."""
    regex = ""
    for token in pattern.strip("/").split("/"):
        if token == "**":
            regex += "(?:/[^/]+)*"
        else:
            regex += "/" + "[^/]*".join(map(re.escape, token.split("*")))
    return re.fullmatch(regex, fqn) is not None


def params_for(data: dict | None, node_name: str, namespace: str = "") -> dict[str, Any]:
    """The ``ros__parameters`` a parsed parameter file gives a node in ``namespace``: every
    matching key (``/**:``, ``/**/node:``, ``/ns/node:``…) in file order, later ones winning."""
    fqn = "/" + "/".join(p for p in (*namespace.split("/"), node_name) if p)
    params: dict[str, Any] = {}
    for key, entry in (data or {}).items():
        if isinstance(entry, dict) and _fqn_matches(str(key), fqn):
            params.update(entry.get("ros__parameters") or {})
    return params


def load_params(node_name: str, path: Path | str | None = None, namespace: str = "") -> dict:
    """A node's parameters from a YAML file (default: the installed config/params/<node>.yaml)."""
    if not path:
        path = config_dir() / table.BY_NAME[node_name].params_file
        if not path.exists():
            return {}
    return params_for(yaml.safe_load(Path(path).read_text()), node_name, namespace)


def make_node(node_name: str, params: dict[str, Any], **kwargs) -> Node:
    entry = table.BY_NAME[node_name]
    cls = getattr(importlib.import_module(entry.module), entry.cls)
    overrides = [Parameter(k, value=v) for k, v in params.items()]
    return cls(parameter_overrides=overrides, **kwargs)


def effective_params(spec: StackSpec, node_name: str) -> dict[str, Any]:
    """YAML defaults, then the mode's overrides, then the ``params_file`` argument's (as in
    `ros2 launch`), then the caller's: what the node is given."""
    args = spec.launch_args()
    mode = sim_overrides(spec).get(node_name, {})
    user = (
        load_params(node_name, args["params_file"], args["namespace"])
        if args["params_file"]
        else {}
    )
    return {
        **load_params(node_name, namespace=args["namespace"]),
        **mode,
        **user,
        **spec.overrides.get(node_name, {}),
    }


def build_stack(spec: StackSpec, **node_kwargs) -> list[Node]:
    namespace = spec.launch_args()["namespace"]
    if namespace:
        node_kwargs.setdefault("namespace", namespace)
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


def bring_up_all(
    nodes: list[Node],
    progress: Callable[[str], None] | None = print,
    after_each: Callable[[Node], None] | None = None,
) -> list[str]:
    """configure + activate every lifecycle node, in order; returns the names that failed.

    ``progress`` gets "starting <name>" before each lifecycle node; ``after_each(node)`` runs
    after every node (lifecycle or not), e.g. to measure memory per node.
    """
    failed = []
    for node in nodes:
        if node.has_parameter("autostart"):
            if progress is not None:
                progress(f"starting {node.get_name()}")
            node.set_parameters([Parameter("autostart", value=True)])
            if not runtime.bring_up(node):
                failed.append(node.get_name())
        if after_each is not None:
            after_each(node)
    return failed

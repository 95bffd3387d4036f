"""Builds the ROS 2 launch description from ``launch_plan`` (imports `launch` lazily).

Works with `ros2 launch` on Humble and Jazzy: the node set is decided in an OpaqueFunction from
the launch arguments; lifecycle nodes use ``launch_ros.actions.LifecycleNode`` and configure +
activate themselves (parameter ``autostart``, from the ``autostart`` argument: with false they wait
unconfigured for ``ros2 lifecycle set``), and ``ros2 lifecycle`` can drive them afterwards.

Each node gets, in this order (later wins): the installed ``config/params/<node>.yaml`` (keyed
``/**/<node>:``, so it applies under any namespace), the values the arguments give (the node
table's, ``use_sim_time``), then the ``params_file`` argument's YAML. Executables are found where
launch looks for them: ``<prefix>/lib/bolt_agent/`` (colcon install, or the links the set-up makes
in the venv).
"""

from __future__ import annotations

import os

from bolt_agent.stack.launch_plan import ARGUMENTS, resolve, truthy
from bolt_agent.stack.table import every_node_params

PACKAGE = "bolt_agent"


def generate(only: list[str] | None = None):
    from launch import LaunchDescription
    from launch.actions import DeclareLaunchArgument, OpaqueFunction

    declared = [
        DeclareLaunchArgument(k, default_value=v, description=d) for k, (v, d) in ARGUMENTS.items()
    ]
    return LaunchDescription([*declared, OpaqueFunction(function=_actions, args=[only])])


def _actions(context, only):
    from ament_index_python.packages import get_package_share_directory
    from launch.actions import ExecuteProcess
    from launch_ros.actions import LifecycleNode, Node
    from launch_ros.substitutions import ExecutableInPackage

    from bolt_agent.nodes.runtime import EXIT_ON_FAILURE

    args = {k: context.perform_substitution(_config(k)) for k in ARGUMENTS}
    share = get_package_share_directory(PACKAGE)
    user_file = user_params_file(args["params_file"])
    every = every_node_params(args)
    ros_arguments = ["--log-level", args["log_level"]] if args["log_level"].strip() else []
    respawn = truthy(args["respawn"])
    respawn_delay = float(args["respawn_delay"] or 0.0)
    actions = []
    for plan, params in resolve(args, only):
        overrides = {**params, **every}
        if plan.lifecycle:
            overrides["autostart"] = truthy(args["autostart"])
        parameters = [os.path.join(share, "config", plan.params_file), overrides]
        if user_file:
            parameters.append(user_file)
        common = {
            "package": PACKAGE,
            "executable": plan.executable,
            "name": plan.name,
            "namespace": args["namespace"],
            "output": "screen",
            "parameters": parameters,
            "ros_arguments": ros_arguments,
            "respawn": respawn,
            "respawn_delay": respawn_delay,
            "emulate_tty": True,
        }
        if plan.lifecycle:
            exit_flag = [EXIT_ON_FAILURE] if truthy(args["exit_on_failure"]) else []
            actions.append(LifecycleNode(arguments=exit_flag, **common))
        else:
            actions.append(Node(**common))
    if args["robot"].strip() == "reachy_mini_sim" and (only is None or "animation_node" in only):
        # Pollen's daemon in MuJoCo; the node connects once it answers (and stops with launch)
        cmd = [ExecutableInPackage("bolt-agent", PACKAGE), "reachy-sim", "--port"]
        actions.append(
            ExecuteProcess(
                cmd=[*cmd, args["reachy_port"]], output="screen", name="reachy_mini_daemon"
            )
        )
    if args["bag"] and only is None:
        # `bolt-agent` from the package's lib/ (not on PATH in a colcon install)
        cmd = [ExecutableInPackage("bolt-agent", PACKAGE), "bag", "play", args["bag"]]
        if truthy(args["use_sim_time"]):  # the nodes' time is the bag's
            cmd += ["--clock"]
        remaps = bag_remaps(args["bag"], args["namespace"])
        if remaps:
            cmd += ["--remap", *remaps]
        actions.append(ExecuteProcess(cmd=cmd, output="screen", name="bag_play"))
    return actions


def user_params_file(value: str) -> str:
    """The ``params_file`` argument as an absolute path ('' when not given); a clear error (launch
    stops before starting anything) when the file does not exist."""
    if not value.strip():
        return ""
    path = os.path.abspath(os.path.expanduser(value.strip()))
    if not os.path.isfile(path):
        raise FileNotFoundError(f"params_file: {path} does not exist")
    return path


def bag_remaps(bag: str, namespace: str) -> list[str]:
    """``OLD:=NEW`` rules that move a bag's (absolute) topics into ``namespace``; none without a
    namespace, or when the bag cannot be read (the player then reports why)."""
    prefix = "/" + namespace.strip("/") if namespace.strip("/") else ""
    if not prefix:
        return []
    from bolt_agent.core.sim.bag_io import BagError, BagReader

    try:
        with BagReader(bag) as reader:
            topics = list(dict.fromkeys(t.name for t in reader.summary().topics))
    except (BagError, OSError):
        return []
    return [f"{t}:={prefix}{t}" for t in topics if not t.startswith(prefix + "/")]


def _config(name: str):
    from launch.substitutions import LaunchConfiguration

    return LaunchConfiguration(name)

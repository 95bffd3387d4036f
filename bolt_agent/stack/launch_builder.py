"""Builds the ROS 2 launch description from ``launch_plan`` (imports `launch` lazily).

Works with `ros2 launch` on Humble and Jazzy: the node set is decided in an OpaqueFunction from
the launch arguments; lifecycle nodes use ``launch_ros.actions.LifecycleNode`` and configure +
activate themselves (parameter ``autostart``), so ``ros2 lifecycle`` can drive them afterwards.
"""

from __future__ import annotations

import os

from bolt_agent.stack.launch_plan import ARGUMENTS, resolve

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

    args = {k: context.perform_substitution(_config(k)) for k in ARGUMENTS}
    share = get_package_share_directory(PACKAGE)
    actions = []
    for plan, params in resolve(args, only):
        params_file = os.path.join(share, "config", plan.params_file)
        common = {
            "package": PACKAGE,
            "executable": plan.executable,
            "name": plan.name,
            "namespace": args["namespace"],
            "output": "screen",
            "parameters": [params_file, params],
            "emulate_tty": True,
        }
        actions.append(LifecycleNode(**common) if plan.lifecycle else Node(**common))
    if args["bag"] and only is None:
        actions.append(
            ExecuteProcess(cmd=["bolt-agent", "bag", "play", args["bag"]], output="screen")
        )
    return actions


def _config(name: str):
    from launch.substitutions import LaunchConfiguration

    return LaunchConfiguration(name)

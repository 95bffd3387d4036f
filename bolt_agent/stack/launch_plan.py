"""What the launch files start, as plain data (no `launch` import): the launch files' view of the
node table (``stack.table``, shared with the embedded runner), for the launch files, their static
test and the docs.

A node runs when its switch argument is true; ``sim`` (or ``use_mic:=false`` /
``use_camera:=false``) moves audio and camera to topics, ``bag`` replays a recording into them.
"""

from __future__ import annotations

from bolt_agent.stack.table import ARGUMENTS, NODES, NodeEntry, select, truthy

#: a planned node (name = executable = config/params/<name>.yaml, switch, lifecycle, from_args)
NodePlan = NodeEntry

#: every node the launch files may start, in bring-up order
PLAN: tuple[NodePlan, ...] = NODES


def resolve(args: dict[str, str], only: list[str] | None = None) -> list[tuple[NodePlan, dict]]:
    """Nodes to start and their parameter overrides, given launch argument values."""
    return select(args, only)


__all__ = ["ARGUMENTS", "PLAN", "NodePlan", "resolve", "truthy"]

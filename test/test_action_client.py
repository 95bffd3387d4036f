"""The action client the stack makes while executors spin (bolt_agent.nodes.action_client)."""

from __future__ import annotations

import inspect

import pytest
from rclpy.action import ActionClient as RclpyActionClient

from bolt_agent.nodes.action_client import ActionClient
from bolt_agent_interfaces.action import PlayAnimation
from support.ros_helpers import ros_node


def asked_while_added(node):
    """Make ``node.add_waitable`` ask the new waitable for its entities at once, as an executor
    thread building its wait set at that moment does."""
    add = node.add_waitable

    def add_and_ask(waitable) -> None:
        add(waitable)
        waitable.get_num_entities()

    node.add_waitable = add_and_ask


def test_a_client_made_while_the_node_spins_can_be_asked_for_its_entities_at_once():
    with ros_node("action_client_probe") as (node, _):
        asked_while_added(node)
        if "self._lock" in inspect.getsource(RclpyActionClient.get_num_entities):
            with pytest.raises(AttributeError, match="_lock"):  # rclpy's own: the race exists
                RclpyActionClient(node, PlayAnimation, "animation/play")
        client = ActionClient(node, PlayAnimation, "animation/play")
        assert client.get_num_entities() is not None
        client.destroy()

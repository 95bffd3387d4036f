"""A transition that raises goes through on_error: the node logs the exception, releases what
configure made (cleanup), returns to unconfigured with ERROR on /diagnostics, and can be
configured again. In-process, with a minimal node on the real rclpy lifecycle state machine."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.parameter import Parameter
from std_msgs.msg import String

from bolt_agent.nodes.lifecycle import BoltLifecycleNode
from bolt_agent.nodes.params import param
from support.ros_helpers import ros_node


@dataclass(frozen=True)
class FlakyParams:
    fail: str = param("", "the transition that raises: configure | activate | '' (none)")


class Flaky(BoltLifecycleNode):
    Params = FlakyParams

    def __init__(self, **kw) -> None:
        super().__init__("flaky", **kw)
        self.pub = None
        self.loaded, self.cleanups = False, 0

    def configure(self) -> TransitionCallbackReturn:
        self.loaded = True  # what a model load leaves behind
        self.pub = self.create_publisher(String, "flaky/out", 10)
        if self.params.fail == "configure":
            raise RuntimeError("the model file is corrupt")
        return TransitionCallbackReturn.SUCCESS

    def activate(self) -> TransitionCallbackReturn:
        if self.params.fail == "activate":
            raise RuntimeError("the device vanished")
        return TransitionCallbackReturn.SUCCESS

    def cleanup(self) -> None:
        self.cleanups += 1
        if self.pub is not None:
            self.destroy_publisher(self.pub)
        self.pub, self.loaded = None, False


@pytest.mark.parametrize(
    "fail, why",
    [("configure", "the model file is corrupt"), ("activate", "the device vanished")],
)
def test_a_raising_transition_cleans_up_to_unconfigured(fail, why):
    with ros_node("flaky_probe") as (probe, _):
        node = Flaky(
            context=probe.context,
            parameter_overrides=[
                Parameter("autostart", value=False),
                Parameter("fail", value=fail),
            ],
        )
        try:
            result = node.trigger_configure()
            if fail == "activate":
                assert result == TransitionCallbackReturn.SUCCESS
                result = node.trigger_activate()
            assert result == TransitionCallbackReturn.ERROR
            assert node.lifecycle_state() == "unconfigured"
            assert node.cleanups == 1 and not node.loaded and node.pub is None
            assert not node._active and node.failures("transition") == 1
            status = node.diagnostic_status()
            assert status.level == status.ERROR and f"{fail} raised" in status.message, status
            assert why in status.message
            # fixed, it comes up: configure and activate again
            node.set_parameters([Parameter("fail", value="")])
            assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
            assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
            assert node.lifecycle_state() == "active" and node.loaded
        finally:
            node.destroy_node()

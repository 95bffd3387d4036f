"""The run is on the distro it claims (scripts/test-jazzy.sh sets BOLT_EXPECT_DISTRO=jazzy), and
the distro module's Iron-and-later APIs are the ones in use there."""

from __future__ import annotations

import os
from importlib.metadata import PackageNotFoundError, version

import pytest

from bolt_agent.nodes import distro


def test_running_on_the_expected_distro():
    expected = os.environ.get("BOLT_EXPECT_DISTRO", "kilted")
    assert distro.ros_distro() == expected
    assert version(f"ros-{expected}-rclpy")  # rclpy comes from that distro's wheel
    for other in {"kilted", "jazzy"} - {expected}:
        with pytest.raises(PackageNotFoundError):
            version(f"ros-{other}-rclpy")


def test_distro_apis_resolve():
    assert distro.WITH_MESSAGE_INFO  # Kilted and Jazzy both pass MessageInfo
    assert distro.SubscriptionEventCallbacks.__module__ == "rclpy.event_handler"
    assert issubclass(distro.RCLError, Exception)

"""What differs between the ROS 2 distros the stack runs on, in one place.

Tested here: Kilted (``.venv``) and Jazzy (``.venv-jazzy``), both from the registry's wheels, by
the same suite (``make test`` runs the Jazzy selection after the Kilted run). Humble (JetPack 6)
has no wheels: the stack keeps to APIs Humble has, and the branches below name the Humble
fallbacks, which no test here runs.

- ``SubscriptionEventCallbacks`` moved from ``rclpy.qos_event`` (Humble) to
  ``rclpy.event_handler`` (Iron and later).
- A two-argument subscription callback gets a ``MessageInfo`` since Iron (rclpy#922); Humble
  passes the message only.
- ``RCLError`` (what a publish or goal transition raises once the context is shut down) is in
  the pybind module in every distro, under the same name.
"""

from __future__ import annotations

import os

from rclpy._rclpy_pybind11 import RCLError
from rclpy.subscription import Subscription

try:  # Iron and later
    from rclpy.event_handler import PublisherEventCallbacks, SubscriptionEventCallbacks
except ImportError:  # Humble
    from rclpy.qos_event import PublisherEventCallbacks, SubscriptionEventCallbacks

#: rclpy passes a MessageInfo to a two-argument subscription callback (Iron and later)
WITH_MESSAGE_INFO = hasattr(Subscription, "CallbackType")


def ros_distro() -> str:
    """The distro this process runs on: ``ROS_DISTRO`` as a ROS setup script sets it, else the
    registry wheel that provides rclpy (``ros-kilted-rclpy``, ``ros-jazzy-rclpy``)."""
    if os.environ.get("ROS_DISTRO"):
        return os.environ["ROS_DISTRO"]
    from importlib.metadata import PackageNotFoundError, version

    for name in ("kilted", "jazzy", "humble", "rolling"):
        try:
            version(f"ros-{name}-rclpy")
        except PackageNotFoundError:
            continue
        return name
    return "unknown"


__all__ = [
    "WITH_MESSAGE_INFO",
    "PublisherEventCallbacks",
    "RCLError",
    "SubscriptionEventCallbacks",
    "ros_distro",
]

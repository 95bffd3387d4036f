"""Thin ROS 2 adapters that wire the core to topics, actions and parameters."""

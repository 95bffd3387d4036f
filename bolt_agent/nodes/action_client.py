"""An rclpy ``ActionClient`` that can be made while an executor spins the node.

rclpy (Kilted) adds a new client to the node's waitables before it creates the lock its
``get_num_entities`` takes: an executor thread that builds a wait set in between dies with
``AttributeError: 'ActionClient' object has no attribute '_lock'`` and the node stops
receiving anything (seen in a test probe; llm_node makes its tool clients while other
nodes spin). The lock is made first here; rclpy then replaces it with its own.
"""

from __future__ import annotations

import threading

from rclpy.action import ActionClient as _RclpyActionClient


class ActionClient(_RclpyActionClient):
    def __init__(self, *args, **kwargs) -> None:
        self._lock = threading.Lock()  # before the base adds the client to the node's waitables
        super().__init__(*args, **kwargs)

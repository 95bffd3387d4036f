"""Test process: an ExecuteTool server that reports progress every 50 ms for `steps` steps."""

import json
import sys
import threading

import rclpy
from rclpy.action import ActionServer, CancelResponse
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor

from bolt_agent_interfaces.action import ExecuteTool


def main() -> None:
    steps = int(sys.argv[1])
    rclpy.init()
    node = rclpy.create_node("slow_tool_server")

    def execute(goal_handle):
        args = json.loads(goal_handle.request.arguments_json or "{}")
        tick = threading.Event()
        for i in range(steps):
            if goal_handle.is_cancel_requested:
                goal_handle.canceled()
                return ExecuteTool.Result(success=False, error=f"cancelled at step {i}")
            goal_handle.publish_feedback(ExecuteTool.Feedback(status=f"step {i}"))
            tick.wait(0.05)
        goal_handle.succeed()
        return ExecuteTool.Result(success=True, result_json=json.dumps({"echo": args}))

    ActionServer(
        node,
        ExecuteTool,
        "game/execute_tool",
        execute,
        cancel_callback=lambda _g: CancelResponse.ACCEPT,
    )
    executor = MultiThreadedExecutor()
    executor.add_node(node)
    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()

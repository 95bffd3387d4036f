"""game_state_node: the blacksmith NPC demo's game, serving the profile's tools.

An ExecuteTool action server on ``game/execute_tool`` runs ``check_shop_inventory``,
``sell_to_player`` and ``buy_from_player`` (arguments validated; an unknown tool, invalid
arguments or a refused trade → ``success=false`` with the reason in ``error``, goal aborted).
Feedback reports progress; the whole state is published latched on ``game/state``
(bolt_agent_interfaces/GameState) at start and after every trade. Rules:
``bolt_agent.core.tools.game_state``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup

from bolt_agent.core.tools.game_state import GameState, GameTools
from bolt_agent.nodes import qos
from bolt_agent.nodes.base import BoltNode
from bolt_agent.nodes.messages import game_state
from bolt_agent.nodes.params import param
from bolt_agent.nodes.runtime import main_for
from bolt_agent_interfaces.action import ExecuteTool
from bolt_agent_interfaces.msg import GameState as GameStateMsg

_CHANGES_STATE = {"sell_to_player", "buy_from_player"}


@dataclass(frozen=True)
class GameStateParams:
    state_file: str = param(
        "", "initial state YAML ('' = config/game_state.yaml); read at start", load_time=True
    )


class GameStateNode(BoltNode):
    Params = GameStateParams

    def __init__(self, **node_kwargs) -> None:  # e.g. context=, parameter_overrides=
        super().__init__("game_state_node", **node_kwargs)
        state_file = self.params.state_file
        self.tools = GameTools(GameState.load(state_file))
        self.state_pub = self.create_publisher(GameStateMsg, "game/state", qos.LATCHED)
        self.server = self.create_action_server(
            ExecuteTool, "game/execute_tool", self._execute,
            callback_group=MutuallyExclusiveCallbackGroup(),
        )  # fmt: skip
        self._refused = 0  # tool calls answered success=false
        self.publish_state()
        self.get_logger().info(
            f"game state from {state_file or 'config/game_state.yaml'}; tools: {self.tools.names}"
        )

    def publish_state(self) -> None:
        msg = game_state(self.tools.snapshot())
        msg.header.stamp = self.get_clock().now().to_msg()
        self.state_pub.publish(msg)

    def _execute(self, goal_handle) -> ExecuteTool.Result:
        request = goal_handle.request
        goal_handle.publish_feedback(ExecuteTool.Feedback(status=f"running {request.tool_name}"))
        outcome = self.tools.execute(request.tool_name, request.arguments_json)
        if outcome.success and request.tool_name in _CHANGES_STATE:
            self.publish_state()
        status = "done" if outcome.success else f"failed: {outcome.error}"
        goal_handle.publish_feedback(ExecuteTool.Feedback(status=status))
        if outcome.success:
            goal_handle.succeed()
        else:
            self.get_logger().info(f"{request.tool_name}: {outcome.error}")
            self._refused += 1
            goal_handle.abort()
        return ExecuteTool.Result(
            success=outcome.success, result_json=outcome.result_json(), error=outcome.error
        )

    def diagnostic_values(self) -> dict[str, Any]:
        return {
            "state_file": self.params.state_file or "config/game_state.yaml",
            "tools": ", ".join(self.tools.names),
            "refused_calls": self._refused,
        }

    def destroy_node(self) -> None:
        self.server.destroy()
        super().destroy_node()


def main(args: list[str] | None = None) -> int:
    return main_for(GameStateNode, args)


if __name__ == "__main__":
    raise SystemExit(main())

"""Blacksmith game state: trade rules (core, synchronous) and game_state_node over real DDS."""

from __future__ import annotations

import json

import pytest
import yaml
from rclpy.action import ActionClient

from bolt_agent.core.paths import config_dir
from bolt_agent.core.tools.game_state import TOOL_SCHEMAS, GameState, GameTools, TradeRefused
from bolt_agent.nodes import qos
from bolt_agent.nodes.messages import game_state_dict
from bolt_agent_interfaces.action import ExecuteTool
from bolt_agent_interfaces.msg import GameState as GameStateMsg
from support.ros_helpers import ros_node, spin_until


@pytest.fixture
def state() -> GameState:
    return GameState.load()  # config/game_state.yaml


def test_initial_state_from_config(state):
    assert state.shop_gold == 200 and state.player_gold == 100
    assert state.find("Iron Sword").price == 40 and state.find("iron swords").stock == 3
    assert state.find("a war hammer").category == "weapons"
    assert state.player_items == {"hunting dagger": 2, "iron helmet": 1}


def test_inventory_by_category(state):
    armour = state.check_inventory("armour")
    assert {i["name"] for i in armour["items"]} == {"chainmail shirt", "iron helmet"}
    assert armour["out_of_stock"] == ["wooden shield"]
    assert len(state.check_inventory()["items"]) == 8


def test_sell_moves_gold_stock_and_items(state):
    out = state.sell_to_player("iron sword", 2)
    assert out == {"item": "iron sword", "quantity": 2, "price_each": 40, "total": 80,
                   "player_gold": 20, "stock_left": 1}  # fmt: skip
    assert state.shop_gold == 280 and state.player_items["iron sword"] == 2


@pytest.mark.parametrize(
    ("item", "quantity", "code", "text"),
    [
        ("magic wand", 1, "unknown_item", "no item called 'magic wand'"),
        ("wooden shield", 1, "out_of_stock", "wooden shield is out of stock"),
        ("steel longsword", 2, "out_of_stock", "only 1 steel longsword left"),
        ("steel longsword", 1, "player_cannot_afford", "cost 120 gold; the player has 100"),
    ],
)
def test_sell_refusals_leave_state_unchanged(state, item, quantity, code, text):
    before = state.to_dict()
    with pytest.raises(TradeRefused, match=text) as err:
        state.sell_to_player(item, quantity)
    assert err.value.code == code and state.to_dict() == before


def test_buy_from_player_rules(state):
    with pytest.raises(TradeRefused, match="at most 9") as err:
        state.buy_from_player("hunting dagger", 10)  # 0.6 x 15 = 9
    assert err.value.code == "unreasonable_price"
    with pytest.raises(TradeRefused, match="has no war hammer") as err:
        state.buy_from_player("war hammer", 10)
    assert err.value.code == "player_lacks_item"
    assert state.buy_from_player("hunting dagger", 9)["player_gold"] == 109
    assert state.player_items["hunting dagger"] == 1 and state.find("hunting dagger").stock == 6
    state.shop_gold = 5
    with pytest.raises(TradeRefused, match="only 5 gold") as err:
        state.buy_from_player("iron helmet", 18)
    assert err.value.code == "shop_cannot_afford"


def test_tools_validate_arguments_and_names(state):
    tools = GameTools(state)
    assert not tools.execute("fly_dragon", "{}").success
    assert "unknown tool 'fly_dragon'" in tools.execute("fly_dragon", "{}").error
    bad = tools.execute("sell_to_player", '{"item": "iron sword", "quantity": 0}')
    assert not bad.success and "quantity" in bad.error and "minimum" in bad.error
    assert "not JSON" in tools.execute("sell_to_player", "{item").error
    assert "'item' is a required property" in tools.execute("sell_to_player", "{}").error
    refused = tools.execute("sell_to_player", '{"item": "wooden shield"}')
    assert refused.result == {"refused": "out_of_stock", "reason": "wooden shield is out of stock"}
    ok = tools.execute("check_shop_inventory", "")
    assert ok.success and json.loads(ok.result_json())["category"] == "all"


def test_tool_schemas_equal_the_blacksmith_profile():
    profile = yaml.safe_load((config_dir() / "profiles" / "blacksmith_npc.yaml").read_text())
    bound = {t["name"]: t["parameters"] for t in profile["tools"]
             if t["binding"]["type"] == "execute_tool"}  # fmt: skip
    # the profile may narrow a string to the shop's catalog for the model's grammar
    # (enum_from); the executor's contract is otherwise the same schema
    assert _without_enum_from(bound) == TOOL_SCHEMAS
    assert "enum_from" in str(bound["sell_to_player"]["properties"]["item"])


def _without_enum_from(schema):
    if isinstance(schema, dict):
        return {k: _without_enum_from(v) for k, v in schema.items() if k != "enum_from"}
    if isinstance(schema, list):
        return [_without_enum_from(v) for v in schema]
    return schema


def test_invalid_state_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("shop: {gold: 1, items: [{name: x, category: food, price: 1}]}\n")
    with pytest.raises(ValueError, match="category must be one of"):
        GameState.load(bad)
    bad.write_text("player: {gold: 1}\n")
    with pytest.raises(ValueError, match="missing or malformed 'shop'"):
        GameState.load(bad)


def _call(client, executor, tool: str, args: dict, feedback: list[str] | None = None):
    """Run one goal; with `feedback` given, ask for the result only after the final sample.

    Feedback (a topic) and the result (a service response) travel on separate DDS channels, and
    rclpy drops a goal's feedback callback once its result is in (rclpy#927): asked for at once,
    the result can overtake the last feedback sample, which is then lost (rclcpp#2612)."""
    goal = ExecuteTool.Goal(tool_name=tool, arguments_json=json.dumps(args))
    samples = feedback if feedback is not None else []
    seen = len(samples)
    send = client.send_goal_async(goal, lambda f: samples.append(f.feedback.status))
    spin_until(executor, send.done, 10, "goal response")
    assert send.result().accepted, f"{tool} goal rejected"
    if feedback is not None:

        def final() -> bool:
            return any(s == "done" or s.startswith("failed") for s in samples[seen:])

        spin_until(executor, final, 10, lambda: f"{tool}'s final feedback; got {samples[seen:]}")
    result = send.result().get_result_async()
    spin_until(executor, result.done, 10, f"{tool} result")
    return result.result().result


def test_node_serves_tools_and_publishes_state(node_process, unique_ns):
    proc = node_process("-m", "bolt_agent.nodes.game_state_node", "--ros-args", "-r",
                        f"__ns:={unique_ns}", name="game_state_node")  # fmt: skip
    states: list[dict] = []
    with ros_node("game_client", unique_ns) as (node, executor):
        node.create_subscription(
            GameStateMsg, "game/state", lambda m: states.append(game_state_dict(m)), qos.LATCHED
        )
        client = ActionClient(node, ExecuteTool, "game/execute_tool")
        spin_until(executor, client.server_is_ready, 30, "the game_state_node action server")
        spin_until(executor, lambda: states, 10, "the latched initial state")
        assert states[0]["player"]["gold"] == 100

        feedback: list[str] = []
        inv = _call(client, executor, "check_shop_inventory", {"category": "tools"}, feedback)
        assert inv.success and inv.error == ""
        assert [i["name"] for i in json.loads(inv.result_json)["items"]] == [
            "smithing hammer",
            "horseshoe",
        ]
        assert feedback == ["running check_shop_inventory", "done"]

        sold = _call(client, executor, "sell_to_player", {"item": "Iron Sword", "quantity": 2})
        assert sold.success and json.loads(sold.result_json)["total"] == 80
        spin_until(executor, lambda: states[-1]["player"]["gold"] == 20, 10, "the new state")
        assert states[-1]["player"]["items"]["iron sword"] == 2

        poor = _call(client, executor, "sell_to_player", {"item": "war hammer"}, feedback)
        assert not poor.success and "cost 85 gold; the player has 20" in poor.error
        assert json.loads(poor.result_json)["refused"] == "player_cannot_afford"
        assert feedback[-1].startswith("failed: 1 war hammer cost 85")

        unknown = _call(client, executor, "summon_dragon", {})
        assert not unknown.success and "unknown tool 'summon_dragon'" in unknown.error
        invalid = _call(client, executor, "buy_from_player", {"item": "iron helmet"})
        assert not invalid.success and "'offered_price' is a required property" in invalid.error
        bought = _call(client, executor, "buy_from_player",
                       {"item": "iron helmet", "offered_price": 18})  # fmt: skip
        assert bought.success
        spin_until(executor, lambda: states[-1]["player"]["gold"] == 38, 10, "state after buying")
        assert len(states) == 3  # initial + two trades; refusals publish nothing
    assert proc.alive(), proc.log()

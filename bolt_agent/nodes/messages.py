"""Typed messages built from the core's values, and read back into plain dicts for reports.

The core never imports ROS types; the nodes publish typed messages. The few readers that keep
records (the console monitor, the scenario simulator's report, tests) want plain values, and the
conversion both ways lives here so that the field names exist once.
"""

from __future__ import annotations

import array
import json
from typing import Any

import numpy as np
from builtin_interfaces.msg import Time

from bolt_agent.core.audio.audio_io import float_to_int16, int16_to_float, to_mono
from bolt_agent_interfaces.msg import (
    AudioChunk,
    GameState,
    ItemCount,
    JointCommand,
    ShopItem,
    ToolCall,
    ToolEvent,
)


def stamp(ns: int) -> Time:
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def stamp_ns(time: Time) -> int:
    return time.sec * 1_000_000_000 + time.nanosec


def audio_chunk(samples: np.ndarray, at_ns: int, sample_rate: int, channels: int = 1) -> AudioChunk:
    """An ``AudioChunk`` of ``samples`` (int16 as they are, float [-1, 1] converted) whose first
    sample is at ``at_ns``."""
    if samples.dtype != np.int16:
        samples = float_to_int16(samples)
    msg = AudioChunk(sample_rate=sample_rate, channels=channels)
    msg.header.stamp = stamp(at_ns)
    msg.samples = array.array("h", samples.tobytes())
    return msg


def chunk_audio(msg: AudioChunk) -> np.ndarray:
    """An ``AudioChunk``'s samples as mono float32 (at its own rate)."""
    return to_mono(int16_to_float(np.asarray(msg.samples, dtype=np.int16)), msg.channels)


def tool_call(name: str, arguments: dict[str, Any]) -> ToolCall:
    return ToolCall(name=name, arguments_json=json.dumps(arguments, ensure_ascii=False))


def tool_event(
    turn_id: str,
    name: str,
    arguments: dict[str, Any],
    *,
    ok: bool,
    cancelled: bool,
    result: Any,
    error: str,
) -> ToolEvent:
    """``llm/tool_events``: a finished call; ``result`` is the tool's own value (JSON)."""
    if ok:
        outcome = ToolEvent.OUTCOME_SUCCEEDED
    elif cancelled:
        outcome = ToolEvent.OUTCOME_CANCELLED
    else:
        outcome = ToolEvent.OUTCOME_FAILED
    return ToolEvent(
        turn_id=turn_id,
        call=tool_call(name, arguments),
        outcome=outcome,
        result_json="" if result is None else json.dumps(result, default=str, ensure_ascii=False),
        error=error or "",
    )


def tool_event_dict(msg: ToolEvent) -> dict[str, Any]:
    """A ToolEvent as a plain record (reports, the console)."""
    return {
        "turn_id": msg.turn_id,
        "tool": msg.call.name,
        "arguments": _loads(msg.call.arguments_json, {}),
        "ok": msg.outcome == ToolEvent.OUTCOME_SUCCEEDED,
        "cancelled": msg.outcome == ToolEvent.OUTCOME_CANCELLED,
        "result": _loads(msg.result_json, None),
        "error": msg.error,
    }


def joint_command(names: list[str], positions: Any, origin: str) -> JointCommand:
    return JointCommand(origin=origin, name=list(names), position=[float(x) for x in positions])


def game_state(snapshot: dict[str, Any]) -> GameState:
    """``game/state`` from ``GameState.to_dict()`` of the core."""
    shop, player = snapshot["shop"], snapshot["player"]
    return GameState(
        shop_gold=int(shop["gold"]),
        buy_ratio=float(shop["buy_ratio"]),
        shop_items=[
            ShopItem(
                name=i["name"], category=i["category"], price=int(i["price"]), stock=int(i["stock"])
            )
            for i in shop["items"]
        ],
        player_gold=int(player["gold"]),
        player_items=[ItemCount(name=n, count=int(c)) for n, c in player["items"].items()],
    )


def game_state_dict(msg: GameState) -> dict[str, Any]:
    """The inverse of ``game_state``: the core's snapshot layout."""
    return {
        "shop": {
            "gold": msg.shop_gold,
            "buy_ratio": round(float(msg.buy_ratio), 6),
            "items": [
                {"name": i.name, "category": i.category, "price": i.price, "stock": i.stock}
                for i in msg.shop_items
            ],
        },
        "player": {"gold": msg.player_gold, "items": {i.name: i.count for i in msg.player_items}},
    }


def _loads(text: str, empty: Any) -> Any:
    if not text:
        return empty
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text

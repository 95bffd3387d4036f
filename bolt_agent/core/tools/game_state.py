"""The blacksmith shop's game state: inventory, gold, and the trade rules behind its tools.

``GameState`` holds the shop's items (category, price, stock), the shop's and the player's gold and
the player's items. Trades that cannot happen raise ``TradeRefused`` with a code and a sentence the
LLM can repeat. ``GameTools`` is the tool front end: it validates ``arguments_json`` against each
tool's JSON schema (the same as the blacksmith profile's), serialises calls and returns a
``ToolOutcome``. The initial state comes from ``config/game_state.yaml``.
"""

from __future__ import annotations

import copy
import json
import re
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from bolt_agent.core.paths import config_dir

CATEGORIES = ("weapons", "armour", "tools")

#: argument schemas of the tools this state serves (kept equal to config/profiles/blacksmith_npc)
TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    "check_shop_inventory": {
        "type": "object",
        "properties": {"category": {"type": "string", "enum": [*CATEGORIES, "all"]}},
        "required": [],
    },
    "sell_to_player": {
        "type": "object",
        "properties": {
            "item": {
                "type": "string",
                "description": "The item's name as listed in the inventory.",
            },
            "quantity": {"type": "integer", "minimum": 1, "maximum": 10},
        },
        "required": ["item"],
    },
    "buy_from_player": {
        "type": "object",
        "properties": {
            "item": {"type": "string"},
            "offered_price": {"type": "integer", "minimum": 0, "maximum": 1000},
        },
        "required": ["item", "offered_price"],
    },
}


class TradeRefused(Exception):
    """A trade the rules forbid. ``code``: unknown_item, out_of_stock, player_cannot_afford,
    shop_cannot_afford, unreasonable_price, player_lacks_item."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


@dataclass
class Item:
    name: str
    category: str
    price: int  # what the shop asks, gold
    stock: int


@dataclass
class GameState:
    shop_gold: int
    player_gold: int
    items: dict[str, Item]  # by normalised name
    player_items: dict[str, int] = field(default_factory=dict)  # normalised name → count
    buy_ratio: float = 0.6  # the shop pays at most this share of an item's price

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GameState:
        """From the YAML layout (``shop: {gold, buy_ratio, items: [...]}, player: {...}``)."""
        try:
            shop, player = data["shop"], data.get("player", {})
            items = {}
            for raw in shop["items"]:
                item = Item(str(raw["name"]), str(raw["category"]), int(raw["price"]),
                            int(raw.get("stock", 0)))  # fmt: skip
                if item.category not in CATEGORIES:
                    raise ValueError(f"{item.name}: category must be one of {CATEGORIES}")
                if item.price <= 0 or item.stock < 0:
                    raise ValueError(f"{item.name}: price must be > 0 and stock >= 0")
                items[normalise(item.name)] = item
            state = cls(int(shop["gold"]), int(player.get("gold", 0)), items,
                        buy_ratio=float(shop.get("buy_ratio", 0.6)))  # fmt: skip
            for name, count in (player.get("items") or {}).items():
                state.player_items[state.find(name).name] = int(count)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"invalid game state: missing or malformed {exc}") from None
        except TradeRefused as exc:
            raise ValueError(f"invalid game state: player item: {exc.reason}") from None
        return state

    @classmethod
    def load(cls, path: Path | str = "") -> GameState:
        """From a YAML file ('' → ``config/game_state.yaml``)."""
        path = Path(path) if path else config_dir() / "game_state.yaml"
        return cls.from_dict(yaml.safe_load(path.read_text()))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly snapshot (published on ``game/state``)."""
        return {
            "shop": {
                "gold": self.shop_gold,
                "buy_ratio": self.buy_ratio,
                "items": [asdict(i) for i in self.items.values()],
            },
            "player": {"gold": self.player_gold, "items": dict(self.player_items)},
        }

    # -- lookup ---------------------------------------------------------------------------------
    def find(self, name: str) -> Item:
        """The item called ``name`` (case, articles and a plural 's' ignored) or TradeRefused."""
        key = normalise(name)
        for candidate in (key, re.sub(r"^(a|an|the|some)\s+", "", key)):
            for variant in (candidate, candidate.removesuffix("s"), candidate.removesuffix("es")):
                if variant in self.items:
                    return self.items[variant]
        known = ", ".join(i.name for i in self.items.values())
        raise TradeRefused("unknown_item", f"there is no item called {name!r}; known: {known}")

    # -- tools ----------------------------------------------------------------------------------
    def check_inventory(self, category: str = "all") -> dict[str, Any]:
        chosen = [i for i in self.items.values() if category in ("all", i.category)]
        return {
            "category": category,
            "items": [asdict(i) for i in chosen if i.stock > 0],
            "out_of_stock": [i.name for i in chosen if i.stock == 0],
            "player_gold": self.player_gold,
        }

    def sell_to_player(self, item: str, quantity: int = 1) -> dict[str, Any]:
        found = self.find(item)
        if found.stock == 0:
            raise TradeRefused("out_of_stock", f"{found.name} is out of stock")
        if found.stock < quantity:
            raise TradeRefused("out_of_stock", f"only {found.stock} {found.name} left in stock")
        total = found.price * quantity
        if self.player_gold < total:
            raise TradeRefused(
                "player_cannot_afford",
                f"{quantity} {found.name} cost {total} gold; the player has {self.player_gold}",
            )
        found.stock -= quantity
        self.shop_gold += total
        self.player_gold -= total
        self.player_items[found.name] = self.player_items.get(found.name, 0) + quantity
        return {
            "item": found.name,
            "quantity": quantity,
            "price_each": found.price,
            "total": total,
            "player_gold": self.player_gold,
            "stock_left": found.stock,
        }

    def max_offer(self, item: Item) -> int:
        return int(item.price * self.buy_ratio)

    def buy_from_player(self, item: str, offered_price: int) -> dict[str, Any]:
        found = self.find(item)
        if self.player_items.get(found.name, 0) == 0:
            raise TradeRefused("player_lacks_item", f"the player has no {found.name} to sell")
        if offered_price > self.max_offer(found):
            raise TradeRefused(
                "unreasonable_price",
                f"{offered_price} gold is unreasonable for {found.name} "
                f"(sells at {found.price}); the shop pays at most {self.max_offer(found)}",
            )
        if self.shop_gold < offered_price:
            raise TradeRefused(
                "shop_cannot_afford",
                f"the shop has only {self.shop_gold} gold, not {offered_price}",
            )
        self.player_items[found.name] -= 1
        if self.player_items[found.name] == 0:
            del self.player_items[found.name]
        found.stock += 1
        self.shop_gold -= offered_price
        self.player_gold += offered_price
        return {"item": found.name, "paid": offered_price, "player_gold": self.player_gold,
                "stock": found.stock}  # fmt: skip


def normalise(name: str) -> str:
    return " ".join(str(name).lower().replace("-", " ").split())


@dataclass(frozen=True)
class ToolOutcome:
    success: bool
    result: dict[str, Any] = field(default_factory=dict)
    error: str = ""

    def result_json(self) -> str:
        return json.dumps(self.result, ensure_ascii=False) if self.result else ""


class GameTools:
    """Thread-safe tool front end: JSON arguments in, ``ToolOutcome`` out; never raises."""

    def __init__(self, state: GameState) -> None:
        self.state = state
        self._lock = threading.Lock()
        self._validators = {n: jsonschema.Draft202012Validator(s) for n, s in TOOL_SCHEMAS.items()}

    @property
    def names(self) -> list[str]:
        return list(TOOL_SCHEMAS)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return copy.deepcopy(self.state.to_dict())

    def execute(self, tool_name: str, arguments_json: str) -> ToolOutcome:
        if tool_name not in self._validators:
            return ToolOutcome(False, error=f"unknown tool {tool_name!r}; known: {self.names}")
        try:
            args = json.loads(arguments_json) if arguments_json.strip() else {}
        except json.JSONDecodeError as exc:
            return ToolOutcome(False, error=f"arguments_json is not JSON: {exc}")
        errors = sorted(self._validators[tool_name].iter_errors(args), key=lambda e: e.path)
        if errors:
            where = "/".join(str(p) for p in errors[0].absolute_path) or "arguments"
            return ToolOutcome(False, error=f"invalid arguments for {tool_name}: {where}: "
                               f"{errors[0].message}")  # fmt: skip
        with self._lock:
            try:
                if tool_name == "check_shop_inventory":
                    result = self.state.check_inventory(args.get("category", "all"))
                elif tool_name == "sell_to_player":
                    result = self.state.sell_to_player(args["item"], args.get("quantity", 1))
                else:
                    result = self.state.buy_from_player(args["item"], args["offered_price"])
            except TradeRefused as exc:
                return ToolOutcome(False, {"refused": exc.code, "reason": exc.reason}, exc.reason)
        return ToolOutcome(True, result)

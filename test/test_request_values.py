"""Argument values copied from the request (``core/tools/request_values``): which item and
which number a request names, and the registry narrowed to them. Synchronous, no model."""

import pytest

from bolt_agent.core.llm.profile import load_profile
from bolt_agent.core.llm.tool_grammar import build_grammar
from bolt_agent.core.tools.registry import ToolConfigError, ToolRegistry
from bolt_agent.core.tools.request_values import (
    named_choice,
    named_number,
    named_value,
    narrowed_to,
    numbers_in,
)

ITEMS = [
    "iron sword",
    "steel longsword",
    "war hammer",
    "hunting dagger",
    "chainmail shirt",
    "iron helmet",
    "smithing hammer",
    "horseshoe",
]


@pytest.mark.parametrize(
    ("text", "item"),
    [
        ("This iron sword has seen better days.", "iron sword"),  # all its words
        ("Are those iron helmets any good?", "iron helmet"),  # a plural
        ("A dagger would suit me.", "hunting dagger"),  # a word no other item has
        ("Is the longsword sharp?", "steel longsword"),
        ("What about the war hammer over there?", "war hammer"),  # not the smithing hammer
        ("Horseshoes wear out fast.", "horseshoe"),
        ("Got a hammer?", None),  # two hammers: ambiguous
        ("Anything made of iron?", None),  # a sword and a helmet
        ("My iron sword for your war hammer?", None),  # two items named
        ("Good evening to you.", None),
        ("Not the iron sword, the longsword.", None),  # one in full, one by its own word
    ],
)
def test_the_item_a_request_names(text, item):
    assert named_choice(text, ITEMS) == item


def test_numbers_in_digits_or_words():
    counted = frozenset({"iron", "helmet", "horseshoe"})
    assert numbers_in("Sell me two iron helmets.", counted) == []  # a count, not a price
    assert numbers_in("I'd like 3 horseshoes.", counted) == []
    assert numbers_in("Buy my 2nd helmet for 30?") == [30]  # an ordinal is no number
    assert numbers_in("I'll give you 1,000 for it.") == [1000]
    assert numbers_in("two thousand five hundred gold") == [2500]
    assert numbers_in("turn -20 degrees, or 20-30") == [-20, 20, 30]
    assert numbers_in("9" * 40) == []  # not a price: nor a crash
    assert numbers_in("I'm asking 7 gold.") == [7]
    assert numbers_in("twenty five gold") == [25]
    assert numbers_in("a hundred and fifty") == [150]
    assert numbers_in("one hundred twenty five") == [125]
    assert numbers_in("two swords for fifty gold") == [2, 50]
    assert numbers_in("one of your helmets, for one hundred") == [100]  # "one" alone: a pronoun
    # with digits, words are not numbers ("one" is often a pronoun)
    assert numbers_in("I'll sell you one for 40 gold.") == [40]
    assert numbers_in("Hello there.") == []
    assert named_number("two swords for fifty gold", 0, 1000) is None  # two: ambiguous
    assert named_number("2 swords for 5000 gold", 0, 1000) == 2  # 5000 is out of bounds
    assert named_number("Would 9 gold do for the dagger?", 0, None) == 9
    # an integer the schema does not admit is not copied (the grammar would admit no call)
    assert named_value("make it 7", {"type": "integer", "enum": [1, 2, 5]}) is None
    assert named_value("make it 5", {"type": "integer", "enum": [1, 2, 5]}) == 5
    assert named_value("make it 7", {"type": "integer", "multipleOf": 5}) is None


def test_the_registry_is_narrowed_to_what_the_request_names():
    registry = load_profile("blacksmith_npc").registry
    text = "Would you take my hunting dagger? I want 7 gold for it."
    named = narrowed_to(registry, text)
    buy = named.get("buy_from_player").parameters["properties"]
    assert buy["item"]["enum"] == ["hunting dagger"] and buy["offered_price"]["enum"] == [7]
    sell = named.get("sell_to_player").parameters["properties"]
    assert sell["item"]["enum"] == ["hunting dagger"]
    assert "enum" not in sell["quantity"]  # not copied: 7 is a price here
    # the original is untouched; validation follows the narrowed one
    assert len(registry.get("buy_from_player").parameters["properties"]["item"]["enum"]) == 9
    assert named.validate("buy_from_player", {"item": "horseshoe", "offered_price": 7})
    assert named.validate("buy_from_player", {"item": "hunting dagger", "offered_price": 70})
    assert named.validate("buy_from_player", {"item": "hunting dagger", "offered_price": 7}) is None
    # the grammar admits the copied values only (not a digit rule for the price)
    grammar = build_grammar(named, "buy_from_player", call_format="gemma4")
    assert '"hunting dagger"' in grammar and '"iron sword"' not in grammar
    assert '"7"' in grammar and "[1-9] [0-9]" not in grammar
    # the JSON call format too: a fixed value stands, not turned back into a digits rule
    json_grammar = build_grammar(named, "buy_from_player", call_format="json")
    assert 'offered-price ::= "7"' in json_grammar and "int0 ::=" not in json_grammar
    assert "int0 ::=" in build_grammar(registry, "buy_from_player", call_format="json")
    # nothing named: the same registry
    assert narrowed_to(registry, "Good evening to you.") is registry
    reachy = load_profile("reachy_mini").registry
    assert narrowed_to(reachy, "Nod 3 times.") is reachy  # no tool copies anything


def test_the_narrowed_grammar_compiles_in_llama_cpp():
    from llama_cpp import Llama
    from llama_cpp import llama_cpp as capi

    from bolt_agent.core.models import resolve_model

    vocab = Llama(str(resolve_model("", kind="llm")), vocab_only=True, verbose=False)
    named = narrowed_to(load_profile("blacksmith_npc").registry, "My war hammer, 45 gold.")
    for call_format in ("gemma4", "json"):
        grammar = build_grammar(named, "auto", call_format=call_format).encode()
        sampler = capi.llama_sampler_init_grammar(vocab._model.vocab, grammar, b"root")
        assert sampler, call_format
        capi.llama_sampler_free(sampler)


def _tool(from_request, prop):
    return {
        "name": "sell",
        "binding": {"type": "execute_tool", "action": "game/execute_tool"},
        "parameters": {"type": "object", "properties": {"item": prop}},
        "from_request": from_request,
    }


def test_from_request_is_checked_when_loaded():
    with pytest.raises(ToolConfigError, match="'price', not an argument"):
        ToolRegistry.from_config([_tool(["price"], {"type": "string", "enum": ["a", "b"]})])
    with pytest.raises(ToolConfigError, match="'item', not an argument"):
        ToolRegistry.from_config([_tool(["item"], True)])  # a boolean schema
    with pytest.raises(ToolConfigError, match="string enum or an integer"):
        ToolRegistry.from_config([_tool(["item"], {"type": "string"})])
    tool = ToolRegistry.from_config([_tool(["item"], {"type": "integer"})]).get("sell")
    assert tool.from_request == ("item",)

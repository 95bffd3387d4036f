"""`bolt-agent eval`: the request sets and the scoring rules (the run itself is the CLI's)."""

from __future__ import annotations

import pathlib

import pytest

from bolt_agent.core.llm.evaluation import (
    MIN_REQUESTS,
    EvalRequest,
    TurnRecord,
    call_matches,
    load_eval_set,
    score,
)
from bolt_agent.core.llm.profile import load_profile

TEST_DIR = pathlib.Path(__file__).parent


@pytest.mark.parametrize("name", ["reachy_mini", "blacksmith_npc"])
def test_each_profile_has_its_own_request_set(name):
    eval_set = load_eval_set(name)
    profile = load_profile(name)
    assert eval_set.profile == name and len(eval_set.requests) >= MIN_REQUESTS
    assert isinstance(eval_set.params.get("seed"), int) and eval_set.params["seed"] >= 0
    examples = {ex.user.lower() for ex in profile.examples}
    tests = "\n".join(p.read_text() for p in TEST_DIR.glob("test_*.py")).lower()
    for request in eval_set.requests:
        assert request.text.lower() not in examples  # written for the eval, not shown to it
        assert request.text.lower() not in tests  # nor one of the tests' prompts
        if request.tool:  # what it expects is a call the profile allows
            assert profile.registry.validate(request.tool, request.arguments) is None, request


def test_blacksmith_set_sells_and_buys_named_items():
    requests = load_eval_set("blacksmith_npc").requests
    tools = {r.tool for r in requests}
    assert {"sell_to_player", "buy_from_player"} <= tools
    assert all(r.arguments.get("item") for r in requests)


def test_call_matching_compares_items_by_their_words():
    sell = EvalRequest("an axe, please", "sell_to_player", {"item": "war hammer"})
    assert call_matches(sell, [{"name": "sell_to_player", "arguments": {"item": "a War Hammer"}}])
    assert not call_matches(sell, [{"name": "sell_to_player", "arguments": {"item": "hammer"}}])
    assert not call_matches(
        sell, [{"name": "buy_from_player", "arguments": {"item": "war hammer"}}]
    )
    assert not call_matches(sell, [])
    assert call_matches(EvalRequest("Hello!"), [])
    assert not call_matches(EvalRequest("Hello!"), [{"name": "sell_to_player", "arguments": {}}])


def test_the_figures():
    requests = (
        EvalRequest("nod", "t", {"a": "nod"}),
        EvalRequest("wave", "t", {"a": "wave"}),
        EvalRequest("hi"),
    )
    records = [
        TurnRecord("nod", ["Sure, a nod."], [{"name": "t", "arguments": {"a": "nod"}}], True, 40),
        TurnRecord(
            "wave", ["tool_call|", "Bye."], [{"name": "t", "arguments": {"a": "x"}}], False, 60
        ),
        TurnRecord("hi", ["Hello!"], [], None, 20),
    ]
    figures = score(requests, records)
    assert figures["tool_choice_accuracy"] == pytest.approx(2 / 3)
    assert figures["tool_name_accuracy"] == pytest.approx(1.0)  # wave: right tool, wrong value
    assert figures["speakable_sentence_rate"] == pytest.approx(3 / 4)
    assert figures["unspeakable_sentences"] == ["tool_call|"]
    assert figures["speech_before_goal_rate"] == pytest.approx(1 / 2)
    assert figures["turns_with_goals"] == 2
    assert figures["mean_turn_tokens"] == pytest.approx(40)
    assert figures["tool_choice_by_tool"] == {"t": 0.5, "none": 1.0}


def test_tool_and_item_ignores_only_the_numbers():
    """ "Sells/buys the item asked for": item compared, price not; the full figure stays."""
    requests = (
        EvalRequest("buy my axe", "buy", {"item": "war axe", "offered_price": 40}),
        EvalRequest("buy my sword", "buy", {"item": "iron sword", "offered_price": 20}),
        EvalRequest("sell me a hammer", "sell", {"item": "war hammer"}),
    )
    records = [
        TurnRecord(
            "a", ["Deal."], [{"name": "buy", "arguments": {"item": "war axe", "offered_price": 12}}]
        ),
        TurnRecord(
            "b",
            ["Deal."],
            [{"name": "buy", "arguments": {"item": "iron sword", "offered_price": 20}}],
        ),
        TurnRecord("c", ["Here."], [{"name": "sell", "arguments": {"item": "war"}}]),
    ]
    figures = score(requests, records)
    assert figures["tool_choice_accuracy"] == pytest.approx(1 / 3)
    assert figures["tool_item_accuracy"] == pytest.approx(2 / 3)
    assert figures["tool_name_accuracy"] == pytest.approx(1.0)


def test_cli_params_and_seeds_and_the_summary_over_seeds():
    from bolt_agent.cli.eval import parse_params, parse_seeds, summary, summary_table, table

    assert parse_params(["model_sampling=false", "temperature=0.2", "few_shot=on"]) == {
        "model_sampling": False,
        "temperature": 0.2,
        "few_shot": "on",
    }
    with pytest.raises(ValueError, match="NAME=VALUE"):
        parse_params(["temperature"])
    assert parse_seeds("7,8, 9") == [7, 8, 9]
    with pytest.raises(ValueError):
        parse_seeds("-1")
    requests = (EvalRequest("nod", "t", {"a": "nod"}),) * 12
    runs = []
    for seed, right in ((7, 12), (8, 6)):
        records = [
            TurnRecord("nod", ["Nod."], [{"name": "t", "arguments": {"a": "nod"}}], True, 10)
        ] * right + [TurnRecord("nod", ["No."], [], None, 10)] * (12 - right)
        runs.append({**score(requests, records), "profile": "p", "llm_node_params": {"seed": seed}})
    s = summary(runs)["p"]
    assert s["runs"] == 2 and s["tool_choice_accuracy"] == {"mean": 0.75, "min": 0.5, "max": 1.0}
    assert "| p | 2 | 75 % (50–100) |" in summary_table(runs)
    assert "| p | 8 | 12 | 50 % |" in table(runs)

"""`bolt-agent eval`: the request sets and the scoring rules (the run itself is the CLI's)."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from bolt_agent.core.llm.evaluation import (
    SPLITS,
    EvalRequest,
    TurnRecord,
    call_matches,
    eval_profiles,
    load_eval_set,
    score,
)
from bolt_agent.core.llm.profile import load_profile

TEST_DIR = pathlib.Path(__file__).parent


@pytest.mark.parametrize("name", ["reachy_mini", "blacksmith_npc"])
def test_each_profile_has_a_dev_and_a_held_out_test_split(name):
    assert name in eval_profiles()
    profile = load_profile(name)
    examples = {ex.user.lower() for ex in profile.examples}
    says = " ".join(s for o in profile.selection.options for s in o.says).lower()
    tests = "\n".join(p.read_text() for p in TEST_DIR.glob("test_*.py")).lower()
    splits = {split: load_eval_set(name, split) for split in SPLITS}
    texts = [{r.text.lower() for r in s.requests} for s in splits.values()]
    assert not texts[0] & texts[1]  # no request in both
    assert len(texts[0]) + len(texts[1]) >= 100  # the "at least 100 per profile"
    for split, eval_set in splits.items():
        assert eval_set.profile == name and eval_set.split == split
        assert len(eval_set.requests) >= 50
        assert isinstance(eval_set.params.get("seed"), int) and eval_set.params["seed"] >= 0
        kinds = {r.kind for r in eval_set.requests}
        assert kinds == {"tool", "chitchat", "persona"}
        for request in eval_set.requests:
            text = request.text.lower()
            assert text not in examples  # written for the eval, not shown to it
            assert text not in tests  # nor one of the tests' prompts
            assert text.rstrip(".!?") not in says  # nor a selection description
            if request.tool:  # what it expects is a call the profile allows
                assert profile.registry.validate(request.tool, request.arguments) is None, request
            if request.kind == "persona":
                assert request.mentions, request


def test_a_request_whose_kind_contradicts_its_expectation_is_refused(tmp_path):
    path = tmp_path / "x.yaml"
    rows = [{"text": f"hi {i}", "kind": "chitchat", "expect": "none"} for i in range(12)]
    rows[3] = {"text": "nod", "kind": "chitchat", "expect": {"tool": "t", "arguments": {}}}
    path.write_text(yaml.safe_dump({"profile": "p", "requests": rows}))
    with pytest.raises(ValueError, match="kind 'chitchat'"):
        load_eval_set(str(path))
    with pytest.raises(ValueError, match="split"):
        load_eval_set("reachy_mini", "train")


def test_blacksmith_set_sells_and_buys_named_items():
    requests = load_eval_set("blacksmith_npc", "test").requests
    tools = {r.tool for r in requests}
    assert {"sell_to_player", "buy_from_player", "check_shop_inventory"} <= tools
    assert all(r.arguments.get("item") for r in requests if "player" in r.tool)


def test_copies_repeats_persona_facts_and_no_tool():
    requests = (
        EvalRequest("Thank you, that was lovely.", kind="chitchat"),
        EvalRequest("What is your name?", kind="persona", mentions=("reachy",)),
        EvalRequest("Nod please", "t", {"a": "nod"}),
        EvalRequest("Tell me a joke", kind="chitchat"),
    )
    records = [
        TurnRecord(requests[0].text, ["Thank you,", "that was lovely."]),
        TurnRecord(requests[1].text, ["I am Reachy."]),
        TurnRecord(requests[2].text, ["Sure."], [{"name": "t", "arguments": {"a": "nod"}}]),
        TurnRecord(requests[3].text, ["Sure."], [{"name": "t", "arguments": {"a": "nod"}}]),
    ]
    figures = score(requests, records)
    assert figures["copy_rate"] == pytest.approx(1 / 4)
    assert figures["persona_fact_rate"] == 1.0
    assert figures["no_tool_rate"] == pytest.approx(2 / 3)
    assert figures["tool_request_accuracy"] == 1.0
    # "Sure." twice in one conversation: 5 sentences, 4 distinct; apart, all distinct
    assert figures["distinct_sentence_rate"] == pytest.approx(4 / 5)
    records[3].session = 1
    assert score(requests, records)["distinct_sentence_rate"] == 1.0
    # "Sure." opens 2 of the 4 replies
    assert (figures["same_opening_word"], figures["same_opening_rate"]) == ("sure", 0.5)


def test_the_same_opening_word_counts_replies_not_sentences():
    from bolt_agent.core.llm.evaluation import same_opening

    records = [
        TurnRecord("a", ["Yes,", "a nod."]),
        TurnRecord("b", ["Yes, I can look."]),
        TurnRecord("c", ["Hello!", "Yes."]),
        TurnRecord("d", []),  # silent: not a reply that opens with anything
        TurnRecord("e", ["Yes!"], error="timed out"),
    ]
    assert same_opening(records) == ("yes", pytest.approx(2 / 3))
    assert same_opening([]) is None


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
    assert "| p | 2 | 75 % (50–100) | – | 75 % (50–100) |" in summary_table(runs)
    assert "| p | – | 8 | 12 | 50 % | – | 50 % |" in table(runs)

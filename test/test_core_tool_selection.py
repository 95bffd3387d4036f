"""Tool selection by scoring and the reply guard, in the turn runner (synchronous, scripted)."""

from __future__ import annotations

import pytest

from bolt_agent.core.llm.chat_template import Knobs
from bolt_agent.core.llm.dialogue import Dialogue
from bolt_agent.core.llm.profile import load_profile
from bolt_agent.core.llm.reply_guard import ReplyGuard, copied_share
from bolt_agent.core.llm.scripted_engine import ScriptedEngine
from bolt_agent.core.llm.tool_selection import (
    Option,
    SelectionConfigError,
    SelectionSpec,
    ToolSelector,
    pinned_registry,
)
from bolt_agent.core.llm.turn_runner import RunnerConfig, TurnRequest, TurnRunner
from support.turn_sinks import RecordingSink

NOD = '<|tool_call>call:trigger_reachy_animation{animation_name:<|"|>happy_nod<|"|>}<tool_call|>'
OFF = Knobs(enable_thinking=False)
SCAN = '<|tool_call>call:trigger_reachy_animation{animation_name:<|"|>scan_room<|"|>}<tool_call|>'


@pytest.fixture(scope="module")
def reachy():
    return load_profile("reachy_mini")


def scoring(fn):
    """A channel scorer from ``fn(prefixes, text)``, the scores of every description, asked
    for some of them (``only``) as an engine is."""

    def scorer(prefixes, text, only=None):
        scores = fn(prefixes, text)
        return scores if scores is None or only is None else [scores[i] for i in only]

    return scorer


def favour(words: str, score: float = -5.0, rest: float = -20.0):
    """A channel scorer that likes the descriptions holding ``words``."""
    return scoring(lambda prefixes, text: [score if words in p else rest for p in prefixes])


def runner_for(reachy, scripts, channel, guard=None, **config):
    engine = ScriptedEngine(scripts)
    engine.channel = channel
    dialogue = Dialogue(reachy.persona, [], reachy.nearest(1, short=True))
    selector = ToolSelector(reachy.selection, engine.channel_scores)
    # constrained, as the bundled model runs (the scripted engine ignores the grammar, so the
    # step's validator is what holds it to the chosen call here)
    cfg = RunnerConfig(constrained=True, **config)
    return engine, TurnRunner(engine, dialogue, reachy.registry, cfg, selector, guard)


def test_the_profiles_options_cover_every_animation_and_no_tool(reachy):
    labels = {o.label for o in reachy.selection.options}
    for name in ("curious_tilt", "happy_nod", "scan_room", "wave_antenna"):
        assert f"trigger_reachy_animation(animation_name={name})" in labels
    assert "none" in labels
    assert load_profile("blacksmith_npc").selection.pin


@pytest.mark.parametrize(
    "block, words",
    [
        ({"options": [{"tool": "fly", "says": "I fly."}]}, "unknown tool"),
        (
            {"options": [{"tool": "trigger_reachy_animation", "arguments": {"animation_name": 1}}]},
            "bad animation_name",
        ),
        ({"options": [{"tool": "trigger_reachy_animation"}]}, "no 'says'"),
        ({"template": "no placeholder"}, "{says}"),
    ],
)
def test_a_bad_selection_block_is_a_clear_error(reachy, block, words):
    with pytest.raises(SelectionConfigError, match=words.replace("{", r"\{").replace("}", r"\}")):
        SelectionSpec.from_config(block, reachy.registry)


def test_the_best_explained_option_wins_and_no_tool_needs_no_lead(reachy):
    selector = ToolSelector(reachy.selection, favour("nod yes"))
    chosen = selector.select("Could you bob your head for me?")
    assert chosen.option.arguments == {"animation_name": "happy_nod"}
    assert chosen.margin == pytest.approx(15.0 - reachy.selection.tool_margin)
    # every option near the same: a tool must explain the request by tool_margin more
    level = ToolSelector(reachy.selection, scoring(lambda prefixes, _: [-10.0] * len(prefixes)))
    assert level.select("What a day it was.").option.tool == ""
    assert level.select("What a day it was.", allow_none=False).option.tool  # 'required'


def test_a_request_is_scored_once_and_an_engine_without_scores_gives_no_choice(reachy):
    calls = []

    def scorer(prefixes, text):
        calls.append(text)
        return [-1.0] * len(prefixes)

    selector = ToolSelector(reachy.selection, scoring(scorer))
    first, again = selector.select("Look around"), selector.select("  Look   around ")
    assert len(calls) == 1 and again.seconds == 0.0 and first.option == again.option
    assert ToolSelector(reachy.selection, scoring(lambda p, t: None)).select("Look around") is None


def test_a_pinned_registry_admits_only_the_chosen_call(reachy):
    option = Option("trigger_reachy_animation", {"animation_name": "happy_nod"})
    pinned = pinned_registry(reachy.registry, option)
    assert pinned.names == ["trigger_reachy_animation"]
    assert pinned.validate("trigger_reachy_animation", {"animation_name": "happy_nod"}) is None
    assert pinned.validate("trigger_reachy_animation", {"animation_name": "scan_room"})
    scan = {"animation_name": "scan_room"}
    assert reachy.registry.validate("trigger_reachy_animation", scan) is None


def test_the_selected_animation_is_shown_and_called_and_the_turn_ends_after_it(reachy):
    # the model would say and call scan_room; the scores say happy_nod
    engine, runner = runner_for(reachy, [f"Let me look.{SCAN}", "I see a room."], favour("nod"))
    sink = RecordingSink()
    result = runner.run(TurnRequest("t1", "Could you bob your head for me?", OFF), sink)
    assert result.selection == "trigger_reachy_animation(animation_name=happy_nod)"
    # the nearest example before the request is a happy_nod one, whatever the words
    example = engine.prompts[0].split("<|turn>user")[-2]  # the exchange before the request
    assert "happy_nod" in example and "scan_room" not in example
    # the validator held the step to the pinned call: scan_room was refused, not dispatched
    assert not [e for e in sink.events if e[0] == "dispatch"]
    assert any("scan_room" in e for e in result.errors)
    nod = runner_for(reachy, [f"Here is a nod.{NOD}", "I nodded."], favour("nod"))[1]
    sink = RecordingSink()
    result = nod.run(TurnRequest("t2", "Could you bob your head for me?", OFF), sink)
    assert sink.kinds() == ["sentence", "dispatch"]
    assert result.steps == 1  # after_result: end, so no made-up closing line


def test_unpinned_scores_decide_only_that_some_tool_is_called(reachy):
    import dataclasses

    engine, runner = runner_for(reachy, [f"Let me look.{SCAN}"], favour("nod"), max_steps=1)
    runner.selector = ToolSelector(
        dataclasses.replace(reachy.selection, pin=False), engine.channel_scores
    )
    sink = RecordingSink()
    result = runner.run(TurnRequest("t1", "Could you bob your head for me?", OFF), sink)
    assert result.selection.endswith("happy_nod)")
    assert sink.events[-2][1:] == ("trigger_reachy_animation", {"animation_name": "scan_room"})


def test_an_unconstrained_model_chooses_for_itself(reachy):
    _, runner = runner_for(reachy, [f"Let me look.{SCAN}"], favour("nod"))
    runner.config = RunnerConfig(constrained=False, max_steps=1)
    sink = RecordingSink()
    result = runner.run(TurnRequest("t1", "Look around", OFF), sink)
    assert result.selection == "" and sink.events[-2][1] == "trigger_reachy_animation"


def test_no_tool_is_a_turn_without_calls_and_with_a_reply_example(reachy):
    engine, runner = runner_for(
        reachy, ["I am Reachy, a small robot."], favour("I am Reachy", -2.0, -30.0)
    )
    sink = RecordingSink()
    result = runner.run(TurnRequest("t1", "Tell me your name", OFF), sink)
    assert result.selection == "none" and sink.kinds() == ["sentence"]
    example = engine.prompts[0].split("<|turn>user")[-2]  # the exchange before the request
    assert example.startswith("\nHello! What is your name?") and "Hi, I am Reachy" in example
    assert "call:" not in example


def test_a_failed_animation_still_gets_words(reachy):
    from bolt_agent.core.llm.turn_runner import ToolResult

    _, runner = runner_for(reachy, [f"A nod.{NOD}", "My head is stuck."], favour("nod"))
    sink = RecordingSink(lambda name, args: ToolResult(ok=False, error="robot unavailable"))
    result = runner.run(TurnRequest("t1", "nod please", OFF), sink)
    assert result.steps == 2 and sink.events[-2][2] == "My head is stuck."


def test_copied_share_counts_the_users_words_in_order():
    assert copied_share("Thank you, that was lovely.", "Thank you, that was lovely!") == 1.0
    assert copied_share("I would like to buy an iron sword", "Aye, one iron sword.") == 2 / 8
    assert copied_share("", "anything") == 0.0
    guard = ReplyGuard(0.6)
    copy = guard.problem("That was lovely.", "Thank you, that was lovely.", [], "Thank you,")
    assert "copies" in copy
    assert guard.problem("You are welcome.", "Thank you, that was lovely.", []) is None
    assert "repeats" in guard.problem("Hello there!", "hi", ["hello there."])
    assert guard.problem("Yes.", "Yes", []) is None  # too short a request to copy


def test_the_first_token_steers_clear_of_recent_openers(reachy):
    scripts = ["Yes, a happy nod.", "I can look around for you.", "Thank you, kind one.", "Sure."]
    engine, runner = runner_for(
        reachy, scripts, None, ReplyGuard(), first_clause_chars=3, resample_tries=1
    )
    said = []
    for i, words in enumerate(("nod", "look", "thank you kindly")):
        sink = RecordingSink()
        runner.run(TurnRequest(f"t{i}", words, OFF), sink)
        said.append([e[2] for e in sink.events if e[0] == "sentence"])
    # turn 1 has nothing to avoid; turns 2 and 3 avoid turn 1's "Yes," (a first piece of more
    # words, "I can look around for you.", is something said, not a habit). Turn 3's first
    # try copies the user ("Thank you,"): kept back, and its second try avoids that too
    assert engine.avoided == [["Yes,"], ["Yes,"], ["Yes,", "Thank you,"]]
    assert said[2] == ["Sure."]
    assert ReplyGuard().openers(["Yes,", "Aye.", "Yes,", "I can look around.", ""]) == [
        "Yes,",
        "Aye.",
    ]


def test_a_copied_first_sentence_is_sampled_again_and_never_spoken(reachy):
    scripts = ["Thank you, that was lovely.", "You are very welcome."]
    engine, runner = runner_for(reachy, scripts, None, ReplyGuard())
    sink = RecordingSink()
    result = runner.run(TurnRequest("t1", "Thank you, that was lovely.", OFF), sink)
    said = [e[2] for e in sink.events if e[0] == "sentence"]
    assert said == ["You are very welcome."] and result.resampled == 1
    assert result.rejected == ["Thank you, that was lovely."] and len(engine.prompts) == 2
    assert runner.dialogue.turns[-1].steps[0].content == "You are very welcome."


def test_a_line_said_in_an_earlier_turn_is_not_said_again(reachy):
    scripts = ["Hello friend.", "Hello friend. Nice to see you.", "Hello friend. Good day."]
    _, runner = runner_for(reachy, scripts, None, ReplyGuard(), resample_tries=1)
    sink = RecordingSink()
    runner.run(TurnRequest("t1", "hi", OFF), sink)
    result = runner.run(TurnRequest("t2", "hi again", OFF), sink)
    said = [e[2] for e in sink.events if e[0] == "sentence"]
    # the second turn's first try repeats its first sentence: sampled again; the second try
    # repeats it too and has no tries left: the sentence is left out, the rest is said
    assert said == ["Hello friend.", "Good day."]
    assert result.resampled == 1 and result.rejected == ["Hello friend.", "Hello friend."]
    assert runner.dialogue.turns[-1].steps[0].content == "Good day."


def test_an_open_argument_is_chosen_by_scores_and_the_default_needs_no_lead(reachy):
    speed = reachy.selection.arguments[0]
    assert speed.name == "speed" and speed.values[0][0] == "normal"

    (normal,), (fast_says,) = speed.values[0][1], dict(speed.values)["fast"]

    def scorer(fast: float):
        def scores(prefixes, text):
            return [
                -5.0 if "nod yes" in p else fast if fast_says in p
                else -8.0 if normal in p else -20.0
                for p in prefixes
            ]  # fmt: skip

        return scoring(scores)

    # "fast" explains the request by more than the margin: pinned in the call
    chosen = ToolSelector(reachy.selection, scorer(-8.0 + speed.margin + 0.5)).select("Nod quick")
    assert chosen.option.arguments == {"animation_name": "happy_nod"}  # (examples match on it)
    assert chosen.arguments == {"speed": "fast"}
    assert chosen.call.label == "trigger_reachy_animation(animation_name=happy_nod,speed=fast)"
    pinned = pinned_registry(reachy.registry, chosen.call)
    assert pinned.validate("trigger_reachy_animation", {"animation_name": "happy_nod"})
    # by less: the default, which leaves the argument to the grammar
    chosen = ToolSelector(reachy.selection, scorer(-8.0 + speed.margin - 0.5)).select("Nod")
    assert chosen.arguments == {} and chosen.call == chosen.option
    # ... unless the default is pinned too (a tool that must be told: a shop's category)
    import dataclasses

    pinning = dataclasses.replace(
        reachy.selection, arguments=(dataclasses.replace(speed, pin_default=True),)
    )
    chosen = ToolSelector(pinning, scorer(-8.0 + speed.margin - 0.5)).select("Nod")
    assert chosen.arguments == {"speed": "normal"}
    # no tool chosen: no argument either
    none = ToolSelector(reachy.selection, scoring(lambda p, t: [-10.0] * len(p))).select("Nice")
    assert none.option.tool == "" and none.arguments == {}


def test_argument_values_are_scored_only_once_their_option_has_won(reachy):
    (speed,) = reachy.selection.arguments
    calls = []

    def scorer(prefixes, text, only=None):
        calls.append((text, list(only)))
        return [-5.0 if "nod yes" in prefixes[i] else -20.0 for i in only]

    selector = ToolSelector(reachy.selection, scorer)
    options = sum(len(o.says) for o in reachy.selection.options)
    values = sum(len(says) for _, says in speed.values)
    # every description stays one set (the engine keeps it cached), asked for in two parts
    assert len(selector.prefixes) == options + values
    # a nod takes a speed: its values are scored after the options, in a second call
    assert selector.select("Nod, please.").option.tool
    assert [len(only) for _, only in calls] == [options, values]
    assert set(calls[1][1]) == set(range(options, options + values))
    # no tool: the values are never scored
    calls.clear()

    def level(prefixes, text, only=None):
        calls.append((text, list(only)))
        return [-10.0] * len(only)

    assert ToolSelector(reachy.selection, level).select("What a day it was.").option.tool == ""
    assert [len(only) for _, only in calls] == [options]
    # asked again (a preemptive turn, then its final): nothing is scored again
    calls.clear()
    again = selector.select("Nod, please.")
    assert calls == [] and again.seconds == 0.0


@pytest.mark.parametrize(
    "arguments, words",
    [
        ({"speed": {"values": {"normal": "Fine."}}}, "two values"),
        ({"speed": {"values": {"normal": "Fine.", "warp": "Zoom."}}}, "bad"),
        ({"colour": {"values": {"red": "Red.", "blue": "Blue."}}}, "no option's tool"),
        ({"speed": {"values": {"normal": "Fine.", "fast": ""}}}, "no 'says'"),
    ],
)
def test_a_bad_argument_block_is_a_clear_error(reachy, arguments, words):
    block = {
        "options": [
            {
                "tool": "trigger_reachy_animation",
                "arguments": {"animation_name": "happy_nod"},
                "says": "A nod.",
            }
        ],
        "arguments": arguments,
    }
    with pytest.raises(SelectionConfigError, match=words):
        SelectionSpec.from_config(block, reachy.registry)


def test_a_request_naming_a_catalog_item_in_full_leans_to_a_trade():
    """ "No tool" explains the request a little better than a sale to the player does (by
    less than the bonus): naming a catalog item in full tips it to the tools that copy the
    item; naming it only in part ("the hammer") or naming none does not."""
    npc = load_profile("blacksmith_npc").selection
    assert npc.named_bonus > 1.0 and {t for t, _, _ in npc.copied} == {
        "sell_to_player",
        "buy_from_player",
    }

    tool_of = {s: o.tool for o in npc.options for s in o.says}
    # "no tool" leads a sale by half a nat past the margin; the rest (and argument values) far
    # behind
    level = {"": -10.0, "sell_to_player": -10.5 - npc.tool_margin}

    def scores(prefixes, _text):
        return [level.get(tool_of.get(p.split('"')[1], "?"), -30.0) for p in prefixes]

    selector = ToolSelector(npc, scoring(scores))
    assert selector.select("I'll take a smithing hammer.").option.tool == "sell_to_player"
    assert selector.select("I'll take those iron helmets.").option.tool == "sell_to_player"
    assert selector.select("I'll take the hammer.").option.tool == ""  # two hammers: in part
    assert selector.select("I'll take a nap.").option.tool == ""
    # without the bonus the same scores choose no tool
    plain = SelectionSpec(npc.options, npc.template, npc.tool_margin, arguments=npc.arguments)
    assert (
        ToolSelector(plain, scoring(scores)).select("I'll take a smithing hammer.").option.tool
        == ""
    )


def test_a_named_price_leans_to_the_tool_that_copies_it_and_none_away_from_it():
    """The two trades explain the request nearly alike (a purchase from the player a little
    better, as the bundled model had it for "sell me a horseshoe"): a price named tips it to
    the purchase (it copies the item and the price, the sale only the item); no price, or two,
    to the sale, since the purchase requires a price the model would have to make up."""
    npc = load_profile("blacksmith_npc").selection
    tool_of = {s: o.tool for o in npc.options for s in o.says}
    level = {"buy_from_player": -10.0, "sell_to_player": -10.5}

    def scores(prefixes, _text):
        return [level.get(tool_of.get(p.split('"')[1], "?"), -30.0) for p in prefixes]

    selector = ToolSelector(npc, scoring(scores))
    assert selector.select("My war hammer, 45 gold.").option.tool == "buy_from_player"
    assert selector.select("My war hammer, forty five gold.").option.tool == "buy_from_player"
    assert selector.select("Sell me the war hammer, smith.").option.tool == "sell_to_player"
    assert selector.select("My war hammer, 45 or 50 gold.").option.tool == "sell_to_player"
    # without the bonus, the channel's order stands
    plain = SelectionSpec(npc.options, npc.template, npc.tool_margin, arguments=npc.arguments)
    assert ToolSelector(plain, scoring(scores)).select(
        "Sell me the war hammer, smith."
    ).option.tool == ("buy_from_player")


def test_an_item_named_in_part_is_copied_but_weighs_nothing():
    """A sale explains the request half a nat past the margin better than "no tool": an item
    named only by its own word ("the longsword") leaves that lead alone; a request that names
    no item at all takes the bonus away, since the sale would need an item made up."""
    npc = load_profile("blacksmith_npc").selection
    tool_of = {s: o.tool for o in npc.options for s in o.says}
    level = {"": -10.5 - npc.tool_margin, "sell_to_player": -10.0}

    def scores(prefixes, _text):
        return [level.get(tool_of.get(p.split('"')[1], "?"), -30.0) for p in prefixes]

    selector = ToolSelector(npc, scoring(scores))
    assert selector.select("I'll take the longsword, smith.").option.tool == "sell_to_player"
    assert selector.select("I'll take it, smith.").option.tool == ""


def test_the_selected_trade_decodes_under_the_values_the_request_names():
    """The selection's path: the step's validator is the chosen tool's, narrowed to the item
    and the price the request names, so a call with the model's own item and price is refused
    (the scripted engine ignores the grammar, which admits only the named values)."""
    npc = load_profile("blacksmith_npc")
    buy = '<|tool_call>call:buy_from_player{{item:<|"|>{}<|"|>,offered_price:{}}}<tool_call|>'
    text = "My old hunting dagger is yours for 7 gold."

    def run(call):
        engine = ScriptedEngine([f"Let me see.{call}", "Done."])
        engine.channel = favour("sell me yours")
        selector = ToolSelector(npc.selection, engine.channel_scores)
        runner = TurnRunner(
            engine,
            Dialogue(npc.persona),
            npc.registry,
            RunnerConfig(constrained=True, max_steps=1),
            selector,
        )
        sink = RecordingSink()
        result = runner.run(TurnRequest("t1", text, OFF), sink)
        assert result.selection == "buy_from_player"
        return [e[2] for e in sink.events if e[0] == "dispatch"], result.errors

    calls, errors = run(buy.format("steel longsword", 120))
    assert not calls and any("offered_price" in e or "item" in e for e in errors), errors
    calls, errors = run(buy.format("hunting dagger", 7))
    assert calls == [{"item": "hunting dagger", "offered_price": 7}] and not errors

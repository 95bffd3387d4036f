"""Tool registry, constrained grammar, dialogue budgeting and interruption-aware history."""

from __future__ import annotations

import pytest
import yaml

from bolt_agent.core.llm.chat_template import ChatTemplate, Knobs
from bolt_agent.core.llm.dialogue import INTERRUPTED_MARKER, Dialogue, Step
from bolt_agent.core.llm.profile import _shared_values, _tool_words, load_profile
from bolt_agent.core.llm.tool_grammar import build_grammar
from bolt_agent.core.paths import config_dir
from bolt_agent.core.tools.registry import ToolConfigError, ToolRegistry


@pytest.fixture(scope="module")
def reachy():
    return load_profile("reachy_mini")


def test_profiles_load_with_their_tools():
    assert load_profile("reachy_mini").registry.names == ["trigger_reachy_animation"]
    npc = load_profile("blacksmith_npc").registry
    assert {"check_shop_inventory", "sell_to_player", "buy_from_player"} <= set(npc.names)


def test_validation_messages(reachy):
    reg = reachy.registry
    assert reg.validate("trigger_reachy_animation", {"animation_name": "happy_nod"}) is None
    assert "unknown tool 'fly'" in reg.validate("fly", {})
    msg = reg.validate("trigger_reachy_animation", {"animation_name": "moonwalk"})
    assert "animation_name" in msg and "moonwalk" in msg
    assert (
        "additional"
        in reg.validate(
            "trigger_reachy_animation", {"animation_name": "happy_nod", "volume": 3}
        ).lower()
    )


def test_binding_maps_arguments_to_goal_fields(reachy):
    binding = reachy.registry.get("trigger_reachy_animation").binding
    assert binding.goal_fields({"animation_name": "scan_room", "speed": "slow"}) == {
        "name": "scan_room",
        "speed": 0.6,
    }
    assert binding.goal_fields({"animation_name": "scan_room"}) == {
        "name": "scan_room",
        "speed": 1.0,
    }


def test_rate_limit(reachy):
    reg = ToolRegistry.from_config(
        [{"name": "t", "rate_limit_per_min": 2, "binding": {"type": "execute_tool", "action": "a"}}]
    )
    assert reg.admit("t", now=0.0) is None and reg.admit("t", now=1.0) is None
    assert "rate limit" in reg.admit("t", now=2.0)
    assert reg.admit("t", now=61.5) is None


@pytest.mark.parametrize(
    "entry, words",
    [
        ({"name": "x"}, "needs 'name' and 'binding'"),
        ({"name": "x", "binding": {"type": "teleport", "action": "a"}}, "binding type"),
        ({"name": "x", "binding": {"type": "execute_tool"}}, "'action'"),
        (
            {
                "name": "x",
                "binding": {"type": "execute_tool", "action": "a"},
                "parameters": {"type": "object", "properties": {"a": {"type": "nope"}}},
            },
            "schema",
        ),
    ],
)
def test_bad_tool_config_is_a_clear_error(entry, words):
    with pytest.raises(ToolConfigError, match=words):
        ToolRegistry.from_config([entry])


def test_grammar_follows_tool_choice(reachy):
    reg = reachy.registry
    assert "calls" not in build_grammar(reg, "none")
    assert "{1,1}" in build_grammar(reg, "required", max_calls=1)
    assert "{0,2}" in build_grammar(reg, "auto", max_calls=2)
    named = build_grammar(reg, "trigger_reachy_animation")
    assert '"\\"trigger_reachy_animation\\""' in named
    with pytest.raises(ValueError, match="unknown tool"):
        build_grammar(reg, "fly")
    # strings in calls cannot hide a marker such as </tool_call>; speech starts speakably
    # (the shop's items are a catalog enum now: a free-string item shows the string rule)
    entries = yaml.safe_load((config_dir() / "profiles" / "blacksmith_npc.yaml").read_text())
    sell = next(t for t in entries["tools"] if t["name"] == "sell_to_player")
    sell["parameters"]["properties"]["item"] = {"type": "string"}
    sell.pop("from_request")  # (a free string is not copied from the request)
    npc = ToolRegistry.from_config([sell])
    grammar = build_grammar(npc, "sell_to_player")
    assert r'char ::= [^"\\<]' in grammar
    assert '"1" | "2"' in grammar  # quantity 1..10 as an exact enum
    assert "speech ::= [A-Za-z0-9" in named


def test_grammars_compile_in_llama_cpp():
    """llama.cpp parses every grammar (NULL sampler = a parse error)."""
    from llama_cpp import Llama
    from llama_cpp import llama_cpp as capi

    from bolt_agent.core.models import resolve_model

    vocab = Llama(str(resolve_model("", kind="llm")), vocab_only=True, verbose=False)
    for profile in ("reachy_mini", "blacksmith_npc"):
        registry = load_profile(profile).registry
        for choice in ("auto", "none", "required", registry.names[0]):
            grammar = build_grammar(registry, choice).encode()
            sampler = capi.llama_sampler_init_grammar(vocab._model.vocab, grammar, b"root")
            assert sampler, (profile, choice)
            capi.llama_sampler_free(sampler)


def test_interruption_keeps_only_what_was_said():
    d = Dialogue("persona")
    turn = d.begin_turn("t1", "Tell me a story")
    turn.steps.append(Step(content="Once upon a time there was a robot. It loved to dance."))
    assert d.mark_interrupted("t1", "Once upon a time there was")
    assert turn.steps[0].content == f"Once upon a time there was {INTERRUPTED_MARKER}"
    assert not d.mark_interrupted("unknown", "x")


def test_scene_goes_into_the_user_turn_not_the_system_prompt():
    d = Dialogue("persona")
    d.begin_turn("t1", "what do you see?", scene="one person on the left")
    msgs = d.messages()
    assert msgs[0] == {"role": "system", "content": "persona"}
    assert "one person on the left" in msgs[1]["content"]


def test_hundred_turns_stay_within_the_context_and_keep_the_system_prompt():
    """Token-accurate budgeting with the real gemma tokenizer (vocab only)."""
    from llama_cpp import Llama

    from bolt_agent.core.models import resolve_model

    vocab = Llama(str(resolve_model("", kind="llm")), vocab_only=True, verbose=False)

    def count(text: str) -> int:
        return len(vocab.tokenize(text.encode(), add_bos=False, special=True))

    template, limit = ChatTemplate.bundled(), 1024
    d = Dialogue("You are Reachy, a small robot. " * 5)

    def prompt_tokens(messages):
        return count(template.render(messages, None, Knobs()))

    for i in range(100):
        turn = d.begin_turn(f"t{i}", f"Question number {i}: what is {i} plus {i}? " * 3)
        used = d.fit(prompt_tokens, limit)
        assert used <= limit
        assert d.messages()[0]["content"].startswith("You are Reachy")
        assert d.turns[-1] is turn
        turn.steps.append(Step(content=f"It is {2 * i}. " * 8))
    assert d.dropped_turns > 50
    assert prompt_tokens(d.messages()) <= limit + 200  # only the last answer may be over


# --- few-shot examples (issue 13) ------------------------------------------------------------


def test_reachy_examples_cover_every_animation_and_speak_before_each_call(reachy):
    enum = reachy.registry.as_openai()[0]["function"]["parameters"]["properties"]
    shown = {c["arguments"]["animation_name"] for ex in reachy.examples for c in ex.calls}
    assert shown == set(enum["animation_name"]["enum"])
    assert all(ex.say for ex in reachy.examples)


def test_blacksmith_examples_sell_and_buy_with_item_and_price():
    npc = load_profile("blacksmith_npc")
    calls = [c for ex in npc.examples for c in ex.calls]
    sells = [c for c in calls if c["name"] == "sell_to_player"]
    buys = [c for c in calls if c["name"] == "buy_from_player"]
    assert sells and buys
    assert all(c["arguments"]["item"] for c in sells + buys)
    assert all(isinstance(c["arguments"]["offered_price"], int) for c in buys)
    for ex in npc.examples:  # the reply names what the call copies: item and price
        for c in ex.calls:
            if c["name"] in ("sell_to_player", "buy_from_player"):
                assert c["arguments"]["item"] in ex.say, ex
            if c["name"] == "buy_from_player":
                assert str(c["arguments"]["offered_price"]) in ex.say, ex


def test_examples_are_rendered_but_never_history(reachy):
    examples = reachy.example_messages()
    dialogue = Dialogue(reachy.persona, examples)
    dialogue.begin_turn("t1", "Hello.")
    messages = dialogue.messages()
    assert messages[1 : 1 + len(examples)] == examples
    assert [t.turn_id for t in dialogue.turns] == ["t1"]
    assert dialogue.mark_interrupted("t1", "") and len(dialogue.messages()) == len(messages) + 1
    # budgeting drops real turns only: the examples stay in the (KV-cached) prefix
    for i in range(30):
        dialogue.begin_turn(f"u{i}", "word " * 40)
    template = ChatTemplate.bundled()
    count = dialogue.fit(lambda m: len(template.render(m, None, Knobs()).split()), 900)
    assert dialogue.dropped_turns > 0 and count <= 900
    assert dialogue.messages()[1 : 1 + len(examples)] == examples


def test_a_context_too_small_for_the_examples_gives_them_up_not_the_turn(reachy):
    """n_ctx too small for system + examples + the request: this turn's nearest exchanges go
    first, then the static examples from the last one; system prompt and request stay."""
    examples = reachy.example_messages()
    nearest = [{"role": "user", "content": "near " * 30}, {"role": "assistant", "content": "x"}]
    dialogue = Dialogue(reachy.persona, examples, nearest=lambda text: nearest)
    template = ChatTemplate.bundled()

    def words(messages) -> int:
        return len(template.render(messages, None, Knobs()).split())

    dialogue.begin_turn("t1", "Please look around.")
    full = words(dialogue.messages())
    limit = full - 40  # the nearest exchange (~31 words) is not enough: one example goes too
    count = dialogue.fit(words, limit)
    assert count <= limit and dialogue.dropped_examples >= 1
    messages = dialogue.messages()
    assert nearest[0] not in messages and messages[0]["content"] == reachy.persona
    assert messages[-1] == {"role": "user", "content": "Please look around."}
    assert dialogue.examples == examples[: len(examples) - dialogue.dropped_examples]
    # far too small: every example goes, the turn still renders
    assert dialogue.fit(words, 60) > 0 and dialogue.examples == []
    assert dialogue.messages()[-1]["content"] == "Please look around."


def test_an_example_the_model_may_not_produce_is_a_clear_error(tmp_path):
    data = yaml.safe_load((config_dir() / "profiles" / "reachy_mini.yaml").read_text())
    bad_call = {"name": "trigger_reachy_animation", "arguments": {"animation_name": "moonwalk"}}
    for entry, words in (
        ({"user": "Dance!", "say": "Sure.", "calls": [bad_call]}, "moonwalk"),
        ({"user": "Hi", "say": "tool_call| hello"}, "not speakable"),
        ({"user": "Nod", "say": "", "calls": []}, "says nothing first"),
    ):
        path = tmp_path / "p.yaml"
        path.write_text(yaml.safe_dump({**data, "examples": [entry]}))
        with pytest.raises(ValueError, match=words):
            load_profile(str(path))


# --- tool choice (issue 13 follow-up): retrieval few-shot, catalog enums ---------------------


def test_the_nearest_example_comes_right_before_the_user_turn_and_is_never_history(reachy):
    examples = reachy.example_messages()
    dialogue = Dialogue(reachy.persona, examples, reachy.nearest(1))
    dialogue.begin_turn("t1", "Could you peek around the whole room?")
    messages = dialogue.messages()
    nearest = reachy.nearest_examples("Could you peek around the whole room?", 1)[0]
    assert nearest.calls[0]["arguments"]["animation_name"] == "scan_room"
    shown = nearest.messages()
    start = 1 + len(examples)
    assert messages[1:start] == examples  # the static prefix is untouched (KV reuse)
    assert messages[start : start + len(shown)] == shown
    assert messages[start + len(shown)] == {
        "role": "user",
        "content": "Could you peek around the whole room?",
    }
    assert [t.turn_id for t in dialogue.turns] == ["t1"]
    assert dialogue.turns[0].messages() == [messages[start + len(shown)]]
    # the next turn's prompt no longer holds it; its own nearest example sits before it instead
    preview = dialogue.preview("Please wave to the neighbours.")
    dialogue.begin_turn("t2", "Please wave to the neighbours.")
    after = dialogue.messages()
    assert after == preview
    assert after[start] == {"role": "user", "content": "Could you peek around the whole room?"}
    wave = reachy.nearest_examples("Please wave to the neighbours.", 1)[0].messages()
    assert after[-1 - len(wave) : -1] == wave and wave != shown


def test_a_short_nearest_example_is_request_reply_and_calls_only(reachy):
    """few_shot_nearest_short: the copy right before the request shows what to say and call,
    without the tool results and closing words the static examples keep."""
    ask = "Could you peek around the whole room?"
    dialogue = Dialogue(reachy.persona, reachy.example_messages(), reachy.nearest(1, short=True))
    dialogue.begin_turn("t1", ask)
    messages = dialogue.messages()
    full = reachy.nearest_examples(ask, 1)[0].messages()
    # request, reply + call + result (reachy's animations end the turn: no closing words)
    assert len(full) == 2 and "tool_responses" in full[1]
    closing = next(ex for ex in load_profile("blacksmith_npc").examples if ex.then)
    assert len(closing.messages()) == 3 and len(closing.messages(short=True)) == 2
    short = messages[-3:-1]
    assert short == [
        {"role": "user", "content": "Could you look around the room?"},
        {
            "role": "assistant",
            "content": "Sure, I will scan the room.",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {
                        "name": "trigger_reachy_animation",
                        "arguments": {"animation_name": "scan_room"},
                    },
                }
            ],
        },
    ]
    assert messages[-1] == {"role": "user", "content": ask}
    # an example without calls is never a nearest one; its messages are the same either way
    greeting = reachy.examples[0]
    assert not greeting.calls and greeting.messages(short=True) == greeting.messages()


def test_nearest_examples_are_lexical_and_closest_last(reachy):
    two = reachy.nearest_examples("Nodding would mean yes, right?", 2)
    assert len(two) == 2
    assert two[-1].calls[0]["arguments"]["animation_name"] == "happy_nod"
    assert reachy.nearest_examples("zzz qqq", 2) == []  # no shared word: nothing is added
    assert reachy.nearest_examples("Nod.", 0) == [] and reachy.nearest(0) is None


def test_a_nearest_example_must_share_more_than_a_general_word(reachy):
    """Chit-chat shares "your", "like" or "me" with some example; that example would prime a
    call and cost its prefill. A strong overlap or a word naming what a tool does is needed."""
    for chat in (
        "What is your favourite colour?",  # "your" (in "Say bye with your antennas.")
        "What do you like to do for fun?",  # "like" (in "Do you like music? ...")
        "Tell me something about robots.",  # "me"
        "Hello there! What is your name?",  # "hello" (in "Wave hello to my friend!")
    ):
        assert reachy.nearest_examples(chat, 1) == [], chat
    # one tool word is enough ("wave" names wave_antenna), as are two specific words
    wave = reachy.nearest_examples("Wave to the postman.", 1)
    assert wave[0].calls[0]["arguments"]["animation_name"] == "wave_antenna"
    look = reachy.nearest_examples("Have a look around, please.", 1)
    assert look[0].calls[0]["arguments"]["animation_name"] == "scan_room"
    assert "look" not in _tool_words(reachy.registry)  # found by its overlap alone
    # few_shot_nearest_min_score 0: any shared word, as before
    assert reachy.nearest_examples("What is your favourite colour?", 1, min_score=0) != []


def test_an_item_several_tools_take_is_a_slot_and_brings_no_nearest_example():
    """The shop's items go to selling and buying alike: matching them brought the other trade's
    example, and an example's item before the request replaced the one asked for."""
    npc = load_profile("blacksmith_npc")
    # a request naming an item (any form: plural, case): the static examples only
    assert npc.nearest_examples("Two Iron Helmets, and quick!", 2) == []
    assert npc.nearest_examples("Would you buy my steel longsword for 60 gold?", 2) == []
    # without an item the trade examples are found by their frame, not by an item's words
    offer = npc.nearest_examples("Would you buy something of mine for 60 gold?", 1)
    assert [c["name"] for c in offer[0].calls] == ["buy_from_player"]
    # the slots: values two tools share for one argument; an animation (one tool's) stays words
    items = {value for arg, value in _shared_values(npc.registry) if arg == "item"}
    assert ("war", "hammer") in items and ("horseshoe",) in items
    assert _shared_values(load_profile("reachy_mini").registry) == ()


def test_catalog_items_are_an_enum_in_the_grammar_and_llama_cpp_accepts_it():
    from llama_cpp import Llama
    from llama_cpp import llama_cpp as capi

    from bolt_agent.core.models import resolve_model

    catalog = yaml.safe_load((config_dir() / "game_state.yaml").read_text())["shop"]["items"]
    names = [i["name"] for i in catalog]
    registry = load_profile("blacksmith_npc").registry
    for tool in ("sell_to_player", "buy_from_player"):
        item = registry.get(tool).parameters["properties"]["item"]
        assert item["enum"] == names and "enum_from" not in item
    assert "war hammer" in names
    assert registry.validate("sell_to_player", {"item": "war"}) is not None
    assert registry.validate("sell_to_player", {"item": "war hammer"}) is None
    vocab = Llama(str(resolve_model("", kind="llm")), vocab_only=True, verbose=False)
    for call_format in ("gemma4", "json"):
        grammar = build_grammar(registry, "sell_to_player", call_format=call_format)
        assert all(f'"{n}' in grammar for n in names), call_format
        sampler = capi.llama_sampler_init_grammar(vocab._model.vocab, grammar.encode(), b"root")
        assert sampler, call_format
        capi.llama_sampler_free(sampler)


def test_enum_from_a_missing_catalog_is_a_clear_error(tmp_path):
    entry = {
        "name": "sell",
        "binding": {"type": "execute_tool", "action": "game/execute_tool"},
        "parameters": {
            "type": "object",
            "properties": {"item": {"type": "string", "enum_from": {"file": "nope.yaml"}}},
        },
    }
    with pytest.raises(ToolConfigError, match="enum_from"):
        ToolRegistry.from_config([entry])


def test_a_turn_that_may_call_no_tool_gets_no_nearest_example(reachy):
    dialogue = Dialogue(reachy.persona, [], reachy.nearest(2))
    user = {"role": "user", "content": "Nod, please."}
    assert dialogue.preview("Nod, please.", nearest=False) == [*dialogue.messages(), user]
    dialogue.begin_turn("t1", "Nod, please.", nearest=False)
    assert len(dialogue.messages()) == 2

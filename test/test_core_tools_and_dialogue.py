"""Tool registry, constrained grammar, dialogue budgeting and interruption-aware history."""

from __future__ import annotations

import pytest

from bolt_agent.core.llm.chat_template import ChatTemplate, Knobs
from bolt_agent.core.llm.dialogue import INTERRUPTED_MARKER, Dialogue, Step
from bolt_agent.core.llm.profile import load_profile
from bolt_agent.core.llm.tool_grammar import build_grammar
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
    npc = load_profile("blacksmith_npc").registry
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

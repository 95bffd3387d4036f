"""Speakable speech: the constrained grammar admits no markup; the free-mode filter drops it."""

from __future__ import annotations

import re

import pytest

from bolt_agent.core.llm.profile import load_profile
from bolt_agent.core.llm.speakable import MARKUP_CHARS, clean_sentence, is_speakable
from bolt_agent.core.llm.tool_grammar import CALL_FORMATS, build_grammar

FORBIDDEN = "|<>{}[]_\\*#@=~^`"


def speech_rule(grammar: str) -> tuple[re.Pattern, re.Pattern]:
    """The speech rule's two character classes, as Python regexes (same escape syntax)."""
    line = next(x for x in grammar.splitlines() if x.startswith("speech ::="))
    first, rest = re.findall(r"\[((?:\\.|[^\]\\])*)\]", line)
    return re.compile(f"[{first}]"), re.compile(f"[{rest}]")


@pytest.mark.parametrize("profile", ["reachy_mini", "blacksmith_npc"])
@pytest.mark.parametrize("call_format", CALL_FORMATS)
def test_the_speech_rule_admits_letters_and_punctuation_and_no_markup(profile, call_format):
    registry = load_profile(profile).registry
    for choice in ("auto", "none", "required", registry.names[0]):
        first, rest = speech_rule(build_grammar(registry, choice, call_format=call_format))
        assert set(FORBIDDEN) == MARKUP_CHARS
        for c in FORBIDDEN + "\n\t$%&+/":
            assert not first.match(c) and not rest.match(c), (choice, c)
        for c in "aZ09éÀñßøœ":
            assert first.match(c) and rest.match(c), c
        for c in " .,!?'\"()-’":
            assert rest.match(c) and not first.match(c), c
        for c in ":;":  # never key:value or call:name
            assert not rest.match(c) and not first.match(c)


def test_gemma4_calls_are_the_templates_own_syntax():
    grammar = build_grammar(load_profile("reachy_mini").registry, "auto", call_format="gemma4")
    assert '"<|tool_call>" call "<tool_call|>"' in grammar
    assert '"call:" "trigger_reachy_animation" "{" "animation_name:"' in grammar
    assert '"<turn|>"' in grammar  # the model may end its turn the way its examples do
    with pytest.raises(ValueError, match="call_format"):
        build_grammar(load_profile("reachy_mini").registry, "auto", call_format="xml")


@pytest.mark.parametrize(
    ("sentence", "kept", "dropped"),
    [
        ("tool_call|", "", ["tool_call|"]),
        ("play:type:boolean|", "", ["play:type:boolean|"]),
        ("|tool_response|>playback:type:boolean|", "", ["|tool_response|>playback:type:boolean|"]),
        ("Sure, I nod. call:trigger_reachy_animation", "Sure, I nod.", None),
        ("Here you go {status: done}", "Here you go", ["{status:", "done}"]),
        ("A steel sword, 40 gold.", "A steel sword, 40 gold.", []),
        ("...", "", []),
    ],
)
def test_the_sentence_filter_keeps_words_and_drops_markup(sentence, kept, dropped):
    text, gone = clean_sentence(sentence)
    assert text == kept
    if dropped is not None:
        assert gone == dropped
    assert text == "" or is_speakable(text)
    assert all(not is_speakable(g) or not g for g in gone if any(c.isalnum() for c in g))


def test_template_words_are_never_speakable():
    for s in ("tool_call", "the tool_response came", "<start_of_turn>user", "x_y", "a|b"):
        assert not is_speakable(s)
    assert is_speakable("Let me scan the room.")


def test_gemma4_grammars_compile_in_llama_cpp():
    """llama.cpp parses every Gemma 4-format grammar (NULL sampler = a parse error)."""
    from llama_cpp import Llama
    from llama_cpp import llama_cpp as capi

    from bolt_agent.core.models import resolve_model

    vocab = Llama(str(resolve_model("", kind="llm")), vocab_only=True, verbose=False)
    for profile in ("reachy_mini", "blacksmith_npc"):
        registry = load_profile(profile).registry
        for choice in ("auto", "none", "required", *registry.names):
            grammar = build_grammar(registry, choice, call_format="gemma4").encode()
            sampler = capi.llama_sampler_init_grammar(vocab._model.vocab, grammar, b"root")
            assert sampler, (profile, choice)
            capi.llama_sampler_free(sampler)

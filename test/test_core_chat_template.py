"""Chat template: the seed's knob strings, spoken-first order, injection for foreign templates."""

from bolt_agent.core.llm.chat_template import (
    BREVITY_INSTRUCTION,
    BUDGET_INSTRUCTION,
    THINK_OPEN,
    ChatTemplate,
    Knobs,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "trigger_reachy_animation",
            "description": "Play an animation.",
            "parameters": {
                "type": "object",
                "properties": {"animation_name": {"type": "string", "enum": ["happy_nod"]}},
                "required": ["animation_name"],
            },
        },
    }
]
MESSAGES = [
    {"role": "system", "content": "You are Reachy."},
    {"role": "user", "content": "Nod for me."},
]


def render(**knobs) -> str:
    return ChatTemplate.bundled().render(MESSAGES, TOOLS, Knobs(**knobs))


def test_seed_instructions_appear_only_when_asked():
    plain = render(enable_thinking=True)
    assert "Ensure that your thinking process" not in plain
    assert BREVITY_INSTRUCTION not in plain
    both = render(thinking_token_budget=128, conversational_mode=True)
    assert BUDGET_INSTRUCTION.format(budget=128) in both
    assert (
        "Keep responses brief, natural, and easy to understand in conversation. Focus on the most "
        "relevant points and avoid unnecessary detail unless asked." in both
    )


def test_thinking_switch_opens_or_closes_the_thought_block():
    on = render(enable_thinking=True)
    off = render(enable_thinking=False)
    assert "<|think|>" in on and on.endswith("<|turn>model\n")
    assert "<|think|>" not in off
    assert off.endswith("<|turn>model\n" + THINK_OPEN + "<channel|>")


def test_tools_are_declared_in_gemma4_syntax():
    text = render()
    assert "<|tool>declaration:trigger_reachy_animation{" in text
    assert 'enum:[<|"|>happy_nod<|"|>]' in text
    assert 'type:<|"|>OBJECT<|"|>' in text


def test_history_is_spoken_first_and_continues_after_tool_results():
    history = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": "Sure, watch this!",
            "tool_calls": [
                {
                    "function": {
                        "name": "trigger_reachy_animation",
                        "arguments": {"animation_name": "happy_nod"},
                    }
                }
            ],
            "tool_responses": [{"name": "trigger_reachy_animation", "response": {"ok": True}}],
        },
    ]
    text = ChatTemplate.bundled().render(history, TOOLS, Knobs(enable_thinking=False))
    speech = text.index("Sure, watch this!")
    call = text.index("<|tool_call>call:trigger_reachy_animation{animation_name:")
    response = text.index("<|tool_response>response:trigger_reachy_animation{ok:true}")
    assert speech < call < response
    assert text.endswith("<tool_response|>")  # the model continues the same turn


def test_a_template_that_ignores_the_knobs_still_gets_the_instructions():
    foreign = ChatTemplate(
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>",
        name="foreign",
    )
    text = foreign.render(MESSAGES, None, Knobs(thinking_token_budget=32, conversational_mode=True))
    assert BUDGET_INSTRUCTION.format(budget=32) in text
    assert BREVITY_INSTRUCTION in text
    assert text.startswith("<system>You are Reachy.")


def test_real_gemma4_template_renders_with_our_messages():
    """Google's Gemma 4 template (as a GGUF would carry it) accepts the same message shape."""
    import pathlib

    src = pathlib.Path(__file__).parent / "data" / "gemma4_min.jinja"
    template = ChatTemplate(src.read_text(), bos_token="<bos>", name="gguf")
    text = template.render(MESSAGES, TOOLS, Knobs(enable_thinking=False, conversational_mode=True))
    assert "<|turn>user\nNod for me.<turn|>" in text
    assert BREVITY_INSTRUCTION in text


def test_few_shot_examples_render_as_earlier_turns_in_the_models_own_format():
    """Issue 13: the profile's examples sit between the system turn and the history, with the
    same turn shape (empty thought, speech, call, response) the model's own answer starts with."""
    from bolt_agent.core.llm.dialogue import Dialogue
    from bolt_agent.core.llm.profile import load_profile

    profile = load_profile("reachy_mini")
    dialogue = Dialogue(profile.persona, profile.example_messages())
    dialogue.begin_turn("t1", "Hello robot.")
    tools = profile.registry.as_openai()
    text = ChatTemplate.bundled().render(dialogue.messages(), tools, Knobs(enable_thinking=False))
    first = next(ex for ex in profile.examples if ex.calls)
    call = first.calls[0]["arguments"]["animation_name"]
    system_end = text.index("<turn|>")
    example = text.index(f"<|turn>user\n{first.user}<turn|>")
    spoken = text.index(
        f"<|turn>model\n{THINK_OPEN}<channel|>{first.say}<|tool_call>call:"
        f'trigger_reachy_animation{{animation_name:<|"|>{call}<|"|>'
    )
    assert system_end < example < spoken < text.index("<|turn>user\nHello robot.<turn|>")
    assert text.endswith(f"<|turn>model\n{THINK_OPEN}<channel|>")  # the same opening
    # with thinking on, neither examples nor the generation prompt carry the empty thought
    on = ChatTemplate.bundled().render(dialogue.messages(), tools, Knobs(enable_thinking=True))
    assert "<channel|>" not in on

"""Turn runner against the real bundled model (and a scripted engine for orchestration cases)."""

from __future__ import annotations

import pytest

from bolt_agent.core.llm.chat_template import Knobs
from bolt_agent.core.llm.dialogue import INTERRUPTED_MARKER, Dialogue
from bolt_agent.core.llm.llama.engine import LlamaConfig, LlamaEngine
from bolt_agent.core.llm.profile import load_profile
from bolt_agent.core.llm.scripted_engine import EOG_PIECE, ScriptedEngine
from bolt_agent.core.llm.turn_runner import RunnerConfig, ToolResult, TurnRequest, TurnRunner
from bolt_agent.core.llm.types import SamplingParams
from bolt_agent.core.models import resolve_model
from support.turn_sinks import RecordingSink, speaking_after_results


@pytest.fixture(scope="module")
def engine():
    eng = LlamaEngine(LlamaConfig(model_path=str(resolve_model("", kind="llm")), n_ctx=2048))
    eng.load()
    yield eng
    eng.close()


def runner_for(engine, speak_after_result: bool = False, **cfg):
    profile = load_profile("reachy_mini")
    config = RunnerConfig(
        sampling=SamplingParams(seed=cfg.pop("seed", 7)),
        constrained=True,
        max_speech_chars=cfg.pop("max_speech_chars", 60),
        **cfg,
    )
    registry = profile.registry
    if speak_after_result:  # the profile ends a turn at an animation's result (after_result)
        registry = speaking_after_results(registry)
    return TurnRunner(engine, Dialogue(profile.persona), registry, config)


def test_thinking_budget_is_enforced_in_a_real_generation(engine):
    runner = runner_for(engine, max_steps=1, max_new_tokens=80)
    sink = RecordingSink()
    knobs = Knobs(enable_thinking=True, thinking_token_budget=16)
    result = runner.run(TurnRequest("t1", "What can you see?", knobs, "none"), sink)
    assert 0 < result.thinking_tokens <= 16
    assert engine.count_tokens(result.thinking_text) <= 16 + 2  # re-tokenising may merge/split
    spoken = " ".join(e[2] for e in sink.events if e[0] == "sentence")
    assert result.thinking_text.strip() and result.thinking_text.strip() not in spoken
    assert "<|channel>" not in spoken and "<channel|>" not in spoken


def test_no_thinking_when_disabled(engine):
    runner = runner_for(engine, max_steps=1, max_new_tokens=40)
    sink = RecordingSink()
    result = runner.run(TurnRequest("t1", "Hi!", Knobs(enable_thinking=False), "none"), sink)
    assert result.thinking_tokens == 0 and result.thinking_text == ""
    assert not [e for e in sink.events if e[0] == "think"]
    assert result.spoken_text


def test_required_tool_call_comes_after_the_speech_and_a_second_step_follows(engine):
    runner = runner_for(engine, speak_after_result=True, max_steps=2, max_new_tokens=96)
    sink = RecordingSink()
    request = TurnRequest("t1", "Look around the room.", Knobs(enable_thinking=False), "required")
    result = runner.run(request, sink)
    kinds = sink.kinds()
    first_dispatch = kinds.index("dispatch")
    assert "sentence" in kinds[:first_dispatch], kinds  # spoken first
    assert result.steps == 2 and len(result.tool_calls) == 1
    assert kinds[first_dispatch + 1 :] and set(kinds[first_dispatch + 1 :]) == {"sentence"}
    steps = runner.dialogue.turns[-1].steps
    assert steps[0].tool_responses == [
        {"name": "trigger_reachy_animation", "response": {"ok": True}}
    ]


def test_an_animation_ends_the_turn_at_its_result(engine):
    runner = runner_for(engine, max_steps=2, max_new_tokens=96)
    sink = RecordingSink()
    request = TurnRequest("t1", "Look around the room.", Knobs(enable_thinking=False), "required")
    result = runner.run(request, sink)
    assert result.steps == 1 and sink.kinds()[-1] == "dispatch"


def test_prefix_is_reused_across_turns(engine):
    runner = runner_for(engine, max_steps=1, max_new_tokens=24)
    for i in range(3):
        runner.run(
            TurnRequest(f"t{i}", f"Tell me about item {i}.", Knobs(enable_thinking=False), "none"),
            RecordingSink(),
        )
    last = runner.run(
        TurnRequest("t9", "And one more thing?", Knobs(enable_thinking=False), "none"),
        RecordingSink(),
    )
    stats = last.stats[0]
    assert stats.reused_tokens >= 0.7 * stats.prompt_tokens, stats


def test_prewarm_leaves_the_turn_only_its_last_token_and_keeps_the_history(engine):
    runner = runner_for(engine, max_steps=1, max_new_tokens=16)
    knobs = Knobs(enable_thinking=False)
    runner.run(TurnRequest("t0", "Hello there.", knobs, "none"), RecordingSink())
    history = runner.dialogue.messages()
    request = TurnRequest("t1", "What is your name?", knobs, "none")
    assert runner.prewarm(request) > 5  # the new user message and the generation prompt
    assert runner.dialogue.messages() == history
    stats = runner.run(request, RecordingSink()).stats[0]
    assert stats.prompt_tokens - stats.reused_tokens == 1, stats  # one token for fresh logits
    # a final that differs from the partial still reuses everything before the difference
    warmed = runner.prewarm(TurnRequest("t2", "Can you wave at the", knobs, "none"))
    stats = runner.run(TurnRequest("t2", "Can you wave at me?", knobs, "none"), RecordingSink())
    new = stats.stats[0].prompt_tokens - stats.stats[0].reused_tokens
    # from "me?" on; the rest was warm. (Earlier model turns now open as the generation prompt
    # does, so the prewarm no longer re-prefills the previous answer: `warmed` is small, and the
    # bound is the differing tail itself rather than a share of it.)
    tail = engine.count_tokens("me?<turn|>\n<|turn>model\n<|channel>thought\n<channel|>")
    assert 0 < new <= tail + 1 < warmed, (warmed, tail, stats.stats[0])


def test_a_probe_after_a_prefill_of_the_first_words_carries_their_exchange(engine):
    """llm_node's prefill after a pause, on the real engine: the history and the exchange that
    "Can you nod" picks are prefilled; the probe of the whole request then evaluates only its
    own words (the cache holds the exchange), and the turn reuses the probe's prompt."""
    profile = load_profile("reachy_mini")
    exchange = [
        {"role": "user", "content": "Nod once for me, please."},
        {"role": "assistant", "content": "Here is my nod, a happy one."},
    ]
    dialogue = Dialogue(profile.persona, nearest=lambda t: exchange if "nod" in t else [])
    runner = TurnRunner(engine, dialogue, profile.registry, RunnerConfig(max_steps=1))
    knobs = Knobs(enable_thinking=False)
    assert runner.prewarm(TurnRequest("u1", "", knobs, "auto")) > 0  # speech start: history
    render = runner._renderer(knobs)
    with_exchange = render(dialogue.preview("Can you nod for me", None, True))
    held = engine.cached_tokens(with_exchange)
    assert held < engine.count_tokens(with_exchange) - 30  # the exchange is not cached
    # a probe now leaves the exchange out: it would cost its prefill
    assert runner.end_of_turn_probability(TurnRequest("u1", "Can you nod", knobs, "auto"))
    assert engine.cached_tokens(with_exchange) < engine.count_tokens(with_exchange) - 30
    # the user went on: their words so far are prefilled with their exchange
    assert runner.prewarm(TurnRequest("u1", "Can you nod", knobs, "auto")) > 30
    sessions = []
    real_start = engine.start
    engine.start = lambda prompt: sessions.append(real_start(prompt)) or sessions[-1]
    request = TurnRequest("u1", "Can you nod for me?", knobs, "auto")
    try:
        p = runner.end_of_turn_probability(request)
        result = runner.run(request, RecordingSink())
    finally:
        del engine.start
    assert p is not None and 0.0 <= p <= 1.0
    probe, turn = sessions[0].stats, result.stats[0]
    assert probe.prompt_tokens - probe.reused_tokens <= 6, probe  # " for me": the words alone
    assert turn.reused_tokens >= probe.prompt_tokens - 1, (probe, turn)  # the probe's prompt


def test_cancel_stops_within_one_decode_step(engine):
    runner = runner_for(engine, max_steps=1, max_new_tokens=120, max_speech_chars=200)
    counts = {}

    class CancellingSink(RecordingSink):
        def on_speech_delta(self, turn_id, text):
            super().on_speech_delta(turn_id, text)
            if "at_cancel" not in counts:
                counts["at_cancel"] = sum(s.generated for s in runner_result_stats())
                runner.cancel()

    def runner_result_stats():
        return [engine_session_stats[-1]] if engine_session_stats else []

    engine_session_stats = []
    original_start = engine.start

    def start(prompt):
        session = original_start(prompt)
        engine_session_stats.append(session.stats)
        return session

    engine.start = start
    try:
        sink = CancellingSink()
        result = runner.run(
            TurnRequest("t1", "Tell me a long story.", Knobs(enable_thinking=False), "none"), sink
        )
    finally:
        del engine.start
    assert result.cancelled
    assert engine_session_stats[-1].generated - counts["at_cancel"] <= 1
    spoken = "".join(e[1] for e in sink.events if e[0] == "delta")
    runner.dialogue.mark_interrupted("t1", spoken)
    assert runner.dialogue.turns[-1].steps[-1].content.endswith(INTERRUPTED_MARKER)


# --- orchestration edge cases with a scripted engine ---------------------------------------


def scripted_runner(scripts, **cfg):
    """Orchestration cases chain steps after tool results: the animation speaks after its
    result here (the profile ends the turn there: ``after_result``)."""
    profile = load_profile("reachy_mini")
    registry = speaking_after_results(profile.registry)
    return TurnRunner(
        ScriptedEngine(scripts), Dialogue(profile.persona), registry, RunnerConfig(**cfg)
    )


def test_prewarm_does_nothing_on_an_engine_without_a_cache():
    runner = scripted_runner(["Hi there."])
    assert runner.prewarm(TurnRequest("t1", "hello", Knobs(enable_thinking=False))) == 0
    assert runner.engine.prompts == []  # the script was not consumed
    result = runner.run(TurnRequest("t1", "hello", Knobs(enable_thinking=False)), RecordingSink())
    assert result.spoken_text == "Hi there."


def test_tool_errors_are_fed_back_and_the_turn_goes_on():
    runner = scripted_runner(
        [
            'Let me look. <tool_call>{"name": "fly", "arguments": {}}</tool_call>'
            '<|tool_call>call:trigger_reachy_animation{animation_name:<|"|>scan_room<|"|>}'
            "<tool_call|>",
            "The server was down, sorry.",
        ]
    )
    sink = RecordingSink(lambda n, a: ToolResult(ok=False, error="action server is not available"))
    result = runner.run(TurnRequest("t1", "look", Knobs(enable_thinking=False)), sink)
    assert result.steps == 2
    responses = runner.dialogue.turns[-1].steps[0].tool_responses
    assert "unknown tool 'fly'" in responses[0]["response"]["error"]
    assert responses[1]["response"] == {"error": "action server is not available"}
    assert "The server was down, sorry." in result.spoken_text
    assert "action server is not available" in runner.engine.prompts[-1]


def test_free_mode_budget_forcing_closes_the_thought():
    words = " ".join(f"w{i}" for i in range(50))
    runner = scripted_runner([f"<|channel>thought\n{words}<channel|>Done thinking."])
    result = runner.run(
        TurnRequest("t1", "q", Knobs(enable_thinking=True, thinking_token_budget=10), "none"),
        RecordingSink(),
    )
    assert result.thinking_tokens <= 10
    assert result.spoken_text == "Done thinking."


def test_a_constrained_turn_whose_model_stops_inside_its_thought_still_answers():
    """Constrained mode: the model ends its turn (end-of-generation) before closing its thought;
    the runner closes it as budget forcing would and the answer, a required call included,
    comes under the grammar. Before, the turn ended with no words and no call."""
    call = '<|tool_call>call:trigger_reachy_animation{animation_name:<|"|>scan_room<|"|>}'
    script = f"Looking around.{EOG_PIECE}<channel|>Sure! {call}<tool_call|>"
    runner = scripted_runner([script, "Done."], constrained=True, max_steps=2)
    knobs = Knobs(enable_thinking=True, thinking_token_budget=16)
    result = runner.run(TurnRequest("t1", "Look around.", knobs, "required"), RecordingSink())
    assert result.thinking_text == "Looking around."
    assert result.spoken_text.startswith("Sure!")
    assert result.tool_calls == [
        {"name": "trigger_reachy_animation", "arguments": {"animation_name": "scan_room"}}
    ]
    # free mode is not the grammar's: a model that stops inside its thought ends the turn
    runner = scripted_runner(["<|channel>thought\n" + script], constrained=False)
    result = runner.run(TurnRequest("t2", "Look around.", knobs, "auto"), RecordingSink())
    assert result.spoken_text == "" and result.tool_calls == []


def test_max_steps_bounds_tool_chaining():
    call = (
        'ok <|tool_call>call:trigger_reachy_animation{animation_name:<|"|>happy_nod<|"|>}'
        "<tool_call|>"
    )
    runner = scripted_runner([call] * 5, max_steps=3)
    result = runner.run(
        TurnRequest("t1", "nod forever", Knobs(enable_thinking=False)), RecordingSink()
    )
    assert result.steps == 3
    assert len(result.tool_calls) == 2  # the last step is words only (tools not offered)


# --- speakable, spoken-first (issue 13) ------------------------------------------------------


def test_a_goal_without_a_sentence_before_it_gets_the_filler_first():
    call = (
        '<|tool_call>call:trigger_reachy_animation{animation_name:<|"|>happy_nod<|"|>}<tool_call|>'
    )
    runner = scripted_runner([call, "There you go."], filler_sentence="Okay.")
    sink = RecordingSink()
    result = runner.run(TurnRequest("t1", "nod", Knobs(enable_thinking=False)), sink)
    assert sink.events[1:3] == [
        ("sentence", 0, "Okay."),
        ("dispatch", "trigger_reachy_animation", {"animation_name": "happy_nod"}),
    ]
    assert result.fillers == 1
    assert runner.dialogue.turns[-1].steps[0].content == "Okay."  # history: what was said


def test_free_mode_drops_markup_fragments_and_logs_them(caplog):
    runner = scripted_runner(
        [
            "tool_call| Sure, I nod now. |tool_response|>playback:type:boolean| "
            '<|tool_call>call:trigger_reachy_animation{animation_name:<|"|>happy_nod<|"|>}'
            "<tool_call|>",
            "Done. {status: ok}",
        ]
    )
    sink = RecordingSink()
    with caplog.at_level("WARNING", logger="bolt_agent.llm"):
        result = runner.run(TurnRequest("t1", "nod", Knobs(enable_thinking=False)), sink)
    said = [e[2] for e in sink.events if e[0] == "sentence"]
    assert said == ["Sure, I nod now.", "Done."]
    assert sink.kinds().index("dispatch") == 1  # the model's own sentence came first
    assert "tool_call|" in result.dropped and "dropped unspeakable" in caplog.text
    assert result.fillers == 0
    assert [s.content for s in runner.dialogue.turns[-1].steps] == ["Sure, I nod now.", "Done."]


def test_constrained_turns_with_few_shot_are_speakable_and_spoken_first(engine):
    """The real base model with the profile's examples: every sentence speakable, every goal
    after a sentence, the examples kept out of the history."""
    from bolt_agent.core.llm.speakable import is_speakable

    profile = load_profile("reachy_mini")
    runner = TurnRunner(
        engine,
        Dialogue(profile.persona, profile.example_messages()),
        profile.registry,
        RunnerConfig(sampling=SamplingParams(seed=3), constrained=True, max_steps=2),
    )
    knobs = Knobs(enable_thinking=False, conversational_mode=True)
    for i, text in enumerate(("Spin your head to see the room.", "Greet my cat.")):
        sink = RecordingSink()
        result = runner.run(TurnRequest(f"t{i}", text, knobs, "required"), sink)
        said = [e[2] for e in sink.events if e[0] == "sentence"]
        assert said and all(is_speakable(s) for s in said), said
        kinds = sink.kinds()
        assert "dispatch" in kinds and "sentence" in kinds[: kinds.index("dispatch")], kinds
        assert not result.dropped
    assert [t.turn_id for t in runner.dialogue.turns] == ["t0", "t1"]
    assert runner.dialogue.messages()[1]["content"] == profile.examples[0].user


def test_nearest_example_is_in_the_turns_prompt_only_and_the_blacksmith_sells_catalog_items(
    engine,
):
    """Retrieval few-shot with the real model: the nearest example is in the prompt of its own
    turn (right before the request), not in the next turn's, not in the history; every item the
    grammar lets the model name is a full catalog name."""
    import yaml

    from bolt_agent.core.paths import config_dir

    profile = load_profile("blacksmith_npc")
    catalog = yaml.safe_load((config_dir() / "game_state.yaml").read_text())["shop"]["items"]
    dialogue = Dialogue(profile.persona, profile.example_messages(), profile.nearest(1))
    runner = TurnRunner(
        engine,
        dialogue,
        profile.registry,
        RunnerConfig(sampling=SamplingParams(seed=5), constrained=True, max_steps=1),
    )
    knobs = Knobs(enable_thinking=False, conversational_mode=True)
    render = runner._renderer(knobs)
    # requests that name no item: one that does gets no nearest example (it would hand over
    # the example's item)
    assert profile.nearest_examples("Would you buy my horseshoe for 2 gold?", 1) == []
    first = "Would you buy something of mine for 2 gold?"
    nearest = profile.nearest_examples(first, 1)[0]
    static = render(dialogue.preview("hello")).count(nearest.user)  # in the static examples
    second = "I want to buy something from you."
    assert profile.nearest_examples(second, 1)[0] != nearest
    calls = []
    for i, text in enumerate((first, second)):
        sink = RecordingSink()
        prompt = render(dialogue.preview(text))
        if i == 0:  # after the static examples, right before the request
            assert prompt.count(nearest.user) == static + 1
            last_static = prompt.rindex(profile.examples[-1].user)
            assert last_static < prompt.rindex(nearest.user) < prompt.rindex(first)
        else:  # the next turn's prompt no longer holds it
            assert prompt.count(nearest.user) == static and first in prompt
        runner.run(TurnRequest(f"t{i}", text, knobs, "required"), sink)
        calls += [e for e in sink.events if e[0] == "dispatch"]
    assert dialogue.turns[-1].turn_id == "t1"  # (t0 may be dropped: n_ctx 2048 here)
    assert all(m.get("content") != nearest.user for t in dialogue.turns for m in t.messages())
    names = {i["name"] for i in catalog}
    assert calls
    for _, _, arguments in calls:
        assert arguments.get("item", "iron sword") in names, arguments


def test_a_session_steers_its_next_token_away_from_what_it_is_told_to_avoid(engine):
    greedy = SamplingParams(temperature=0.0)
    prompt = "User: Hello there!\nRobot: Hello, friend!\nUser: Can you nod?\nRobot:"
    first = engine.start(prompt).sample(greedy)
    assert first.text.strip()  # " Can": the spoken piece ("Can,") has no leading space
    steered = engine.start(prompt)
    steered.avoid([first.text.strip() + ","])  # an opener as the guard hands it over ("Yes,")
    second = steered.sample(greedy)
    assert second.id != first.id and not second.is_eog
    # only the next token: the mask is gone after it, and an avoided token that was not the
    # model's choice changes nothing
    assert steered._avoid == set()
    other = engine.start(prompt)
    other.avoid(["Zebra"])
    assert other.sample(greedy).id == first.id


def test_a_price_and_an_item_the_request_names_are_copied_into_the_call(engine):
    """Under the grammar, the bundled model decoding a price alone writes one its examples
    name (120), not the player's; the request's own values are copied (``from_request``)."""
    import dataclasses

    from bolt_agent.core.tools.registry import ToolRegistry

    profile = load_profile("blacksmith_npc")
    decoded = ToolRegistry(dataclasses.replace(t, from_request=()) for t in profile.registry)
    knobs = Knobs(enable_thinking=False, conversational_mode=True)
    text = "Would you take my hunting dagger? I want 7 gold for it."
    calls = {}
    for name, registry in (("copied", profile.registry), ("decoded", decoded)):
        dialogue = Dialogue(profile.persona, profile.example_messages(), profile.nearest(1))
        config = RunnerConfig(
            sampling=SamplingParams(temperature=0.0), constrained=True, max_steps=1
        )
        sink = RecordingSink()
        TurnRunner(engine, dialogue, registry, config).run(
            TurnRequest("t0", text, knobs, "buy_from_player"), sink
        )
        calls[name] = [e[2] for e in sink.events if e[0] == "dispatch"]
    assert calls["copied"] == [{"item": "hunting dagger", "offered_price": 7}]
    # the control: the model alone gets the price wrong (the test fails without the copy)
    assert calls["decoded"] and calls["decoded"][0]["offered_price"] != 7

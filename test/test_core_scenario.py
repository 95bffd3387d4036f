"""Scenario files and the expectation checks (pure core, synthetic run records)."""

from pathlib import Path

from bolt_agent.core.sim.scenario import TurnLog, evaluate, load_scenario

ROOT = Path(__file__).resolve().parents[1]


def test_bundled_scenarios_load():
    for path in (ROOT / "config" / "scenarios").glob("*.yaml"):
        scenario = load_scenario(path)
        assert len(scenario.turns) == 3 and scenario.expectations


def record(**kw) -> TurnLog:
    base = dict(
        said="x",
        transcript="can you look around the room",
        completed=True,
        spoken=["Let me look."],
        tools=[
            {
                "tool": "trigger_reachy_animation",
                "arguments": {"animation_name": "scan_room"},
                "ok": True,
            }
        ],
        stamps={
            "speech_end": 1.0,
            "asr_final": 1.5,
            "first_speech": 2.0,
            "first_tool_goal": 2.1,
            "first_audio": 2.4,
        },
    )
    base.update(kw)
    return TurnLog(**base)


def scenario_with(tmp_path, expect: str):
    path = tmp_path / "s.yaml"
    path.write_text(f"turns: [a, b]\nexpect:\n{expect}")
    return load_scenario(path)


def test_expectations_pass_and_fail_on_the_record(tmp_path):
    s = scenario_with(
        tmp_path,
        """
  - tool_called: {name: trigger_reachy_animation, arguments: {animation_name: scan_room}}
  - tool_called: {name: trigger_reachy_animation, arguments: {animation_name: happy_nod}}
  - speech_before_tools: true
  - spoken: let me
  - not_spoken: goodbye
  - transcript: Look around!
    turn: 1
  - max_latency_s: {stage: voice_to_voice, value: 1.5}
  - max_latency_s: 1.0
  - turns_completed: 2
""",
    )
    verdicts = evaluate(s, [record(), record(completed=False)])
    assert [v.passed for v in verdicts] == [True, False, True, True, True, True, True, False, False]


def test_speech_after_the_tool_goal_fails(tmp_path):
    s = scenario_with(tmp_path, "  - speech_before_tools: true\n")
    late = record(stamps={"first_speech": 3.0, "first_tool_goal": 2.0})
    assert not evaluate(s, [record(), late])[0].passed

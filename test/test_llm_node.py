"""llm_node in its own process, over real DDS: spoken-first ordering, knobs, errors, barge-in."""

from __future__ import annotations

import json
import time

import pytest
from rclpy.action import ActionClient
from std_msgs.msg import Bool, String

from bolt_agent.nodes.qos import LATCHED, RELIABLE
from bolt_agent_interfaces.action import Converse
from bolt_agent_interfaces.msg import (
    Transcript,
    TtsState,
    VoiceActivity,
)
from support.diagnostics import Diagnostics
from support.llm import Recorder, start_llm, trigger_caller
from support.ros_helpers import ros_node, spin_until, wait_for_subscriber

#: a long spoken answer, to be interrupted after its first sentence. Sampled (seed 11): greedy
#: ends the story with its first sentence
STORY = {
    "tool_choice": "none",
    "max_speech_chars": "400",
    "max_new_tokens": "200",
    "max_steps": "1",
    "model_sampling": "false",
}
# A turn still in progress when the test acts on it: a call is required, and the animation it
# plays goes on until the test releases it (Recorder hold_animations). A story the model ended
# with its first sentence left nothing to stop, and how long it runs depends on the CPU's draws:
# on an Intel Xeon the bundled model ended each of three stories in 5 to 11 tokens.
MOVING = {**STORY, "tool_choice": "required", "max_steps": "2"}
LOOK = "Can you look around the room for me?"


def test_speech_reaches_subscribers_before_every_tool_goal(node_process, unique_ns):
    llm = start_llm(node_process, unique_ns, tool_choice="required", max_steps="1")
    with ros_node("recorder", unique_ns) as (node, executor):
        rec = Recorder(node)
        wait_for_subscriber(executor, rec.prompt, timeout=60)
        turns = 20
        for i in range(1, turns + 1):
            rec.prompt.publish(String(data=f"Please look around, request {i}."))
            spin_until(
                executor,
                lambda i=i: rec.turn_over(f"teleop-{i}"),
                60,
                lambda i=i: f"turn {i} to end\n{llm.log()[-2000:]}",
            )
        for i in range(1, turns + 1):
            turn = f"teleop-{i}"
            goals = [(t, g) for t, g in rec.goals if g.turn_id == turn]
            assert len(goals) == 1, (turn, goals, rec.spoken(turn))
            spoken = rec.spoken(turn)
            assert spoken, f"{turn}: no speech"
            assert spoken[0][0] < goals[0][0], f"{turn}: goal arrived before the speech"
            assert goals[0][1].source == "llm"
            assert goals[0][1].name in {"curious_tilt", "happy_nod", "scan_room", "wave_antenna"}
        done = [e for e in rec.tool_events if e["ok"]]
        assert len(done) == turns
    assert llm.alive()


def test_converse_knobs_thinking_budget_and_second_step(node_process, unique_ns):
    start_llm(node_process, unique_ns, tool_choice="required", max_steps="2")
    with ros_node("converser", unique_ns) as (node, executor):
        # a failed animation: the turn goes on in words (a played one ends it: after_result)
        rec = Recorder(node, animation_ok=False)
        client = ActionClient(node, Converse, "llm/converse")
        spin_until(executor, lambda: client.server_is_ready(), 60, "llm/converse")
        feedback = []
        goal = Converse.Goal(
            prompt="Nod if you can hear me.",
            enable_thinking=True,
            thinking_token_budget=16,
            conversational_mode=True,
        )
        send = client.send_goal_async(
            goal, feedback_callback=lambda f: feedback.append(f.feedback.spoken_delta)
        )
        spin_until(executor, send.done, 30, "goal acceptance")
        result_future = send.result().get_result_async()
        spin_until(executor, result_future.done, 90, "converse result")
        result = result_future.result().result
        assert 0 < result.thinking_tokens <= 16
        assert [c.name for c in result.tool_calls] == ["trigger_reachy_animation"]
        assert "animation_name" in json.loads(result.tool_calls[0].arguments_json)
        assert "".join(feedback).strip() and result.spoken_text
        turn_id = rec.goals[0][1].turn_id
        spin_until(executor, lambda: rec.turn_over(turn_id), 10, "end of turn marker")
        goal_time = rec.goals[0][0]
        assert any(t > goal_time for t, _ in rec.spoken(turn_id)), "no second step after the tool"
        spoken = " ".join(m.text for _, m in rec.spoken(turn_id))
        thinking = "".join(rec.thinking)
        assert thinking.strip() and thinking.strip() not in spoken
        assert "<|channel>" not in spoken
        llm_metrics = [m for m in rec.metrics if m.turn_id == turn_id and m.source == "llm"]
        spin_until(executor, lambda: any(m.turn_id == turn_id for m in rec.metrics), 10, "metrics")
        llm_metrics = [m for m in rec.metrics if m.turn_id == turn_id]
        m = llm_metrics[0]
        assert m.thinking_tokens == result.thinking_tokens
        stamps = [m.llm_first_token, m.first_speech, m.first_tool_goal, m.turn_end]
        assert all(s.sec > 0 for s in stamps)


def test_dead_action_server_becomes_a_tool_error_and_the_turn_goes_on(node_process, unique_ns):
    llm = start_llm(node_process, unique_ns, tool_choice="required", max_steps="2")
    with ros_node("no_server", unique_ns) as (node, executor):
        rec = Recorder(node, serve_animation=False)
        wait_for_subscriber(executor, rec.prompt, timeout=60)
        rec.prompt.publish(String(data="Wave at me."))
        spin_until(executor, lambda: rec.turn_over("teleop-1"), 60, "turn end")
        spin_until(executor, lambda: rec.tool_events, 10, "tool event")
        event = rec.tool_events[0]
        assert not event["ok"] and "not available" in event["error"]
        assert "not available" in llm.log()
        assert llm.alive()


def test_barge_in_cancels_the_turn_in_progress_and_stops_speech(node_process, unique_ns):
    """A barge-in while the turn is in progress (the animation it called still playing) cancels
    it: tts/stop, no end marker, counted; the node answers the next prompt."""
    start_llm(node_process, unique_ns, **MOVING, diagnostics_period_s="0.3")
    with ros_node("barger", unique_ns) as (node, executor):
        rec = Recorder(node, hold_animations=True)
        vad = node.create_publisher(VoiceActivity, "asr/voice_activity", RELIABLE)
        tts_state = node.create_publisher(TtsState, "tts/state", LATCHED)
        diag = Diagnostics(node, unique_ns)
        wait_for_subscriber(executor, rec.prompt, timeout=60)
        wait_for_subscriber(executor, vad)
        tid = "teleop-1"
        rec.prompt.publish(String(data=LOOK))
        spin_until(executor, lambda: rec.goals, 60, f"the animation {tid} calls")
        vad.publish(VoiceActivity(utterance_id="u1", speaking=True, barge_in=True))
        spin_until(executor, lambda: tid in rec.stops, 10, f"tts/stop for {tid}")
        spin_until(executor, lambda: any(m.turn_id == tid for m in rec.metrics), 10, "turn metrics")
        diag.wait(executor, "llm_node", lambda _lv, _m, v: v.get("barge_ins_cancelled") == "1", 10)
        assert not rec.turn_over(tid)  # a cancelled turn sends no end marker
        said = " ".join(m.text for _, m in rec.spoken(tid))
        tts_state.publish(TtsState(turn_id=tid, spoken_text=said, interrupted=True))
        # the node keeps working after the interruption
        rec.release()
        rec.prompt.publish(String(data="Are you still there?"))
        spin_until(executor, lambda: rec.turn_over("teleop-2"), 60, "next turn")
        rec.close()


def test_mute_cancels_the_turn_in_progress_and_its_repeats_cancel_nothing(node_process, unique_ns):
    """``teleop/mute`` true stops the turn being spoken (tts/stop, no end marker, metrics
    "cancelled"); a turn asked while muted runs unheard; mute true again (a latched publisher
    reaches both of llm_node's mute subscriptions, so every value comes twice) cancels nothing."""
    llm = start_llm(node_process, unique_ns, **MOVING)
    with ros_node("muter", unique_ns) as (node, executor):
        rec = Recorder(node, hold_animations=True)
        mute = node.create_publisher(Bool, "teleop/mute", LATCHED)
        wait_for_subscriber(executor, rec.prompt, timeout=60)
        # both of llm_node's mute subscriptions: a latched one matched later gets the writer's
        # last sample, which could land after a newer value the volatile one already acted on
        wait_for_subscriber(executor, mute, count=2)

        def logged(line: str, times: int = 1) -> None:
            spin_until(executor, lambda: llm.log().count(line) >= times, 10, f"log: {line!r}")

        def outcome(turn: str) -> str:
            spin_until(
                executor, lambda: any(m.turn_id == turn for m in rec.metrics), 60, f"{turn} metrics"
            )
            return next(m.outcome for m in rec.metrics if m.turn_id == turn)

        # the turn in progress (its animation playing): cancelled at the mute, speech stopped
        n, tid = 1, "teleop-1"
        rec.prompt.publish(String(data=LOOK))
        spin_until(executor, lambda: rec.goals, 60, f"the animation {tid} calls")
        mute.publish(Bool(data=True))
        logged("teleop mute ON")
        assert outcome(tid) == "cancelled", llm.log()[-3000:]
        spin_until(executor, lambda: tid in rec.stops, 10, f"tts/stop for {tid}")
        assert not rec.turn_over(tid), (rec.stops, llm.log()[-3000:])
        rec.release()
        # muted: the next turn runs unheard, and a repeated mute does not cancel it
        muted_turn = f"teleop-{n + 1}"
        rec.prompt.publish(String(data=LOOK))
        logged(f"teleop/prompt: turn {muted_turn}")
        mute.publish(Bool(data=True))
        assert outcome(muted_turn) == "ok"
        assert rec.spoken(muted_turn) == [] and muted_turn not in rec.stops
        mutes = [line for line in llm.log().splitlines() if "teleop mute" in line]
        assert llm.log().count("teleop mute ON") == n, mutes  # one per change, not per copy
        rec.close()
    assert llm.alive()


def test_a_partial_transcript_prefills_the_prompt_before_the_final_starts_the_turn(
    node_process, unique_ns
):
    llm = start_llm(node_process, unique_ns, tool_choice="none", max_steps="1")
    with ros_node("listener", unique_ns) as (node, executor):
        rec = Recorder(node, serve_animation=False)
        asr = node.create_publisher(Transcript, "asr/transcript", RELIABLE)
        vad = node.create_publisher(VoiceActivity, "asr/voice_activity", RELIABLE)
        wait_for_subscriber(executor, asr, timeout=60)
        wait_for_subscriber(executor, vad)
        # start-up: the system prompt and tool declarations are prefilled before any turn
        spin_until(executor, lambda: "ahead of the startup" in llm.log(), 30, llm.log)
        vad.publish(VoiceActivity(utterance_id="u1", speaking=True))
        spin_until(executor, lambda: "ahead of the u1 (no text)" in llm.log(), 30, llm.log)
        asr.publish(Transcript(utterance_id="u1", text="What can you see", is_final=False))
        partial = "ahead of the partial transcript of u1"
        spin_until(executor, lambda: partial in llm.log(), 30, lambda: f"the prefill\n{llm.log()}")
        assert not rec.said  # neither starts a turn
        asr.publish(Transcript(utterance_id="u1", text="What can you see?", is_final=True))
        spin_until(executor, lambda: rec.turn_over("u1"), 60, lambda: f"the turn\n{llm.log()}")
        # (the turn's log line is written after its end marker is published)
        spin_until(executor, lambda: "turn u1:" in llm.log(), 10, "the turn's log line")
    log = llm.log()
    assert log.index(partial) < log.index("turn u1:"), log
    assert llm.alive()


def test_reset_service_starts_a_new_conversation(node_process, unique_ns):
    """``llm/reset`` (std_srvs/Trigger) over DDS: the history is forgotten, the node answers on."""
    llm = start_llm(node_process, unique_ns, tool_choice="none", max_steps="1")
    with ros_node("resetter", unique_ns) as (node, executor):
        rec = Recorder(node, serve_animation=False)
        wait_for_subscriber(executor, rec.prompt, timeout=60)
        call = trigger_caller(node, executor, "llm/reset", llm)

        for i in (1, 2):
            rec.prompt.publish(String(data=f"Hello number {i}."))
            spin_until(executor, lambda i=i: rec.turn_over(f"teleop-{i}"), 60, llm.log)
        first = call()
        assert first.success and first.message == "forgot 2 turn(s)", first
        assert call().message == "forgot 0 turn(s)"
        rec.prompt.publish(String(data="Hello again."))
        spin_until(executor, lambda: rec.turn_over("teleop-3"), 60, llm.log)
        assert call().message == "forgot 1 turn(s)"  # only the turn after the reset
    assert "conversation reset" in llm.log() and llm.alive()


def test_cancel_service_stops_the_turn_in_progress(node_process, unique_ns):
    """``llm/cancel`` (std_srvs/Trigger): the running turn (its animation playing) stops
    (tts/stop, no end marker), the answer names it; with nothing running it says so; the node
    answers on."""
    llm = start_llm(node_process, unique_ns, **MOVING)
    with ros_node("canceller", unique_ns) as (node, executor):
        rec = Recorder(node, hold_animations=True)
        wait_for_subscriber(executor, rec.prompt, timeout=60)
        call = trigger_caller(node, executor, "llm/cancel", llm)

        idle = call()
        assert not idle.success and idle.message == "no turn in progress", idle
        tid = "teleop-1"
        rec.prompt.publish(String(data=LOOK))
        spin_until(executor, lambda: rec.goals, 60, f"the animation {tid} calls")
        answer = call()
        assert answer.success and answer.message == f"cancelled turn {tid}", answer
        spin_until(executor, lambda: tid in rec.stops, 10, "tts/stop for the cancelled turn")
        assert not rec.turn_over(tid)
        rec.release()
        rec.prompt.publish(String(data="Are you still there?"))
        spin_until(executor, lambda: rec.turn_over("teleop-2"), 60, "next turn")
        rec.close()
    assert llm.alive()


def test_missing_model_leaves_the_node_alive_and_unconfigured(node_process, unique_ns):
    llm = start_llm(node_process, unique_ns, model="/nonexistent/model.gguf")
    deadline = time.monotonic() + 30
    while "configure failed" not in llm.log() and time.monotonic() < deadline:
        time.sleep(0.1)  # polling a log file: there is no event to wait on
    log = llm.log()
    assert "configure failed" in log and "/nonexistent/model.gguf" in log
    assert llm.alive()


@pytest.fixture(autouse=True)
def _limit_threads(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")

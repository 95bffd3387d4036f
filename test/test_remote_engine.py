"""The LLM on a real OpenAI-compatible server (llama-cpp-python's, bundled GGUF, loopback, one
thread): spoken-first turns, the knobs, cancel mid-stream, and the local fallback when the
server is killed, stalled or absent. No part of the server is simulated."""

from __future__ import annotations

import os
import re
import signal
import threading
import time

import pytest

from bolt_agent.core.llm.chat_template import Knobs
from bolt_agent.core.llm.dialogue import Dialogue
from bolt_agent.core.llm.llama.engine import LlamaConfig, LlamaEngine
from bolt_agent.core.llm.profile import load_profile
from bolt_agent.core.llm.remote import RemoteConfig, build_remote_engine
from bolt_agent.core.llm.turn_runner import RunnerConfig, TurnRequest, TurnRunner
from bolt_agent.core.llm.types import SamplingParams
from bolt_agent.core.models import resolve_model
from support.remote_server import LlamaServer, free_port
from support.turn_sinks import RecordingSink, speaking_after_results

MODEL = str(resolve_model("", kind="llm"))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = LlamaServer(tmp_path_factory.mktemp("llama_server")).start()
    yield srv
    srv.stop()


def remote(base_url: str, **kw):
    config = RemoteConfig(
        base_url=base_url, n_ctx=2048, timeout_s=kw.pop("timeout_s", 60.0)
    )  # cold prefills on busy cores
    return build_remote_engine(config, MODEL, **kw)


def runner_for(engine, **cfg) -> TurnRunner:
    profile = load_profile("reachy_mini")
    config = RunnerConfig(
        sampling=SamplingParams(seed=cfg.pop("seed", 7)),
        constrained=cfg.pop("constrained", True),
        max_speech_chars=cfg.pop("max_speech_chars", 60),
        **cfg,
    )
    # the tool result goes back to the server for a next step (the profile ends the turn there)
    registry = speaking_after_results(profile.registry)
    runner = TurnRunner(engine, Dialogue(profile.persona), registry, config)
    engine.watch_cancel(lambda: runner.cancel_token)
    return runner


def local_engine() -> LlamaEngine:
    return LlamaEngine(LlamaConfig(model_path=MODEL, n_ctx=2048, n_threads=1)).load()


def test_spoken_first_over_several_turns(server):
    engine = remote(server.base_url, load_local=None)
    runner = runner_for(engine, max_steps=2, max_new_tokens=80, max_speech_chars=30)
    log_start = len(server.log.read_text())
    for i, text in enumerate(["Look around the room!", "Nod if you agree.", "Wave at me!"]):
        sink = RecordingSink()
        result = runner.run(
            TurnRequest(f"t{i}", text, Knobs(enable_thinking=False), "required"), sink
        )
        kinds = sink.kinds()
        assert "dispatch" in kinds and kinds[0] == "sentence", kinds  # speech goes out first
        assert result.tool_calls and not result.errors and not result.cancelled
        assert result.steps == 2  # the tool result went back to the server for the next step
        assert all(s.generated > 0 and s.first_token_at for s in result.stats)
    # the history was sent back every turn: three user turns, each with its tool response
    assert len(runner.dialogue.turns) == 3
    assert all(t.steps[0].tool_responses for t in runner.dialogue.turns)
    # and the server reused the prompt's prefix (llama-cpp-python logs each prompt's cache hit)
    hits = re.findall(
        r"(\d+) prefix-match hit, remaining (\d+) prompt", server.log.read_text()[log_start:]
    )
    hit, remaining = map(int, hits[-1])
    assert hit > 4 * remaining, hits


def test_thinking_budget_is_forced_over_the_network(server):
    engine = remote(server.base_url, load_local=None)
    runner = runner_for(engine, max_steps=1, max_new_tokens=60)
    sink = RecordingSink()
    knobs = Knobs(enable_thinking=True, thinking_token_budget=12, conversational_mode=True)
    result = runner.run(TurnRequest("t1", "What can you see?", knobs, "none"), sink)
    assert result.thinking_tokens == 12  # cut at the budget (the base model never closes it)
    assert result.thinking_text.strip() and result.spoken_text
    spoken = " ".join(e[2] for e in sink.events if e[0] == "sentence")
    assert "<|channel>" not in spoken and "<channel|>" not in spoken


def test_thinking_off_means_no_thinking(server):
    engine = remote(server.base_url, load_local=None)
    runner = runner_for(engine, max_steps=1, max_new_tokens=40)
    sink = RecordingSink()
    result = runner.run(TurnRequest("t1", "Hi!", Knobs(enable_thinking=False), "none"), sink)
    assert result.thinking_tokens == 0 and not [e for e in sink.events if e[0] == "think"]
    assert result.spoken_text and not result.tool_calls


def test_cancel_mid_stream_closes_the_stream_and_the_server_stops(server):
    engine = remote(server.base_url, load_local=None)
    # unconstrained, long answer: still streaming when cancelled
    runner = runner_for(engine, max_steps=1, max_new_tokens=400, constrained=False)
    first = threading.Event()
    sink = RecordingSink()
    ports: list[int] = []

    def on_first_token(turn_id: str) -> None:
        ports.append(engine._open._stream._conn.sock.getsockname()[1])  # this stream's port
        runner.cancel()  # here, not from the test thread: a short answer could end first
        first.set()

    sink.on_first_token = on_first_token
    out = {}
    worker = threading.Thread(
        target=lambda: out.update(
            r=runner.run(
                TurnRequest("c1", "Tell me a long story.", Knobs(enable_thinking=False)), sink
            )
        )
    )
    worker.start()
    assert first.wait(120)
    worker.join(60)
    assert not worker.is_alive() and out["r"].cancelled
    assert out["r"].completion_tokens < 400
    deadline = time.monotonic() + 30  # the server notices the closed connection and stops
    gone = (
        f"Disconnected from client (via refresh/close) Address(host='127.0.0.1', port={ports[0]})"
    )
    while gone not in server.log.read_text():
        assert time.monotonic() < deadline, "the server kept generating for a closed stream"
        time.sleep(0.1)
    # and it is free for the next turn at once
    runner.config = RunnerConfig(max_steps=1, max_new_tokens=8)
    result = runner.run(TurnRequest("c2", "Hi!", Knobs(enable_thinking=False)), RecordingSink())
    assert not result.cancelled and result.completion_tokens > 0


def test_server_killed_mid_turn_is_answered_by_the_local_fallback(tmp_path):
    srv = LlamaServer(tmp_path).start()
    reasons: list[str] = []
    local = local_engine()
    try:
        engine = remote(
            srv.base_url, load_local=lambda: local, warm=True, on_fallback=reasons.append
        )
        runner = runner_for(engine, max_steps=2, max_new_tokens=96)
        sink = RecordingSink()
        sink.on_first_token = lambda turn_id: srv.kill()  # a real SIGKILL mid-stream
        req = TurnRequest("k1", "Look around the room!", Knobs(enable_thinking=False), "required")
        result = runner.run(req, sink)
        assert srv.proc.poll() is not None
        assert engine.fallbacks >= 1 and reasons and "dropped" in reasons[0]
        # answered to its end by the local engine (whether the model then calls a tool is its
        # own draw: on an Intel Xeon the bundled model spoke on and called none)
        assert not result.cancelled and result.spoken_text
        assert sink.kinds()[0] == "sentence"
        # the next turn tries the server again: restarted on the same port, it answers
        before = engine.fallbacks
        srv.start()
        result = runner.run(
            TurnRequest("k2", "Hi!", Knobs(enable_thinking=False), "none"), RecordingSink()
        )
        assert result.spoken_text and engine.fallbacks == before
    finally:
        srv.stop()
        local.close()


def test_stalled_server_falls_back_after_the_timeout_and_refused_loads_on_demand(tmp_path):
    srv = LlamaServer(tmp_path).start()
    loads: list[int] = []

    def load_local():
        loads.append(1)
        return local_engine()

    try:
        engine = remote(srv.base_url, load_local=load_local, warm=False, timeout_s=2.0)
        assert not engine.local_loaded  # cold: nothing loaded until the server fails
        runner = runner_for(engine, max_steps=1, max_new_tokens=30)
        os.killpg(srv.proc.pid, signal.SIGSTOP)  # alive, connected, silent: a stall
        try:
            result = runner.run(
                TurnRequest("s1", "Hi!", Knobs(enable_thinking=False), "none"), RecordingSink()
            )
        finally:
            os.killpg(srv.proc.pid, signal.SIGCONT)
        assert "stalled" in engine.last_fallback and loads == [1]
        assert result.spoken_text and not result.cancelled
    finally:
        srv.stop()
    # nothing listens any more: refused at once, answered locally (loaded once, kept)
    result = runner.run(
        TurnRequest("s2", "Hi!", Knobs(enable_thinking=False), "none"), RecordingSink()
    )
    assert "refused" in engine.last_fallback and engine.fallbacks == 2 and loads == [1]
    assert result.spoken_text
    engine.close()


def test_no_fallback_means_the_turn_fails_clearly():
    engine = remote(f"http://127.0.0.1:{free_port()}/v1", load_local=None)
    runner = runner_for(engine, max_steps=1)
    with pytest.raises(Exception, match="refused"):
        runner.run(TurnRequest("n1", "Hi!", Knobs(enable_thinking=False), "none"), RecordingSink())


def test_api_key_is_read_from_the_named_variable_and_never_shown(monkeypatch):
    from bolt_agent.core.llm.remote import api_key_from_env

    monkeypatch.setenv("BOLT_TEST_KEY", "sk-secret-123")
    config = RemoteConfig(api_key=api_key_from_env("BOLT_TEST_KEY"))
    assert config.headers() == {"Authorization": "Bearer sk-secret-123"}
    assert "sk-secret" not in repr(config)
    with pytest.raises(Exception, match="BOLT_NOT_SET"):
        api_key_from_env("BOLT_NOT_SET")


def test_chat_api_streams_speech_deltas_as_they_come(server):
    engine = build_remote_engine(
        RemoteConfig(base_url=server.base_url, n_ctx=2048, api="chat"), MODEL, None
    )
    runner = runner_for(engine, max_steps=1, max_new_tokens=24, constrained=False)
    sink = RecordingSink()
    result = runner.run(
        TurnRequest("h1", "Hello, who are you?", Knobs(enable_thinking=False)), sink
    )
    kinds = [e[0] for e in sink.events]
    assert result.spoken_text and not result.errors
    assert kinds.count("delta") > 3  # token by token, not one block at the end
    assert kinds.index("delta") < kinds.index("end")


def test_chat_deltas_become_speech_first_then_the_tool_calls():
    """The server's streamed tool-call fragments are held until the stream ends, so the parser
    (and the sink) get the speech first whatever order the fragments came in."""
    from bolt_agent.core.llm.output_parser import OutputParser, Sentence, ToolCall

    engine = build_remote_engine(RemoteConfig(api="chat"), MODEL, None)
    prompt = engine.chat_template.render([{"role": "user", "content": "Look around"}])
    session = engine.start(prompt)
    call = {"index": 0, "function": {"name": "trigger_reachy_animation", "arguments": ""}}
    events = [
        {"choices": [{"delta": {"reasoning_content": "They want a look."}}]},
        {"choices": [{"delta": {"content": "Sure, let me look around."}}]},
        {"choices": [{"delta": {"tool_calls": [call]}}]},
        {"choices": [{"delta": {"content": " One moment."}}]},
        {
            "choices": [
                {"delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"anim'}}]}}
            ]
        },
        {
            "choices": [
                {
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "function": {"arguments": 'ation_name": "scan_room"}'}}
                        ]
                    }
                }
            ]
        },
        {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]},
    ]
    tokens = [t for ev in events for t in session.tokens(ev)]
    assert tokens[-1].is_eog
    parser = OutputParser()
    out = [ev for t in tokens if not t.is_eog for ev in parser.feed(t.text)] + parser.finish()
    kinds = [type(ev).__name__ for ev in out if isinstance(ev, (Sentence, ToolCall))]
    assert kinds[:2] == ["Sentence", "Sentence"] and kinds[-1] == "ToolCall", kinds
    calls = [ev for ev in out if isinstance(ev, ToolCall)]
    assert [(c.name, c.arguments) for c in calls] == [
        ("trigger_reachy_animation", {"animation_name": "scan_room"})
    ]
    assert "They want a look." in parser.thinking_text and "They want" not in parser.speech_text

"""The pipecat peer's pieces that need no devices: the configuration it gets (our models, the
stack's thread budget) and how its pipeline events become a turn (user-turn ends, stages).
The peer itself runs end to end, on the PulseAudio loop, in test_bench_smoke.py (same run as
our loop, as ``bolt-agent bench`` runs it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bolt_agent.benchmarks.pipecat_peer import PEER_DEFAULTS, _stamp, stack_settings
from bolt_agent.benchmarks.voice_loop import TurnOutcome, judge
from bolt_agent.core.models import resolve_model
from bolt_agent.stack.spec import StackSpec, effective_params


@pytest.mark.parametrize(
    "overrides", [{}, {"llm_node": {"n_threads": 2}, "asr_node": {"cpu_threads": 1}}]
)
def test_peer_gets_our_models_and_thread_budget(overrides):
    cfg = stack_settings(48, overrides)
    spec = StackSpec(sim=False, overrides=overrides)
    llm, asr, tts = (effective_params(spec, n) for n in ("llm_node", "asr_node", "tts_node"))
    assert cfg["n_threads"] == llm["n_threads"]
    assert cfg["n_threads_batch"] == (llm["n_threads_batch"] or llm["n_threads"])
    assert (
        cfg["asr_cpu_threads"] == asr["cpu_threads"]
        and cfg["tts_cpu_threads"] == tts["cpu_threads"]
    )
    assert (cfg["n_ctx"], cfg["n_batch"], cfg["n_ubatch"]) == (
        llm["n_ctx"],
        llm["n_batch"],
        llm["n_ubatch"],
    )
    for kind in ("llm", "asr", "tts"):
        assert cfg[f"{kind}_model"] == str(resolve_model("", kind=kind))
    assert cfg["max_tokens"] == 48
    assert cfg["chat_format"] == "gemma"  # the bundled Gemma GGUF has no template of its own
    assert {"threads", "vad", "turn_end", "asr", "llm", "tts", "audio_io"} <= set(PEER_DEFAULTS)


def _ev(event, wall, **kw):
    return {"event": event, "wall": wall, **kw}


def test_events_to_turn_traces_the_heard_answer_back():
    """pipecat ended the user's turn twice for one pause utterance (the first part's segment,
    then the rest's): two user-turn ends, the stages of the answer that was heard first."""
    evs = [
        _ev("vad_start", 10.0),
        _ev("vad_stop", 11.0),
        _ev("transcript", 11.5, text="I would like to buy"),
        _ev("llm_start", 11.6),
        _ev("llm_first_text", 11.8, text="What"),
        _ev("vad_start", 11.7),
        _ev("vad_stop", 12.3),
        _ev("transcript", 12.5, text="a long sword."),
        _ev("llm_start", 12.6),
        _ev("llm_first_text", 12.9, text="Sure"),
        _ev("tts_first_audio", 13.1),
        _ev("bot_started", 13.3),
    ]
    out = TurnOutcome(0, "I would like to buy a long sword.", kind="pause")
    _stamp(out, evs, evs[-1])
    assert out.transcript == "I would like to buy a long sword."
    assert out.finals == [
        ("", "I would like to buy", 11.6),
        ("", "I would like to buy a long sword.", 12.6),
    ]
    assert out.stamps == {
        "first_audio": 13.3,
        "llm_start": 12.6,
        "llm_first_token": 12.9,
        "tts_first_audio": 13.1,
        "asr_final": 12.5,
    }
    assert out.vad_end_wall == 12.3 and out.first_sentence == "Sure"
    out.user_end_wall = 12.2  # the rest ended in the recording here
    judge(out, robot_before_end=False)
    assert out.split_by == ["final_before_end", "several_finals"]
    assert out.endpoint_delay_s == pytest.approx(0.4)


def test_the_peers_llm_server_ends_with_the_peer_however_the_peer_ends(tmp_path):
    """An interrupted `bolt-agent bench` once left the peer's llama_cpp.server running: the
    server now dies with the process that started it, even when that one is SIGKILLed (its
    ``finally`` never runs)."""
    script = tmp_path / "peer_parent.py"
    script.write_text(
        "import sys, time\n"
        "from bolt_agent.benchmarks.pipecat_peer import stack_settings, start_llm_server\n"
        "proc, url = start_llm_server(stack_settings(), sys.stderr)\n"
        "print(proc.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        server = int(parent.stdout.readline())
        assert Path(f"/proc/{server}").exists()
        parent.kill()  # SIGKILL: no cleanup of its own
        parent.wait()
        deadline = time.monotonic() + 15
        while Path(f"/proc/{server}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)  # another process's exit: no event to wait on
        stat = Path(f"/proc/{server}/stat")
        assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
            parent.wait()

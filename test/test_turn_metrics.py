"""Turn metrics: merging partial stamps per turn (core) and `bolt-agent metrics` over real DDS."""

from __future__ import annotations

import json
import subprocess

import pytest
from builtin_interfaces.msg import Time

from bolt_agent.core.turn_metrics import PartialMetrics, TurnRecord, TurnTable, summarize
from bolt_agent.nodes.qos import RELIABLE
from bolt_agent_interfaces.msg import TurnMetrics
from support.ros_helpers import ros_node, wait_for_subscriber

T0 = 1_700_000_000 * 10**9  # an epoch time in ns


def ms(offset: float) -> int:
    return T0 + int(offset * 1e6)


def partials(turn: str, with_tts: bool = True) -> list[PartialMetrics]:
    out = [
        PartialMetrics(turn, "asr", {"speech_end": ms(0), "asr_final": ms(180)}),
        PartialMetrics(
            turn, "llm",
            {"llm_first_token": ms(420), "first_speech": ms(650), "first_tool_goal": ms(900),
             "turn_end": ms(1500), "tool_done": ms(1100), "asr_final": 0},
            {"completion_tokens": 42, "decode_tok_s": 31.5, "prompt_tokens": 300},
        ),
    ]  # fmt: skip
    if with_tts:
        out.append(PartialMetrics(turn, "tts", {"first_audio": ms(800)}))
    return out


def test_merge_keeps_every_source_and_measures_from_speech_end():
    record = TurnRecord("t1")
    for p in partials("t1"):
        record.merge(p)
    assert record.sources == ["asr", "llm", "tts"]
    assert record.latencies_ms() == {"asr_final": 180.0, "llm_first_token": 420.0,
                                     "first_speech": 650.0, "first_audio": 800.0,
                                     "first_tool_goal": 900.0}  # fmt: skip
    assert record.tokens == 42 and record.tok_s == 31.5
    assert record.to_dict()["counters"]["prompt_tokens"] == 300


def test_first_stamps_keep_the_earliest_and_turn_end_the_latest():
    record = TurnRecord("t")
    record.merge(PartialMetrics("t", "llm", {"first_speech": ms(500), "turn_end": ms(900)}))
    record.merge(PartialMetrics("t", "llm", {"first_speech": ms(700), "turn_end": ms(1200)}))
    assert record.stamps["first_speech"] == ms(500) and record.stamps["turn_end"] == ms(1200)
    assert record.sources == ["llm"]
    with pytest.raises(ValueError, match="unknown stage"):
        record.merge(PartialMetrics("t", "llm", {"lunch": 1}))


def test_a_failure_from_any_source_wins_over_ok_and_network_ttft_is_kept():
    record = TurnRecord("t")
    record.merge(PartialMetrics("t", "llm", {"turn_end": ms(9)}, {"network_ttft_s": 0.25}, "ok"))
    record.merge(PartialMetrics("t", "asr", {"speech_end": ms(0)}, {}, "failed: whisper raised"))
    record.merge(PartialMetrics("t", "tts", {"first_audio": ms(5)}, {}, "ok"))
    assert record.outcome == "failed: whisper raised"
    assert record.to_dict()["counters"]["network_ttft_s"] == 0.25
    assert TurnRecord("none").outcome == ""


def test_typed_turn_measures_from_asr_final_and_missing_stages_are_none():
    record = TurnRecord("typed")
    record.merge(PartialMetrics("typed", "llm", {"asr_final": ms(0), "first_speech": ms(300)}))
    assert record.latency_ms("first_speech") == 300.0 and record.latency_ms("first_audio") is None
    assert TurnRecord("empty").latencies_ms()["asr_final"] is None


def test_completion_needs_turn_end_then_all_sources_or_settle_time():
    table = TurnTable(settle_s=2.0)
    for p in partials("full"):
        table.add(p, now=10.0)
    for p in partials("no_tts", with_tts=False):
        table.add(p, now=10.0)
    table.add(PartialMetrics("open", "asr", {"speech_end": ms(0)}), now=10.0)
    assert [r.turn_id for r in table.update(now=10.5)] == ["full"]
    assert table.update(now=11.0) == []
    assert [r.turn_id for r in table.update(now=12.0)] == ["no_tts"]
    assert table.update(now=99.0) == []  # no turn_end yet: never complete
    assert [r.turn_id for r in table.complete_turns()] == ["full", "no_tts"]
    summary = summarize(table.complete_turns())
    assert summary["first_audio"]["count"] == 1 and summary["asr_final"]["median"] == 180.0
    assert summary["tok_s"]["mean"] == 31.5


def _msg(p: PartialMetrics) -> TurnMetrics:
    msg = TurnMetrics(turn_id=p.turn_id, source=p.source)
    for stage, ns in p.stamps.items():
        setattr(msg, stage, Time(sec=ns // 10**9, nanosec=ns % 10**9))
    for name, value in p.counters.items():
        setattr(msg, name, type(getattr(msg, name))(value))
    return msg


def test_metrics_cli_merges_live_traffic(node_process, unique_ns, tmp_path):
    out = tmp_path / "metrics.json"
    cli = node_process("-m", "bolt_agent.cli", "metrics", "--topic",
                       f"{unique_ns}/bolt/turn_metrics", "--once", "2", "--settle", "2.0",
                       "--json", str(out), name="metrics", env={"COLUMNS": "200"})  # fmt: skip
    with ros_node("metrics_publishers", unique_ns) as (node, executor):
        pub = node.create_publisher(TurnMetrics, "bolt/turn_metrics", RELIABLE)
        wait_for_subscriber(executor, pub, 30)
        for p in [*partials("turn-a"), *partials("turn-b", with_tts=False)]:
            pub.publish(_msg(p))
        try:
            assert cli.proc.wait(timeout=30) == 0, cli.log()
        except subprocess.TimeoutExpired:
            raise AssertionError(cli.log()) from None
    data = json.loads(out.read_text())
    turns = {t["turn_id"]: t for t in data["turns"]}
    assert list(turns) == ["turn-a", "turn-b"]
    assert turns["turn-a"]["latency_ms"]["first_audio"] == pytest.approx(800.0)
    assert turns["turn-a"]["sources"] == ["asr", "llm", "tts"]
    assert turns["turn-b"]["latency_ms"]["first_audio"] is None
    assert turns["turn-b"]["latency_ms"]["llm_first_token"] == pytest.approx(420.0)
    assert data["summary"]["tok_s"]["count"] == 2
    log = cli.log()
    assert "speech_end→asr_final" in log and "turn-b" in log and "31.5" in log
    assert "wrote 2 turns" in log


def test_outcomes_are_the_message_constants():
    """The core writes TurnMetrics.outcome without importing ROS: its words are the message's
    OUTCOME_* constants."""
    from types import SimpleNamespace

    from bolt_agent.core.turn_metrics import turn_outcome

    ok = SimpleNamespace(failure="", cancelled=False)
    cancelled = SimpleNamespace(failure="", cancelled=True)
    failed = SimpleNamespace(failure="the model ran out of context", cancelled=False)
    assert turn_outcome(ok) == TurnMetrics.OUTCOME_OK
    assert turn_outcome(cancelled) == TurnMetrics.OUTCOME_CANCELLED
    assert turn_outcome(failed).startswith(TurnMetrics.OUTCOME_FAILED_PREFIX)

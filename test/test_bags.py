"""Bags over real DDS: `bolt-agent bag record` of another process's traffic (our custom types
included), read back with rosbags, `bag play` in its own process (content, order, timing, rate,
remap), in-process BagRecorder/BagPlayer with sqlite3 storage, and damaged bags."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rclpy.serialization import deserialize_message
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

from bolt_agent.core.sim.bag_io import BagError, BagReader, parse_remaps, playback_offsets
from bolt_agent.nodes.bag_transport import BagPlayer, BagRecorder
from bolt_agent.nodes.qos import RELIABLE
from support.bag_traffic import GAPS, TOPICS, traffic
from support.ros_helpers import ros_node, spin_until

HERE = Path(__file__).parent
TRAFFIC = HERE / "support" / "bag_traffic.py"  # publishes once every topic has a reader
TIMING_TOLERANCE_S = 0.05  # per message, against the bag's own spacing (2 shared cores)


def _cli(*args: str) -> list[str]:
    return ["-m", "bolt_agent.cli", "bag", *args]


def _wait_exit(proc, timeout: float) -> int:
    try:
        return proc.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running after {timeout}s:\n{proc.log()}") from None


@pytest.fixture
def recorded_bag(node_process, unique_ns, tmp_path) -> tuple[Path, dict[str, str]]:
    """A bag recorded by the CLI from the traffic process; plus the type hashes rclpy advertised."""
    bag = tmp_path / "bag"
    topics = [f"{unique_ns}/{t}" for t in TOPICS]
    recorder = node_process(*_cli("record", "-o", str(bag), "--max-messages", str(len(GAPS)),
                                  *topics), name="recorder")  # fmt: skip
    publisher = node_process(str(TRAFFIC), "--ros-args", "-r",
                             f"__ns:={unique_ns}", name="traffic")  # fmt: skip
    advertised: dict[str, str] = {}
    with ros_node("graph_probe") as (node, executor):
        spin_until(executor, lambda: all(node.get_publishers_info_by_topic(t) for t in topics),
                   30, "the traffic publishers")  # fmt: skip
        for t in topics:
            advertised[t] = str(node.get_publishers_info_by_topic(t)[0].topic_type_hash)
    assert _wait_exit(recorder, 60) == 0, recorder.log()
    assert f"wrote {len(GAPS)} messages" in recorder.log()
    publisher.stop()
    return bag, advertised


def _subscribe_all(node, names: dict[str, type], got: list) -> None:
    for name, cls in names.items():
        node.create_subscription(
            cls, name, lambda m, n=name: got.append((time.monotonic(), n, m)), RELIABLE
        )


def _play_and_collect(node_process, bag: Path, names: dict[str, type], *extra: str) -> list:
    got: list = []
    with ros_node("bag_listener") as (node, executor):
        _subscribe_all(node, names, got)
        player = node_process(*_cli("play", str(bag), *extra), name="player")
        spin_until(executor, lambda: len(got) == len(GAPS), 30, f"{len(GAPS)} replayed messages")
        assert _wait_exit(player, 30) == 0, player.log()
    return got


def _bag_offsets(bag: Path) -> list[float]:
    with BagReader(bag) as reader:
        return playback_offsets([m.timestamp for m in reader.messages()])


def _in_bag_order(got: list, expected: list[tuple[str, object]]) -> list:
    """The arrivals rearranged into the bag's order: each is matched to the k-th recorded message
    of its own topic. DDS keeps the order of one topic's messages, not across topics (a reliable
    resend can delay one topic's message behind another's published 40 ms later)."""
    assert len(got) == len(expected), (len(got), len(expected))
    queues: dict[str, list] = {}
    for item in got:
        queues.setdefault(item[1], []).append(item)
    return [queues[name].pop(0) if queues.get(name) else (None, name, None) for name, _ in expected]


def _assert_timing(got: list, expected_offsets: list[float]) -> None:
    """Each arrival within the tolerance of its due time, measured from the median start (one
    late first message, a reliable resend, must not shift every other one)."""
    lags = sorted(arrived - due for (arrived, _, _), due in zip(got, expected_offsets))
    start = lags[len(lags) // 2]
    for (arrived, name, _), due in zip(got, expected_offsets):
        assert abs((arrived - start) - due) < TIMING_TOLERANCE_S, (name, arrived - start, due)


def test_record_keeps_types_definitions_and_hashes(recorded_bag, unique_ns):
    bag, advertised = recorded_bag
    with BagReader(bag) as reader:
        summary = reader.summary()
        messages = list(reader.messages())
    assert summary.storage == "mcap" and summary.message_count == len(GAPS)
    store = get_typestore(Stores.EMPTY)
    for topic in summary.topics:
        # the bag alone defines the type, and its hash is the one rmw advertised
        store.register(get_types_from_msg(topic.msgdef, topic.msgtype))
        assert topic.digest == advertised[topic.name]
        assert store.hash_rihs01(topic.msgtype) == topic.digest
        assert topic.qos and topic.qos[0].reliability.name == "RELIABLE"
    per_topic = {t: [m for t2, m in traffic() if t2 == t] for t in TOPICS}
    for rel, expected in per_topic.items():
        recorded = [m for m in messages if m.topic == f"{unique_ns}/{rel}"]
        assert [deserialize_message(m.data, TOPICS[rel]) for m in recorded] == expected
    say = next(m for m in messages if m.topic.endswith("speech/say"))
    decoded = store.deserialize_cdr(say.data, say.msgtype)  # rosbags reads our type too
    assert decoded.turn_id == "turn-7" and decoded.text == "Fine steel, number 1."


def test_play_reproduces_order_content_timing_and_remap(recorded_bag, unique_ns, node_process):
    bag, _ = recorded_bag
    remapped = f"{unique_ns}/replayed/say"
    names = {f"{unique_ns}/{t}": cls for t, cls in TOPICS.items() if t != "speech/say"}
    names[remapped] = TOPICS["speech/say"]
    got = _play_and_collect(node_process, bag, names, "--remap",
                            f"{unique_ns}/speech/say:={remapped}")  # fmt: skip
    expected = [(f"{unique_ns}/{t}" if t != "speech/say" else remapped, m) for t, m in traffic()]
    ordered = _in_bag_order(got, expected)
    assert [(n, m) for _, n, m in ordered] == expected  # every message, in order on its topic
    _assert_timing(ordered, _bag_offsets(bag))


def test_play_rate_factor(recorded_bag, unique_ns, node_process):
    bag, _ = recorded_bag
    names = {f"{unique_ns}/{t}": cls for t, cls in TOPICS.items()}
    got = _play_and_collect(node_process, bag, names, "--rate", "2.5")
    offsets = _bag_offsets(bag)
    expected = [(f"{unique_ns}/{t}", m) for t, m in traffic()]
    _assert_timing(_in_bag_order(got, expected), [o / 2.5 for o in offsets])
    assert got[-1][0] - got[0][0] < offsets[-1] / 2  # clearly faster than real time


def test_recorder_and_player_inside_one_node_with_sqlite3(node_process, unique_ns, tmp_path):
    bag = tmp_path / "lib_bag"
    with ros_node("embedded", unique_ns) as (node, executor):
        recorder = BagRecorder(node, bag, list(TOPICS), storage="sqlite3")
        node_process(str(TRAFFIC), "--ros-args", "-r", f"__ns:={unique_ns}",
                     name="traffic")  # fmt: skip
        spin_until(executor, lambda: recorder.message_count == len(GAPS), 30, "recorded traffic")
        assert recorder.stop() == bag
        assert sorted(p.suffix for p in bag.iterdir()) == [".db3", ".yaml"]

        got: list = []
        _subscribe_all(node, {"replay/" + t: cls for t, cls in TOPICS.items()}, got)
        remap = {f"{unique_ns}/{t}": "replay/" + t for t in TOPICS}
        player = BagPlayer(node, bag, rate=4.0, remap=remap, topics=[f"{unique_ns}/chatter"])
        player.start()
        spin_until(executor, lambda: player.done.is_set() and len(got) >= 3, 30, "replay")
        player.destroy()
    chatter = [m for t, m in traffic() if t == "chatter"]
    assert [m for _, _, m in got] == chatter
    assert {n for _, n, _ in got} == {"replay/chatter"}


def test_damaged_bags_give_one_line_errors(recorded_bag, tmp_path):
    bag, _ = recorded_bag
    truncated = tmp_path / "truncated"
    shutil.copytree(bag, truncated)
    (storage_file,) = truncated.glob("*.mcap")
    storage_file.write_bytes(storage_file.read_bytes()[: storage_file.stat().st_size // 2])
    no_meta = tmp_path / "no_meta"
    shutil.copytree(bag, no_meta)
    (no_meta / "metadata.yaml").unlink()
    for damaged, verb in ((truncated, "play"), (truncated, "info"), (no_meta, "info"),
                          (tmp_path / "missing", "play")):  # fmt: skip
        run = subprocess.run([sys.executable, *_cli(verb, str(damaged))], capture_output=True,
                             text=True, timeout=60)  # fmt: skip
        assert run.returncode == 1, run
        assert run.stderr.startswith("error: ") and "Traceback" not in run.stderr, run.stderr
        assert str(damaged) in run.stderr
    with pytest.raises(BagError, match=r"corrupt or truncated|File end magic"):
        BagReader(truncated)


def test_info_and_argument_errors(recorded_bag, unique_ns):
    bag, _ = recorded_bag
    out = subprocess.run([sys.executable, *_cli("info", str(bag))], capture_output=True,
                         text=True, timeout=60, check=True).stdout  # fmt: skip
    assert "Storage id:        mcap" in out and f"Messages:          {len(GAPS)}" in out
    assert f"{unique_ns}/audio/input | bolt_agent_interfaces/msg/AudioChunk | 4 msgs" in out
    with pytest.raises(BagError, match="expected OLD:=NEW"):
        parse_remaps(["/a=/b"])
    with pytest.raises(BagError, match="rate must be positive"):
        playback_offsets([1, 2], rate=0)


#: TurnMetrics as recorded before it had a header (bags from before the typed interfaces)
OLD_TURN_METRICS = """string turn_id
string source
builtin_interfaces/Time speech_end
builtin_interfaces/Time asr_final
builtin_interfaces/Time llm_first_token
builtin_interfaces/Time first_speech
builtin_interfaces/Time first_audio
builtin_interfaces/Time first_tool_goal
builtin_interfaces/Time tool_done
builtin_interfaces/Time turn_end
uint32 prompt_tokens
uint32 completion_tokens
uint32 thinking_tokens
uint32 draft_tokens
uint32 accepted_tokens
float32 decode_tok_s
float32 network_ttft_s
string outcome
"""


def test_a_topic_recorded_with_an_older_definition_is_not_played(tmp_path, unique_ns):
    """An old bag: its TurnMetrics bytes lack today's header. The player names the topic and
    why, plays the rest, and refuses a bag with nothing else to play."""
    from rosbags.rosbag2 import Writer

    old = get_typestore(Stores.ROS2_KILTED)
    old.register(get_types_from_msg(OLD_TURN_METRICS, "bolt_agent_interfaces/msg/TurnMetrics"))
    tm, text = "bolt_agent_interfaces/msg/TurnMetrics", "std_msgs/msg/String"
    bag = tmp_path / "old_bag"
    with Writer(bag, version=Writer.VERSION_LATEST) as writer:
        conns = {
            t: writer.add_connection(
                t, m, msgdef=old.generate_msgdef(m, ros_version=2)[0], rihs01=old.hash_rihs01(m)
            )
            for t, m in ((f"{unique_ns}/bolt/turn_metrics", tm), (f"{unique_ns}/chatter", text))
        }
        for i in range(3):
            t_ns = 1_000_000_000 * (100 + i)
            metrics = old.types[tm](
                turn_id=f"t{i}", source="llm", **{f: old.types["builtin_interfaces/msg/Time"](
                    sec=0, nanosec=0) for f in ("speech_end", "asr_final", "llm_first_token",
                    "first_speech", "first_audio", "first_tool_goal", "tool_done", "turn_end")},
                prompt_tokens=1, completion_tokens=2, thinking_tokens=0, draft_tokens=0,
                accepted_tokens=0, decode_tok_s=1.0, network_ttft_s=0.0, outcome="ok",
            )  # fmt: skip
            writer.write(conns[f"{unique_ns}/bolt/turn_metrics"], t_ns,
                         old.serialize_cdr(metrics, tm))  # fmt: skip
            chat = old.types[text](data=f"hello {i}")
            writer.write(conns[f"{unique_ns}/chatter"], t_ns, old.serialize_cdr(chat, text))
    with ros_node("old_bag_player", unique_ns) as (node, _executor):
        player = BagPlayer(node, bag)
        assert list(player.skipped) == [f"{unique_ns}/bolt/turn_metrics"]
        assert "recorded as an older bolt_agent_interfaces/msg/TurnMetrics" in next(
            iter(player.skipped.values())
        )
        assert {m.topic for m in player.messages} == {f"{unique_ns}/chatter"}
        assert set(player.publishers) == {f"{unique_ns}/chatter"}
        player.destroy()
        with pytest.raises(BagError, match=r"nothing to play.*recorded as an older"):
            BagPlayer(node, bag, topics=[f"{unique_ns}/bolt/turn_metrics"])

"""Record and play rosbag2 files from inside any node: ``BagRecorder`` and ``BagPlayer``.

Both attach to a node the caller owns and spins (a CLI process, the embedded runner, a scenario
simulator). Messages stay serialized end to end: raw subscriptions write CDR bytes as received,
playback publishes the recorded bytes. File handling is ``bolt_agent.core.sim.bag_io``.
"""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.duration import Duration, Infinite
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rosbags.interfaces import (
    Qos,
    QosDurability,
    QosHistory,
    QosLiveliness,
    QosReliability,
    QosTime,
)
from rosgraph_msgs.msg import Clock

from bolt_agent.core.sim.bag_io import (
    DEFAULT_STORAGE,
    BagError,
    BagReader,
    BagWriter,
    TypeCatalog,
    outdated_topics,
    playback_offsets,
)

#: ROS 2's "infinite" duration as rosbag2 writes it in offered_qos_profiles
_INFINITE = QosTime(2147483647, 4294967295)
#: discovery of new publishers while recording (rosbag2 polls the graph as well)
DISCOVERY_PERIOD_S = 0.1
#: after subscribers matched, before the first message (see docs: late, reordered firsts otherwise)
SETTLE_S = 0.5
#: /clock as rosbag2 publishes it: reliable, a short queue (a late tick is worth nothing)
CLOCK_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)


def message_class(msgtype: str) -> type:
    """``pkg/msg/Name`` → the generated Python class; BagError when the package is not built."""
    pkg, _, name = msgtype.split("/")
    try:
        return getattr(importlib.import_module(f"{pkg}.msg"), name)
    except (ImportError, AttributeError) as exc:
        raise BagError(f"message type {msgtype} is not available here: {exc}") from None


def _hidden(topic: str) -> bool:
    return any(part.startswith("_") for part in topic.split("/"))


def _qos_time(value: Duration) -> QosTime:
    if value == Infinite or value.nanoseconds >= 2**63 - 1:
        return _INFINITE
    sec, nsec = divmod(value.nanoseconds, 10**9)
    return QosTime(sec, nsec)


def to_bag_qos(q: QoSProfile) -> Qos:
    """An rclpy QoS profile (as offered by a publisher) → the rosbags record of it."""
    return Qos(
        QosHistory(int(q.history)), q.depth, QosReliability(int(q.reliability)),
        QosDurability(int(q.durability)), _qos_time(q.deadline), _qos_time(q.lifespan),
        QosLiveliness(int(q.liveliness)), _qos_time(q.liveliness_lease_duration),
        q.avoid_ros_namespace_conventions,
    )  # fmt: skip


def adapted_qos(reliable: Sequence[bool], latched: Sequence[bool], depth: int = 200) -> QoSProfile:
    """A profile compatible with every publisher: best effort if any is; transient local if all."""
    best_effort, volatile = not all(reliable), not (latched and all(latched))
    return QoSProfile(
        depth=depth,
        reliability=ReliabilityPolicy.BEST_EFFORT if best_effort else ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.VOLATILE if volatile else DurabilityPolicy.TRANSIENT_LOCAL,
    )


class BagRecorder:
    """Subscribes (raw) to topics as their publishers appear and writes them to a bag.

    ``topics``: names to record (relative names resolve in the node's namespace); ``None`` records
    every visible topic, including ones that appear later. Hidden topics (``_…``) are skipped.
    """

    def __init__(
        self,
        node: Node,
        output: Path | str,
        topics: Sequence[str] | None = None,
        storage: str = DEFAULT_STORAGE,
        on_message: Callable[[str], None] | None = None,
    ) -> None:
        self._node = node
        self.writer = BagWriter(output, storage, TypeCatalog())
        self._wanted = None if topics is None else {self._resolve(t) for t in topics}
        self._subs: dict[str, object] = {}
        self._on_message = on_message
        self._group = MutuallyExclusiveCallbackGroup()
        self._timer = node.create_timer(DISCOVERY_PERIOD_S, self._discover, self._group)
        self.skipped: dict[str, str] = {}  # topic → why it is not recorded
        self._discover()

    @property
    def path(self) -> Path:
        return self.writer.path

    @property
    def topics(self) -> list[str]:
        return sorted(self._subs)

    def _resolve(self, topic: str) -> str:
        return self._node.resolve_topic_name(topic)

    def _discover(self) -> None:
        for topic, types in self._node.get_topic_names_and_types():
            if topic in self._subs or topic in self.skipped or self.writer.closed:
                continue
            if self._wanted is None and _hidden(topic):
                continue
            if self._wanted is not None and topic not in self._wanted:
                continue
            infos = self._node.get_publishers_info_by_topic(topic)
            if not infos:
                continue  # subscribers only: nothing to record yet
            self._subscribe(topic, types[0], infos)

    def _subscribe(self, topic: str, msgtype: str, infos) -> None:
        try:
            cls = message_class(msgtype)
            self.writer.add_topic(topic, msgtype, [to_bag_qos(i.qos_profile) for i in infos])
        except BagError as exc:
            self.skipped[topic] = str(exc)
            self._node.get_logger().warning(f"not recording {topic}: {exc}")
            return
        qos = adapted_qos(
            [i.qos_profile.reliability == ReliabilityPolicy.RELIABLE for i in infos],
            [i.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL for i in infos],
        )
        self._subs[topic] = self._node.create_subscription(
            cls, topic, lambda data, t=topic: self._write(t, data), qos,
            callback_group=self._group, raw=True,
        )  # fmt: skip
        self._node.get_logger().info(f"recording {topic} [{msgtype}]")

    def _write(self, topic: str, data: bytes) -> None:
        self.writer.write(topic, self._node.get_clock().now().nanoseconds, data)
        if self._on_message is not None:
            self._on_message(topic)

    @property
    def message_count(self) -> int:
        return self.writer.message_count

    def stop(self) -> Path:
        """Unsubscribe and close the bag (metadata written); returns its path. Idempotent."""
        self._node.destroy_timer(self._timer)
        for sub in self._subs.values():
            self._node.destroy_subscription(sub)
        self._subs.clear()
        self.writer.close()
        return self.writer.path


class BagPlayer:
    """Publishes a bag's serialized messages with their original spacing (divided by ``rate``).

    ``remap`` maps a bag topic to the name to publish on (relative names resolve in the node's
    namespace); ``topics`` limits playback. ``start()`` plays in a background thread: it waits up
    to ``wait_subscribers_s`` for every topic to have a subscriber, then ``SETTLE_S``, then plays.

    ``clock_hz`` > 0 publishes ``/clock`` (rosgraph_msgs/Clock) as ``ros2 bag play --clock``
    does: the bag's own time, from its first message's timestamp, advancing at ``rate`` x wall
    time, ``clock_hz`` times a second and with every message. Nodes with ``use_sim_time`` then
    live in the bag's time: their stamps, timers and timeouts follow the recording. Before the
    first message the clock holds at the bag's start (nodes see time, not zero); with ``loop``
    it starts over, as rosbag2's does.

    A topic recorded with an older definition of one of this project's types (its RIHS01 hash
    differs from the installed one) is not played: its bytes would not decode as today's type.
    It is named in a warning and in ``skipped``.
    """

    def __init__(
        self,
        node: Node,
        bag: Path | str,
        rate: float = 1.0,
        loop: bool = False,
        remap: dict[str, str] | None = None,
        topics: Sequence[str] | None = None,
        wait_subscribers_s: float = 5.0,
        clock_hz: float = 0.0,
    ) -> None:
        self._node = node
        if clock_hz < 0 or clock_hz > 1000:
            raise BagError(f"clock rate must be 0 (off) to 1000 Hz, got {clock_hz}")
        self.rate, self.loop, self.wait_subscribers_s = rate, loop, wait_subscribers_s
        playback_offsets([0], rate)  # validates the rate
        remap = {_abs(k): v for k, v in (remap or {}).items()}
        with BagReader(bag) as reader:
            summary = reader.summary()
            only = None if topics is None else {_abs(x) for x in topics}
            selected = [t for t in summary.topics if only is None or t.name in only]
            if topics is not None and not selected:
                raise BagError(f"none of {list(topics)} is in {reader.path}")
            self.skipped = outdated_topics(selected, TypeCatalog())
            for why in self.skipped.values():
                node.get_logger().warning(why)
            selected = [t for t in selected if t.name not in self.skipped]
            if not selected:
                raise BagError(
                    f"nothing to play in {reader.path}: " + "; ".join(self.skipped.values())
                )
            self.messages = list(reader.messages([t.name for t in selected]))
        self.publishers = {}
        for t in selected:
            qos = adapted_qos(
                [q.reliability != QosReliability.BEST_EFFORT for q in t.qos] or [True],
                [q.durability == QosDurability.TRANSIENT_LOCAL for q in t.qos],
                depth=max([q.depth for q in t.qos] + [100]),
            )
            name = remap.get(t.name, t.name)
            self.publishers[t.name] = node.create_publisher(message_class(t.msgtype), name, qos)
        self.clock_hz = clock_hz
        self._clock_pub = node.create_publisher(Clock, "/clock", CLOCK_QOS) if clock_hz else None
        self._clock_lock = threading.Lock()
        self._clock_origin: tuple[int, float] | None = None  # (bag ns, monotonic s) of playback
        self.clock_published = 0
        self._last_clock = 0
        self.published = 0
        self.done = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="bag_player", daemon=True)
        self._thread.start()
        if self._clock_pub is not None:
            self._clock_thread = threading.Thread(
                target=self._clock_loop, name="bag_clock", daemon=True
            )
            self._clock_thread.start()

    def bag_time_ns(self) -> int:
        """The bag's time now: its start before playback, then start + rate x elapsed."""
        with self._clock_lock:
            origin = self._clock_origin
        if origin is None:
            return self.messages[0].timestamp if self.messages else 0
        bag_ns, t0 = origin
        return bag_ns + int((time.monotonic() - t0) * self.rate * 1e9)

    def _publish_clock(self, ns: int) -> None:
        """Publish ``ns``, or the last time published if that is later: the ticker and the
        messages' own stamps interleave, and time never steps back within a pass."""
        with self._clock_lock:
            ns = self._last_clock = max(ns, self._last_clock)
            msg = Clock()
            msg.clock.sec, msg.clock.nanosec = divmod(ns, 1_000_000_000)
            self._clock_pub.publish(msg)
            self.clock_published += 1

    def _clock_loop(self) -> None:
        period = 1.0 / self.clock_hz
        while not self._stop.is_set() and not self.done.is_set():
            try:
                self._publish_clock(self.bag_time_ns())
            except Exception:  # the context is going down (Ctrl-C)
                return
            self._stop.wait(period)

    def wait(self, timeout: float | None = None) -> bool:
        """Until playback ends (never with ``loop``); True when it did."""
        return self.done.wait(timeout)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def destroy(self) -> None:
        self.stop()
        clock_thread = getattr(self, "_clock_thread", None)
        if clock_thread is not None:
            clock_thread.join()
        for pub in self.publishers.values():
            self._node.destroy_publisher(pub)
        self.publishers.clear()
        if self._clock_pub is not None:
            self._node.destroy_publisher(self._clock_pub)
            self._clock_pub = None

    def wait_for_subscribers(self) -> bool:
        """Every publisher matched (or the wait ran out: False), then a short settle time."""
        deadline = time.monotonic() + self.wait_subscribers_s
        matched = False
        while not self._stop.is_set():
            matched = all(p.get_subscription_count() > 0 for p in self.publishers.values())
            if matched or time.monotonic() > deadline:
                break
            self._stop.wait(0.02)  # polling the graph for a condition
        if not matched:
            self._node.get_logger().warning("playing although not every topic has a subscriber")
        self._stop.wait(SETTLE_S)
        return matched

    def _run(self) -> None:
        try:
            self.wait_for_subscribers()
            offsets = playback_offsets([m.timestamp for m in self.messages], self.rate)
            while not self._stop.is_set():
                start = time.monotonic()
                if self.messages:
                    with self._clock_lock:  # a new pass (``loop``): the clock starts over
                        self._clock_origin = (self.messages[0].timestamp, start)
                        self._last_clock = 0
                for offset, msg in zip(offsets, self.messages):
                    if self._stop.wait(max(0.0, start + offset - time.monotonic())):
                        return
                    if self._clock_pub is not None:  # the clock is at the message before it
                        self._publish_clock(msg.timestamp)
                    self.publishers[msg.topic].publish(msg.data)
                    self.published += 1
                if not self.loop or not self.messages:
                    break
            for pub in self.publishers.values():
                pub.wait_for_all_acked(Duration(seconds=2))
        finally:
            self.done.set()


def _abs(topic: str) -> str:
    return topic if topic.startswith("/") else "/" + topic

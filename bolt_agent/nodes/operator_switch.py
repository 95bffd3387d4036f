"""Operator switches (``teleop/override``, ``teleop/mute``): a ``std_msgs/Bool`` that two
kinds of publisher drive, applied once per sample and never out of order.

A latched publisher's last value must reach a node started after it (a transient-local
subscription), and a plain ``ros2 topic pub`` is volatile, which only a volatile subscription
matches. So each switch is subscribed twice, and every sample of a latched publisher comes once
per subscription. The two subscriptions deliver independently: one can hand over the newest
value while the other still holds older ones (a depth-1 transient-local reader keeps only the
last). Acting on a late copy of an older value would flip the switch back: a stale ``false``
briefly unmuting the robot or releasing the operator's override. A sample is therefore applied
only if it is newer than everything applied from its publisher, by the publication sequence
number the middleware stamps on it.

What rclpy hands over decides how exact that is:
- the publisher's gid and sequence number (``publisher_gid`` came to rclpy in 2025, rclpy#1466;
  the Kilted wheels here have it): exact, per publisher;
- only the source timestamp (a ``MessageInfo`` without the gid, Iron and later): ordered by the
  publishers' clocks, which must agree (one machine, or synchronised ones, as ``tf`` expects);
- nothing (Humble: a subscription callback gets no ``MessageInfo``): acted on change only, and a
  late copy of an older value can still flip the switch back until the next sample.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rclpy.node import Node
from std_msgs.msg import Bool

from bolt_agent.nodes import qos
from bolt_agent.nodes.distro import WITH_MESSAGE_INFO, SubscriptionEventCallbacks
from bolt_agent.nodes.guard import CallbackGuardMixin


@dataclass(frozen=True)
class SampleKey:
    """Where a sample stands in its publisher's sequence. ``writer`` None: publisher unknown,
    ``order`` is the source timestamp (one clock for all publishers)."""

    writer: bytes | None
    order: int


def sample_key(info: Mapping[str, Any] | None) -> SampleKey | None:
    """The key of a sample from rclpy's ``MessageInfo``; None when it carries nothing usable."""
    if not info:
        return None
    gid = info.get("publisher_gid") or {}
    seq = info.get("publication_sequence_number")
    if gid.get("data") and seq:  # 0 or None: the middleware gives no sequence number
        return SampleKey(bytes(gid["data"]), int(seq))
    stamp = info.get("source_timestamp")
    return SampleKey(None, int(stamp)) if stamp else None


class SwitchState:
    """The switch's value, and the newest sample applied from each publisher. Pure logic: the
    callbacks feed it, the tests push samples into it in any order."""

    MAX_WRITERS = 256  # each `ros2 topic pub` run is a new publisher; the oldest are forgotten

    def __init__(self, value: bool = False) -> None:
        self.value = value
        self.stale = 0  # copies dropped: seen already, or older than one applied
        self._newest: OrderedDict[bytes | None, int] = OrderedDict()

    def offer(self, value: bool, key: SampleKey | None) -> bool:
        """Take one delivered sample; True when it changes the switch."""
        if key is not None:
            newest = self._newest.get(key.writer)
            if newest is not None and key.order <= newest:
                self.stale += 1
                return False
            self._newest[key.writer] = key.order
            self._newest.move_to_end(key.writer)
            while len(self._newest) > self.MAX_WRITERS:
                self._newest.popitem(last=False)
        if value == self.value:
            return False
        self.value = value
        return True


class OperatorSwitch:
    """Subscribes ``topic`` latched and volatile, and calls ``on_change(value)`` once per change
    of the switch, in order (under a lock: the callback group may run both copies at once)."""

    def __init__(
        self,
        node: Node,
        topic: str,
        on_change: Callable[[bool], None],
        *,
        callback_group: Any = None,
        initial: bool = False,
    ) -> None:
        self.state = SwitchState(initial)
        self._on_change = on_change
        self._topic = topic
        self._logger = node.get_logger()
        self._lock = threading.Lock()
        # a volatile publisher cannot match the latched subscription (and the reverse for a
        # latched-only listener elsewhere): keep that expected mismatch out of the log
        quiet = SubscriptionEventCallbacks(incompatible_qos=lambda _e: None)
        if WITH_MESSAGE_INFO:

            def callback(msg: Bool, info: Mapping[str, Any]) -> None:
                self.offer(bool(msg.data), sample_key(info))

        else:

            def callback(msg: Bool) -> None:  # type: ignore[misc]
                self.offer(bool(msg.data), None)

        # state, not a request: a mute sent while a bolt node is inactive holds at activation
        state_input = {"while_inactive": True} if isinstance(node, CallbackGuardMixin) else {}
        self.subscriptions = [
            node.create_subscription(
                Bool,
                topic,
                callback,
                profile,
                callback_group=callback_group,
                event_callbacks=quiet,
                **state_input,
            )
            for profile in (qos.LATCHED, qos.RELIABLE)
        ]

    @property
    def value(self) -> bool:
        return self.state.value

    def offer(self, value: bool, key: SampleKey | None) -> None:
        with self._lock:
            before, stale = self.state.value, self.state.stale
            if self.state.offer(value, key):
                try:
                    self._on_change(value)
                except BaseException:
                    self.state.value = before  # not applied: the next sample may apply it
                    raise
            elif self.state.stale > stale and value != before and key and key.writer is None:
                # ordered by source time (no publisher gid): a publisher whose clock is behind
                # would have its newer samples dropped here, so say so
                self._logger.warning(
                    f"{self._topic}: dropped {value} from a sample stamped before one applied "
                    "(a late copy, or a publisher whose clock is behind; "
                    f"{self.state.stale} dropped so far)",
                    throttle_duration_sec=5.0,
                )

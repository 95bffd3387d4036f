"""Operator switches (teleop/mute, teleop/override): every sample applied once, never after a
newer one from its publisher, whichever of the two subscriptions delivers it first."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

try:  # Iron+
    from rclpy.event_handler import PublisherEventCallbacks
except ImportError:  # Humble
    from rclpy.qos_event import PublisherEventCallbacks
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import Bool

from bolt_agent.nodes import qos
from bolt_agent.nodes.operator_switch import (
    WITH_MESSAGE_INFO,
    OperatorSwitch,
    SampleKey,
    SwitchState,
    sample_key,
)
from support.ros_helpers import ros_node, spin_until, wait_for_subscriber

A, B = b"writer-a", b"writer-b"


def _changes(deliveries: list[tuple[bool, SampleKey | None]], value: bool = False) -> list[bool]:
    state = SwitchState(value)
    return [v for v, key in deliveries if state.offer(v, key)]


# --- the rule, synchronously ----------------------------------------------------------------------


def test_a_late_copy_of_an_older_value_does_not_flip_the_switch_back():
    """The CI failure: true, false, true from a latched publisher; the latched subscription
    (depth 1) hands over only the newest, the volatile one all three, after it. Acting on
    change alone muted, unmuted and muted again (three ON logs for two)."""
    s1, s2, s3 = (True, SampleKey(A, 1)), (False, SampleKey(A, 2)), (True, SampleKey(A, 3))
    assert _changes([s3, s1, s2, s3]) == [True]
    # each subscription's copies in order, interleaved the other way round: the same changes
    # as the publisher's, each once
    assert _changes([s1, s2, s1, s3, s2, s3]) == [True, False, True]


def test_publishers_are_ordered_each_on_its_own_and_applied_as_they_arrive():
    """Two operators: each one's sequence numbers are its own, so a low number from the second
    is not stale; between publishers, arrival order decides."""
    first, second = SampleKey(A, 7), SampleKey(B, 1)
    assert _changes([(True, first), (False, second), (True, SampleKey(A, 8))]) == [
        True,
        False,
        True,
    ]
    assert _changes([(True, first), (False, second), (True, first)]) == [True, False]


def test_a_repeated_value_changes_nothing_and_counts_no_stale_copy():
    state = SwitchState()
    assert state.offer(True, SampleKey(A, 1))
    assert not state.offer(True, SampleKey(A, 2))  # a second mute: a new sample, no change
    assert state.stale == 0
    assert not state.offer(True, SampleKey(A, 2))  # its copy
    assert state.stale == 1


def test_without_a_publisher_id_samples_are_ordered_by_source_time():
    """Iron and Jazzy: no publisher gid in MessageInfo, the source timestamp orders."""
    old = sample_key({"source_timestamp": 100})
    new = sample_key({"source_timestamp": 200})
    assert old == SampleKey(None, 100)
    assert _changes([(True, new), (False, old), (True, new)]) == [True]


def test_without_message_info_a_change_is_acted_on_once():
    """Humble: no MessageInfo at all: change-only (a late copy can still flip it back)."""
    assert _changes([(True, None), (True, None), (False, None)]) == [True, False]


def test_a_change_whose_handler_fails_is_not_taken_as_applied(unique_ns):
    """If acting on a change raises, the switch keeps its old value: the next sample with the
    new value applies it (else a mute lost to an error would never be retried)."""
    calls: list[bool] = []

    def flaky(value: bool) -> None:
        calls.append(value)
        if len(calls) == 1:
            raise RuntimeError("publisher gone")

    with ros_node("flaky_switch", unique_ns) as (node, _executor):
        switch = OperatorSwitch(node, "flaky", flaky)
        with pytest.raises(RuntimeError):
            switch.offer(True, SampleKey(A, 1))
        assert switch.value is False
        switch.offer(True, SampleKey(A, 2))
        assert calls == [True, True] and switch.value is True


def test_sample_keys_from_message_info():
    gid = {"implementation_identifier": "rmw_fastrtps_cpp", "data": b"\x01\x0f"}
    info = {"source_timestamp": 5, "publication_sequence_number": 3, "publisher_gid": gid}
    assert sample_key(info) == SampleKey(b"\x01\x0f", 3)
    # a middleware without sequence numbers reports 0 or None: fall back to the timestamp
    assert sample_key({**info, "publication_sequence_number": 0}) == SampleKey(None, 5)
    assert sample_key({"source_timestamp": 0}) is None
    assert sample_key(None) is None


def test_the_oldest_publishers_are_forgotten_beyond_the_bound():
    state = SwitchState()
    for i in range(SwitchState.MAX_WRITERS + 1):
        state.offer(bool(i % 2), SampleKey(b"w%d" % i, 1))
    # the first publisher was forgotten: its old sample is taken as new (a bounded memory)
    assert state.offer(not state.value, SampleKey(b"w0", 1))
    assert not state.offer(not state.value, SampleKey(b"w2", 1))  # still remembered: stale


# --- real DDS -------------------------------------------------------------------------------------

_QUIET = PublisherEventCallbacks(incompatible_qos=lambda _e: None)


def _interleavings(a: list, b: list) -> Iterator[list]:
    """Every merge of ``a`` and ``b`` that keeps each one's own order (each reader's is kept)."""
    if not a or not b:
        yield a + b
        return
    for rest in _interleavings(a[1:], b):
        yield [a[0], *rest]
    for rest in _interleavings(a, b[1:]):
        yield [b[0], *rest]


_HUMBLE = "rclpy before Iron hands no MessageInfo to a callback: the switch acts on change only"


@pytest.mark.skipif(not WITH_MESSAGE_INFO, reason=_HUMBLE)
def test_both_copies_of_a_dds_sample_carry_one_key_and_any_interleaving_ends_on_the_newest(
    unique_ns,
):
    """Over DDS: a latched publisher's samples reach both subscriptions with the same key, and
    every interleaving of the two readers' deliveries through an ``OperatorSwitch`` changes it
    only toward the newest value and ends there (the change-only rule ends some on a stale
    ``False``, or flips True, False, True where the newest came first)."""
    got: dict[str, list[tuple[bool, SampleKey | None]]] = {"latched": [], "volatile": []}
    with ros_node("switch_copies", unique_ns) as (node, executor):
        for name, profile in (("latched", qos.LATCHED), ("volatile", qos.RELIABLE)):
            node.create_subscription(
                Bool, "mute", lambda m, i, n=name: got[n].append((m.data, sample_key(i))), profile
            )
        # a deep latched writer: the volatile reader gets all three, the depth-1 one the last
        deep = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE,
                          durability=DurabilityPolicy.TRANSIENT_LOCAL)  # fmt: skip
        pub = node.create_publisher(Bool, "mute", deep)
        wait_for_subscriber(executor, pub, count=2)
        for value in (True, False, True):
            pub.publish(Bool(data=value))  # no spin between: the depth-1 reader keeps the last
        spin_until(
            executor,
            lambda: len(got["volatile"]) == 3 and got["latched"][-1:] == got["volatile"][-1:],
            what=lambda: str(got),
        )
    keys = [key for _v, key in got["volatile"]]
    assert all(key is not None for key in keys) and len(set(keys)) == 3, got
    newest = got["volatile"][-1]
    assert newest[0] is True and got["latched"][-1] == newest, got  # one sample, one key
    orders = list(_interleavings(got["latched"], got["volatile"]))
    assert len(orders) >= 4, got
    with ros_node("switch_replay", unique_ns) as (node, _executor):
        for order in orders:
            changes: list[bool] = []
            switch = OperatorSwitch(node, "replay", changes.append)
            seen_newest = False
            for value, key in order:
                before = list(changes)
                switch.offer(value, key)
                assert not (seen_newest and changes != before), f"moved off the newest: {order}"
                seen_newest = seen_newest or (value, key) == newest
            assert switch.value is True and changes[-1:] == [True], (order, changes)
            assert changes in ([True], [True, False, True]), (order, changes)


@pytest.mark.skipif(not WITH_MESSAGE_INFO, reason=_HUMBLE)
def test_a_switch_over_dds_takes_a_latched_value_from_before_it_started_and_both_publishers(
    unique_ns,
):
    """The latched value published before the switch existed arrives (the transient-local
    subscription), then every change comes once from a latched and a volatile publisher."""
    with ros_node("operator", unique_ns) as (op, op_exec):
        latched = op.create_publisher(Bool, "override", qos.LATCHED)
        volatile = op.create_publisher(  # the latched subscription cannot match it: expected
            Bool, "override", qos.RELIABLE, event_callbacks=_QUIET
        )
        latched.publish(Bool(data=True))  # before any subscriber exists
        with ros_node("robot", unique_ns) as (node, executor):
            changes: list[bool] = []
            switch = OperatorSwitch(node, "override", changes.append)
            assert len(switch.subscriptions) == 2

            def spin_both_until(predicate, what):
                def step():
                    op_exec.spin_once(timeout_sec=0.0)
                    return predicate()

                spin_until(executor, step, what=what)

            spin_both_until(lambda: changes == [True], lambda: f"the latched value: {changes}")
            spin_both_until(
                lambda: (
                    latched.get_subscription_count() == 2 and volatile.get_subscription_count() == 1
                ),
                "latched: both subscriptions; volatile: the volatile one",
            )
            latched.publish(Bool(data=False))  # two copies: one change, one stale copy
            spin_both_until(
                lambda: changes == [True, False] and switch.state.stale >= 1,
                lambda: f"{changes}, {switch.state.stale} stale",
            )
            volatile.publish(Bool(data=True))  # one copy: the volatile subscription's
            spin_both_until(lambda: changes == [True, False, True], lambda: str(changes))
            stale = switch.state.stale
            latched.publish(Bool(data=True))  # a repeat: both copies change nothing
            spin_both_until(lambda: switch.state.stale > stale, lambda: f"{switch.state.stale}")
            assert changes == [True, False, True] and switch.value is True

"""Per-turn stage stamps published on ``bolt/turn_metrics`` (each node fills what it knows)."""

from __future__ import annotations

import threading

from builtin_interfaces.msg import Time
from rclpy.node import Node

from bolt_agent.core.turn_metrics import STAGES, turn_outcome
from bolt_agent.nodes.qos import RELIABLE
from bolt_agent_interfaces.msg import TurnMetrics


class TurnMetricsPublisher:
    def __init__(self, node: Node, source: str, topic: str = "bolt/turn_metrics"):
        self._node = node
        self._source = source
        self._pub = node.create_publisher(TurnMetrics, topic, RELIABLE)
        self._stamps: dict[str, dict[str, Time]] = {}
        self._lock = threading.Lock()

    def destroy(self) -> None:
        self._node.destroy_publisher(self._pub)

    def stamp(self, turn_id: str, stage: str, only_first: bool = False) -> None:
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}")
        now = self._node.get_clock().now().to_msg()
        with self._lock:
            stamps = self._stamps.setdefault(turn_id, {})
            if not (only_first and stage in stamps):
                stamps[stage] = now

    def forget(self, turn_id: str) -> None:
        """Drop the stamps of a turn that will not be published (a discarded preemptive answer:
        the real turn of the same utterance stamps its own)."""
        with self._lock:
            self._stamps.pop(turn_id, None)

    def publish(self, turn_id: str, **fields) -> TurnMetrics:
        """Publish the turn's stamps so far plus extra fields; forgets the turn."""
        with self._lock:
            stamps = self._stamps.pop(turn_id, {})
        msg = TurnMetrics(turn_id=turn_id, source=self._source, **fields)
        for stage, value in stamps.items():
            setattr(msg, stage, value)
        msg.header.stamp = self._node.get_clock().now().to_msg()
        self._pub.publish(msg)
        return msg

    def finish_llm_turn(self, turn_id: str, result) -> TurnMetrics:
        self.stamp(turn_id, "turn_end")
        decode_s = sum(s.decode_s for s in result.stats)
        generated = sum(s.evaluated for s in result.stats)  # the tokens decode_s paid for
        first = result.stats[0] if result.stats else None
        return self.publish(
            turn_id,
            prompt_tokens=result.prompt_tokens,
            completion_tokens=result.completion_tokens,
            thinking_tokens=result.thinking_tokens,
            draft_tokens=sum(s.drafted for s in result.stats),
            accepted_tokens=sum(s.accepted for s in result.stats),
            decode_tok_s=generated / decode_s if decode_s > 0 else 0.0,
            network_ttft_s=first.prefill_s if first is not None and first.remote else 0.0,
            outcome=turn_outcome(result),
        )

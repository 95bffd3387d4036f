"""tts_node's outputs: what each event of the speaker becomes on its topics (``tts/state``,
turn metrics, ``audio/output``), and the counts of held turns dropped (``/diagnostics``). Kept
apart from the node's wiring so the node holds parameters, lifecycle and threads only."""

from __future__ import annotations

import json

import numpy as np

from bolt_agent.core.tts.speaker import (
    CUT_HELD,
    NOT_ACTIVE,
    Discarded,
    Dropped,
    Failed,
    FirstAudio,
    SpeakerEvent,
    SpeechState,
    Stopped,
)
from bolt_agent.nodes import qos
from bolt_agent.nodes.lifecycle import BoltLifecycleNode
from bolt_agent.nodes.messages import audio_chunk
from bolt_agent_interfaces.msg import AudioChunk, TtsState, TurnMetrics


class TtsOutputs:
    """The publishers (made by ``open`` at configure, destroyed by ``close`` at cleanup) and the
    counts that outlive them. ``publish`` is called by the speaker, in order, with its lock
    held; ``audio`` by the paced output thread."""

    def __init__(self, node: BoltLifecycleNode) -> None:
        self._node = node
        self.discarded = 0  # held (preemptive) turns dropped unheard
        self.cut_held_dropped = 0  # messages of a held turn a stop discarded here (dropped)
        self._sample_rate = 0
        self._state_pub = self._metrics_pub = self._audio_pub = None

    def open(self, sample_rate: int) -> None:
        node, self._sample_rate = self._node, sample_rate
        self._state_pub = node.create_publisher(TtsState, "tts/state", qos.LATCHED)
        self._metrics_pub = node.create_publisher(TurnMetrics, "bolt/turn_metrics", qos.RELIABLE)
        self._audio_pub = node.create_publisher(AudioChunk, "audio/output", qos.AUDIO)

    def close(self) -> None:
        for pub in (self._state_pub, self._metrics_pub, self._audio_pub):
            if pub is not None:
                self._node.destroy_publisher(pub)
        self._state_pub = self._metrics_pub = self._audio_pub = None
        self._sample_rate = 0

    def audio(self, block: np.ndarray, late_s: float = 0.0) -> None:
        """One block of the voice on audio/output (``audio_sink: topic``), stamped with its
        slot on the stream's clock (``late_s``: how late it goes out against it)."""
        slot_ns = self._node.get_clock().now().nanoseconds - int(late_s * 1e9)
        self._audio_pub.publish(audio_chunk(block, slot_ns, self._sample_rate))

    def publish(self, event: SpeakerEvent) -> None:
        node = self._node
        log = node.get_logger()
        if isinstance(event, SpeechState):
            self._state(event)
        elif isinstance(event, FirstAudio):
            metrics = TurnMetrics(turn_id=event.turn_id, source="tts")
            metrics.first_audio = metrics.header.stamp = node.get_clock().now().to_msg()
            self._metrics_pub.publish(metrics)
        elif isinstance(event, Stopped):
            info = event.info.as_dict()
            log.info(f"stopped: {json.dumps(info)}")
            node.status("OK", f"stopped turn {event.info.turn_id} ({event.info.reason})", stop=info)
        elif isinstance(event, Dropped) and event.reason == NOT_ACTIVE:
            log.warning(f"not active; not saying {event.text!r}")
        elif isinstance(event, Dropped) and event.reason == CUT_HELD:
            self.cut_held_dropped += 1
            log.info(f"turn {event.turn_id}: {event.text!r} dropped ({CUT_HELD})")
        elif isinstance(event, Dropped):
            log.warning(f"no audio output; dropped {event.text!r}")
            node.record_failure("no_output", f"no audio output; dropped {event.text!r}", log=False)
        elif isinstance(event, Failed):
            node.record_failure("synthesis", f"synthesis failed for {event.text!r}: {event.reason}")
        elif isinstance(event, Discarded):
            self.discarded += 1
            log.info(f"held turn {event.turn_id} discarded unheard ({event.sentences} sentences)")

    def _state(self, state: SpeechState) -> None:
        msg = TtsState()
        msg.header.stamp = self._node.get_clock().now().to_msg()
        msg.speaking = state.speaking
        msg.turn_id = state.turn_id
        msg.spoken_text = state.spoken_text
        msg.interrupted = state.interrupted
        self._state_pub.publish(msg)

"""asr_node's outputs: what each event of the ASR stage becomes on its topics, and the counts
of how turns ended (``/diagnostics``). Kept apart from the node's wiring so the node holds
parameters, lifecycle and threads only."""

from __future__ import annotations

import numpy as np
from builtin_interfaces.msg import Time

from bolt_agent.core.asr.listener import (
    FinalMetrics,
    ListenerEvent,
    NoSpeech,
    TranscriptEvent,
    TranscriptionFailed,
    VoiceActivityEvent,
)
from bolt_agent.core.asr.vad_segmenter import SAMPLE_RATE
from bolt_agent.nodes import qos
from bolt_agent.nodes.lifecycle import BoltLifecycleNode
from bolt_agent.nodes.messages import audio_chunk, stamp
from bolt_agent_interfaces.msg import AudioChunk, Transcript, TurnMetrics, VoiceActivity


class AsrOutputs:
    """The publishers (made by ``open`` at configure, destroyed by ``close`` at cleanup) and the
    per-node counts that outlive them. ``publish`` runs on the VAD thread (voice activity) and
    on the whisper thread (transcripts, metrics)."""

    def __init__(self, node: BoltLifecycleNode) -> None:
        self._node = node
        self.ended_by: dict[str, int] = {}  # silence | hint | text | audio_stopped | ...
        self.resumed = 0  # utterances resumed after an early transcript
        self._va_pub = self._text_pub = self._metrics_pub = self._audio_pub = None
        self._backchannel_pub = None
        self.backchannels = 0  # finals said over the robot and judged backchannels (aec)
        self.echo_dropped = 0  # finals that were only the robot's own words (aec)

    def open(self, publish_audio: bool) -> None:
        node = self._node
        self._va_pub = node.create_publisher(VoiceActivity, "asr/voice_activity", qos.RELIABLE)
        self._text_pub = node.create_publisher(Transcript, "asr/transcript", qos.RELIABLE)
        # aec: "uh-huh" over the robot, kept as the user's words but no turn of theirs
        self._backchannel_pub = node.create_publisher(Transcript, "asr/backchannel", qos.RELIABLE)
        self._metrics_pub = node.create_publisher(TurnMetrics, "bolt/turn_metrics", qos.RELIABLE)
        self._audio_pub = None
        if publish_audio:
            self._audio_pub = node.create_publisher(AudioChunk, "audio/input", qos.AUDIO)

    def close(self) -> None:
        pubs = (self._va_pub, self._text_pub, self._metrics_pub, self._audio_pub)
        for pub in (*pubs, self._backchannel_pub):
            if pub is not None:
                self._node.destroy_publisher(pub)
        self._va_pub = self._text_pub = self._metrics_pub = self._audio_pub = None
        self._backchannel_pub = None

    @property
    def republishes_audio(self) -> bool:
        return self._audio_pub is not None

    def audio(self, chunk: np.ndarray, stamp_ns: int) -> None:
        """The microphone's block on audio/input (``publish_audio``)."""
        self._audio_pub.publish(audio_chunk(chunk, stamp_ns, SAMPLE_RATE))

    def publish(self, event: ListenerEvent) -> None:
        if isinstance(event, VoiceActivityEvent):
            self._voice_activity(event)
        elif isinstance(event, TranscriptEvent):
            self._transcript(event)
        elif isinstance(event, FinalMetrics):
            self._final_metrics(event)
        elif isinstance(event, NoSpeech) and event.reason == "echo":
            self.echo_dropped += 1
            self._log.info(f"utterance {event.utterance_id}: the robot's own words; dropped")
        elif isinstance(event, NoSpeech):
            self._log.info(f"utterance {event.utterance_id}: no speech recognised; dropped")
        elif isinstance(event, TranscriptionFailed):
            self._node.record_failure(
                "transcription",
                f"utterance {event.utterance_id}: {event.stage} transcription failed: "
                f"{event.error}",
            )
            if event.stage == "final":  # the utterance's turn ends here: say so in its metrics
                # (a partial or early transcript failure is not: the final still comes)
                reason = f"failed: final transcription: {event.error}"[:200]
                metrics = TurnMetrics(turn_id=event.utterance_id, source="asr", outcome=reason)
                metrics.header.stamp = self._now()
                self._metrics_pub.publish(metrics)

    @property
    def _log(self):
        return self._node.get_logger()

    def _now(self) -> Time:
        return self._node.get_clock().now().to_msg()

    def _voice_activity(self, event: VoiceActivityEvent) -> None:
        if event.resumed:
            self.resumed += 1
            self._log.info(f"[{event.utterance_id}] the user went on after a pause")
        msg = VoiceActivity(
            utterance_id=event.utterance_id,
            speaking=event.speaking,
            barge_in=event.barge_in,
            resumed=event.resumed,
        )
        msg.header.stamp = stamp(event.stamp_ns)
        self._va_pub.publish(msg)

    def _transcript(self, event: TranscriptEvent) -> None:
        msg = Transcript(
            utterance_id=event.utterance_id,
            text=event.text,
            is_final=event.is_final,
            confidence=event.confidence,
            language=event.language,
            speculative=event.early,
        )
        msg.header.stamp = self._now()
        msg.audio_start, msg.audio_end = stamp(event.audio_start_ns), stamp(event.audio_end_ns)
        if event.backchannel:  # not the user's turn: the LLM never sees it as one
            if event.is_final:
                self.backchannels += 1
                self._backchannel_pub.publish(msg)
                self._log.info(f"backchannel [{event.utterance_id}] {event.text!r}: not a turn")
            return
        self._text_pub.publish(msg)
        kind = "final" if event.is_final else "early" if event.early else "partial"
        lag = (self._node.get_clock().now().nanoseconds - event.audio_end_ns) / 1e9
        work = f"whisper {event.transcribe_s:.2f} s" if event.transcribe_s else "reused"
        self._log.info(
            f"{kind} [{event.utterance_id}] {event.text!r} ({lag:.2f} s after its audio "
            f"ended; queued {event.queued_s:.2f} s, {work})"
        )

    def _final_metrics(self, event: FinalMetrics) -> None:
        p = self._node.params
        self.ended_by[event.ended_by] = self.ended_by.get(event.ended_by, 0) + 1
        uid = event.utterance_id
        if event.ended_by == "audio_lost":
            self._log.warning(
                f"[{uid}] audio was lost mid-utterance (dropped beyond max_queued_s "
                f"{p.max_queued_s} s, or missing by the stamps): the utterance ends with what "
                "was heard"
            )
        elif event.ended_by == "audio_stopped":
            self._log.warning(
                f"[{uid}] no audio for audio_stopped_s {p.audio_stopped_s} s: the utterance "
                "ends with what was heard"
            )
        elif event.ended_by == "deactivated":
            self._log.warning(f"[{uid}] deactivated mid-utterance: it ends with what was heard")
        elif event.ended_by != "silence":
            self._log.info(
                f"end of turn [{uid}] after {event.silence_ms:.0f} ms of silence (the words "
                f"are complete: {event.ended_by})"
            )
        metrics = TurnMetrics(turn_id=uid, source="asr")
        metrics.speech_end = stamp(event.speech_end_ns)
        metrics.asr_final = metrics.header.stamp = self._now()
        self._metrics_pub.publish(metrics)

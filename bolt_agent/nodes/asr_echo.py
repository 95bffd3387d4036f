"""asr_node's echo wiring (``echo_mode: aec``): the canceller, what the robot plays
(``audio/output``, its reference) and says (``speech/say``, ``teleop/say``: its own words, which
the barge-in judge recognises as echo), the wait for a late reference, and the figures on
``/diagnostics``. Kept beside the node so the node stays wiring."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from std_msgs.msg import String

from bolt_agent.core.asr.audio_ingest import audio_block_problem
from bolt_agent.core.asr.listener import Listener
from bolt_agent.core.asr.vad_segmenter import SAMPLE_RATE
from bolt_agent.core.audio.audio_io import RateResamplers
from bolt_agent.core.audio.echo_canceller import EchoCanceller, SpeexCanceller, sample_index
from bolt_agent.nodes import qos
from bolt_agent.nodes.messages import chunk_audio, stamp_ns
from bolt_agent_interfaces.msg import AudioChunk, SpokenText


class AsrEcho:
    def __init__(self, node: Any, listener: Callable[[], Listener | None]) -> None:
        self._node, self._listener = node, listener
        self.canceller: EchoCanceller | None = None  # echo_mode aec, aec_canceller speex
        self._resamplers = RateResamplers(SAMPLE_RATE)
        self.late_references = 0  # microphone blocks processed before their reference came
        self._behind_ms = 0.0  # how far behind it was, the last time

    def configure(self, p: Any) -> str:
        """Make the canceller (whatever echo_mode says: it may change at run time) and
        subscribe; the reason it cannot run echo_mode aec, or ''."""
        self.canceller = None
        if p.aec_canceller == "speex":
            try:
                self.canceller = SpeexCanceller(p.aec_filter_ms)
            except RuntimeError as exc:
                if p.echo_mode == "aec":
                    return f"echo canceller unavailable: {exc}"
                self._node.get_logger().warning(
                    f"echo canceller unavailable ({exc}): no echo_mode aec"
                )
        return ""

    def subscriptions(self) -> list[Any]:
        node = self._node
        return [
            node.create_subscription(AudioChunk, "audio/output", self._on_output, qos.AUDIO),
            node.create_subscription(SpokenText, "speech/say", self._on_say, qos.RELIABLE),
            node.create_subscription(String, "teleop/say", self._on_teleop_say, qos.RELIABLE),
        ]

    def _on_output(self, msg: AudioChunk) -> None:
        """What the robot plays (tts_node, ``audio_sink: topic``): the echo canceller's
        reference, on the microphone's time line by its stamp."""
        listener = self._listener()
        if listener is None or self.canceller is None:
            return
        node = self._node
        try:
            why = audio_block_problem(
                len(msg.samples), msg.channels, msg.sample_rate, node.params.max_chunk_s
            )
            if why is not None:
                raise ValueError(why)
            x = self._resamplers.process(chunk_audio(msg), int(msg.sample_rate) or SAMPLE_RATE)
            listener.reference(x, stamp_ns(msg.header.stamp))
        except Exception as exc:  # a malformed block: the echo of it is not cancelled
            node.record_failure("bad_reference", f"audio/output block refused: {exc!r}", log=False)
            node.get_logger().error(
                f"audio/output block refused: {exc!r}", throttle_duration_sec=5.0
            )

    def _on_say(self, msg: SpokenText) -> None:
        listener = self._listener()
        if listener is not None and msg.text and not msg.discard:
            listener.robot_said(msg.text)

    def _on_teleop_say(self, msg: String) -> None:
        listener = self._listener()
        if listener is not None and msg.data:
            listener.robot_said(msg.data)

    def wait_for_reference(self, stamp_ns: int, samples: int, robot_speaking: bool) -> bool:
        """aec while the robot speaks: hold a microphone block until what the robot played over
        the same span has come on audio/output, at most until ``aec_reference_wait_ms`` after
        the block's end (between two sentences none comes at all, and the wait must not add
        up block after block). It delays the barge-in by at most that much, never the user's
        turn. False: the reference did not come in time (the listener does not cancel the
        block, and its VAD does not hear it)."""
        p = self._node.params
        timeline = getattr(self.canceller, "timeline", None)
        if timeline is None or p.echo_mode != "aec" or not robot_speaking:
            return True
        # the reference ends a little behind its stamps (the resampler holds some back)
        end = sample_index(stamp_ns) + samples - 1 - SAMPLE_RATE // 50
        if timeline.latest >= end:
            return True
        end_ns = stamp_ns + samples * 1_000_000_000 // SAMPLE_RATE
        now_ns = self._node.get_clock().now().nanoseconds
        left_ns = end_ns + int(p.aec_reference_wait_ms * 1e6) - now_ns
        if left_ns > 0 and timeline.wait_for(end, left_ns / 1e9):
            return True
        self.late_references += 1
        self._behind_ms = (end - timeline.latest) * 1000 / SAMPLE_RATE
        # a reference that has not moved for a second is a pause in the robot's voice (the
        # next sentence is being synthesised), not a late one
        return timeline.latest < sample_index(stamp_ns) - SAMPLE_RATE

    def values(self, listener: Listener | None, backchannels: int, echo_dropped: int) -> dict:
        p, canceller = self._node.params, self.canceller
        if p.echo_mode != "aec":
            described = "off"
        elif canceller is None:
            described = "external (the input comes cancelled)"
        else:
            described = f"speex MDF {p.aec_filter_ms} ms, reference audio/output"
        verdicts = getattr(listener, "barge_in_verdicts", {})
        return {
            "echo_canceller": described,
            "erle_db": round(getattr(canceller, "erle_db", 0.0), 1),
            "erle_recent_db": round(getattr(canceller, "recent_erle_db", 0.0), 1),
            "echo_converged": bool(getattr(canceller, "converged", False)),
            "barge_in_interruptions": verdicts.get("interrupt", 0),
            "barge_in_backchannels": backchannels,
            "echo_dropped": echo_dropped,
            "aec_late_references": self.late_references,
            "aec_reference_behind_ms": round(self._behind_ms, 1),
        }

"""ASR node: microphone (or `audio/input`) → streaming VAD → whisper (CTranslate2) transcripts.

Wiring around ``bolt_agent.core.asr.listener.Listener`` (echo gate and barge-in, partials,
the early final, stamps): the PortAudio callback or the `audio/input` subscription fills a
queue; the VAD thread pushes each block into the listener, which publishes `asr/voice_activity`
at speech start/stop without ever waiting for whisper; a one-thread executor runs whisper
(partials every `partial_interval_s` of speech, finals, the early final that is transcribed
as soon as a silence begins and published when the VAD confirms the end, so whisper's time hides
behind the `min_silence_ms` wait). `tts/state` tells the listener when the robot speaks
(`echo_mode: gate` ignores the mic; `barge_in` needs louder, longer speech and flags it; `aec`
cancels the robot's voice against `audio/output` and tells interruptions from backchannels,
which go out on `asr/backchannel`: `asr_echo.py`, docs/echo.md).
`audio/input` is subscribed best effort (sensor-data QoS): a microphone driver's best-effort
stream and our reliable publishers both match. Every received block is checked before it is
converted (rate, channels, whole frames, `max_chunk_s`); queued audio is capped at
`max_queued_s` (a flood is dropped, not buffered without bound). Refused blocks, failed
transcriptions and failed whisper jobs are logged and counted in `/diagnostics`; they never end
the node.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from rclpy.lifecycle import TransitionCallbackReturn

from bolt_agent.core.asr.asr_engine import AsrEngine
from bolt_agent.core.asr.audio_ingest import AudioIngest, audio_block_problem
from bolt_agent.core.asr.listener import Listener
from bolt_agent.core.asr.vad_segmenter import SAMPLE_RATE, VadSegmenter
from bolt_agent.core.audio.audio_io import (
    DeviceError,
    DeviceNotFoundError,
    MicCapture,
    RateResamplers,
    describe_devices,
    list_devices,
)
from bolt_agent.core.models import ModelNotFoundError
from bolt_agent.nodes import qos
from bolt_agent.nodes.asr_echo import AsrEcho
from bolt_agent.nodes.asr_outputs import AsrOutputs
from bolt_agent.nodes.asr_params import AsrParams
from bolt_agent.nodes.lifecycle import BoltLifecycleNode
from bolt_agent.nodes.messages import chunk_audio, stamp_ns
from bolt_agent.nodes.runtime import main_for
from bolt_agent_interfaces.msg import AudioChunk, EndOfTurnHint, TtsState

_DRAIN_S = 10.0  # deactivation waits this long for the VAD thread, then for the owed finals


class AsrNode(BoltLifecycleNode):
    Params = AsrParams
    params: AsrParams

    def __init__(self, **kwargs) -> None:
        super().__init__("asr_node", **kwargs)
        self._ingest = AudioIngest()  # blocks for the VAD thread, capped, losses counted
        self._out = AsrOutputs(self)
        self._owed: Listener | None = None  # transcriptions deactivation did not see finish
        self._engine: AsrEngine | None = None
        self._mic: MicCapture | None = None
        self._worker: threading.Thread | None = None
        self._whisper: ThreadPoolExecutor | None = None  # one thread: jobs run in order
        self._listener: Listener | None = None
        self._resamplers = RateResamplers(SAMPLE_RATE)
        self._robot_speaking = False  # the latest tts/state (latched: may come before activate)
        self._echo = AsrEcho(self, lambda: self._listener)  # echo_mode aec

    # --- lifecycle ---------------------------------------------------------------------------
    def configure(self) -> TransitionCallbackReturn:
        p = self.params
        try:
            engine = p.whisper_engine()
            engine.load()
        except (ModelNotFoundError, FileNotFoundError) as exc:
            self.record_failure("configure", f"ASR model missing: {exc}")
            return TransitionCallbackReturn.FAILURE
        except (RuntimeError, ValueError) as exc:  # unreadable model, bad compute type/device
            self.record_failure("configure", f"ASR model could not be loaded: {exc}")
            return TransitionCallbackReturn.FAILURE
        if engine.fallback_reason:
            self.get_logger().warning(engine.fallback_reason)
        elif engine.device_reason:
            self.get_logger().info(engine.device_reason)
        try:  # an optimisation: a failure is loud, not fatal (each job reports its own)
            warm_up = f"warmed up in {engine.warm_up():.2f} s"
        except Exception as exc:
            warm_up = "warm-up failed"
            self.record_failure(
                "warm_up", f"whisper's warm-up transcription failed (so will utterances): {exc!r}"
            )
        self._engine, self._model_name = engine, engine.model_dir.name
        if p.end_of_turn == "semantic" and not p.early_final:
            self.get_logger().warning(
                "end_of_turn semantic needs early_final: the words are judged from the "
                "early transcript; every turn waits end_of_turn_max_silence_ms"
            )
        self._out.open(publish_audio=p.audio_source == "device" and p.publish_audio)
        why = self._echo.configure(p)
        if why:
            self.record_failure("configure", why)
            self._out.close()
            return TransitionCallbackReturn.FAILURE
        self._subs = [
            # what the robot plays and says: the canceller's reference, its own words (aec)
            *self._echo.subscriptions(),
            self.create_subscription(TtsState, "tts/state", self._on_tts, qos.LATCHED),
            self.create_subscription(
                EndOfTurnHint, "llm/end_of_turn", self._on_end_of_turn_hint, qos.RELIABLE
            ),
        ]
        if p.audio_source == "topic":
            self._subs.append(
                self.create_subscription(
                    AudioChunk, "audio/input", self._on_audio_msg, qos.AUDIO_INPUT
                )
            )
        self.get_logger().info(
            f"whisper {engine.model_dir.name} loaded ({engine.device}, {engine.compute_type}, "
            f"{p.cpu_threads} thread(s); {warm_up})"
        )
        return TransitionCallbackReturn.SUCCESS

    def activate(self) -> TransitionCallbackReturn:
        assert self._engine is not None
        p = self.params
        owed, self._owed = self._owed, None  # one transcription at a time on the engine
        if owed is not None and not owed.drain(_DRAIN_S):
            self.record_failure("activate", "whisper still busy with the last activation's finals")
        self._ingest.reset()
        self._resamplers.reset()
        self._whisper = ThreadPoolExecutor(1, thread_name_prefix="asr-whisper")
        self._listener_params = p
        self._listener = Listener(
            self._engine,
            p.listener_settings(),
            VadSegmenter(p.vad_config()),
            runner=self._whisper,
            emit=self._out.publish,
            canceller=self._echo.canceller,
        )
        self._listener.robot_speaking(self._robot_speaking)
        self._worker = threading.Thread(target=self._work, name="asr-vad", daemon=True)
        self._worker.start()
        if p.audio_source == "device":
            self._mic = MicCapture(p.device, self._on_mic, SAMPLE_RATE, p.block_ms, self._clock_ns)
            attempts = itertools.count()
            self.retry_until(lambda: self._open_mic(rescan=next(attempts) > 0), p.retry_s)
        else:
            self.status("OK", "listening on topic audio/input")
        return TransitionCallbackReturn.SUCCESS

    def deactivate(self) -> None:
        if self._mic is not None:
            self._mic.close()
            self._mic = None
        self._ingest.close()
        deadline = time.monotonic() + _DRAIN_S  # for the VAD thread and the finals together
        if self._worker is not None:
            self._worker.join(timeout=_DRAIN_S)
            self._worker = None
        listener = self._listener
        if self._whisper is not None:  # the transcripts already owed (speaking=false is out)
            left = max(0.0, deadline - time.monotonic())
            if listener is not None and not listener.drain(left):
                self.record_failure(
                    "deactivate",
                    f"transcriptions still running {_DRAIN_S:.0f} s into deactivation; they "
                    "finish in the background",
                )
                self._owed = listener  # (whisper must not be freed under them)
            self._whisper.shutdown(wait=False)
            self._whisper = None
        self._listener = None

    def cleanup(self) -> None:
        # first the transcriptions deactivation left running: their finals still go out
        owed, self._owed = self._owed, None
        whisper_busy = owed is not None and not owed.drain(_DRAIN_S)
        for sub in self._subs:
            self.destroy_subscription(sub)
        self._out.close()
        if whisper_busy:
            self.get_logger().warning(
                "whisper is still transcribing what was owed at deactivation: the model stays "
                "loaded (freeing it under a transcription would crash the process)"
            )
        elif self._engine is not None:
            self._engine.close()
        self._engine = None

    # --- audio in ----------------------------------------------------------------------------
    def _open_mic(self, rescan: bool) -> bool:
        """Open the microphone; True once it is open (or gone: nothing left to retry)."""
        mic = self._mic
        if mic is None or mic.is_open:
            return True
        try:
            mic.open(rescan=rescan)
        except (DeviceNotFoundError, DeviceError) as exc:
            message = f"audio input unavailable: {exc}"
            if isinstance(exc, DeviceError):
                devices = describe_devices(list_devices("input"), "input")
                message += f"; available input devices: {devices}"
            self.get_logger().error(f"{message}; retrying every {self.params.retry_s} s")
            self.status("ERROR", message)
            return False
        dev = mic.device
        info = f"listening on {dev.name!r} at {mic.device_rate} Hz" if dev else "listening"
        self.get_logger().info(info)
        self.status("OK", info)
        return True

    def _clock_ns(self) -> int:
        return self.get_clock().now().nanoseconds

    def _on_mic(self, chunk: np.ndarray, stamp_ns: int, lost_ns: int) -> None:
        """A microphone block, stamped by the device's sample clock (a stalled callback's
        backlog stays contiguous, also in a bag of ``publish_audio``); audio the device lost is
        treated as on audio/input: more than ``audio_gap_ms`` ends the open utterance."""
        self._enqueue(chunk, stamp_ns, self._lost_samples(lost_ns, "the input device"))

    def _lost_samples(self, missing_ns: int, where: str) -> int:
        """Samples to skip for ``missing_ns`` of missing audio (0 up to ``audio_gap_ms``)."""
        lost = self._ingest.lost_samples(missing_ns, int(self.params.audio_gap_ms * 1e6))
        if lost:
            self.get_logger().debug(f"{where}: {missing_ns / 1e9:.2f} s of audio missing")
        return lost

    def _on_audio_msg(self, msg: AudioChunk) -> None:
        try:
            self._take_audio_msg(msg)
        except Exception as exc:  # a malformed block (odd channel count, bad rate): skip it
            self.record_failure("bad_audio", f"audio/input block dropped: {exc!r}", log=False)
            self.get_logger().error(
                f"audio/input block dropped: {exc!r}", throttle_duration_sec=5.0
            )

    def _take_audio_msg(self, msg: AudioChunk) -> None:
        why = audio_block_problem(
            len(msg.samples), msg.channels, msg.sample_rate, self.params.max_chunk_s
        )
        if why is not None:
            raise ValueError(why)
        if not self._active:  # nothing listens: no stream to find gaps in either
            self._ingest.stream_gaps.reset()
            return
        x = chunk_audio(msg)
        rate = int(msg.sample_rate) or SAMPLE_RATE
        stamp = stamp_ns(msg.header.stamp)
        frames = len(msg.samples) // max(1, msg.channels)
        # a block lost on the way (best effort), or a publisher that paused (the two look
        # alike; an utterance it cuts is logged as such: ended_by audio_lost)
        missing_ns = self._ingest.stream_gaps.block(stamp, frames * 1_000_000_000 // rate)
        lost = self._lost_samples(missing_ns, "audio/input")
        x = self._resamplers.process(x, rate, gap=lost > 0)
        self._enqueue(x, stamp or self.get_clock().now().nanoseconds, lost)

    def _enqueue(self, chunk: np.ndarray, stamp_ns: int, lost: int = 0) -> None:
        """Queue a block for the VAD thread; ``lost``: samples missing in front of it."""
        if not self._active:  # inactive: nothing reads the queue
            return
        max_queued = int(self.params.max_queued_s * SAMPLE_RATE)
        if not self._ingest.put(chunk, stamp_ns, lost, max_queued):
            message = f"audio dropped: more than max_queued_s {self.params.max_queued_s} s queued"
            self.record_failure("audio_overflow", message, log=False)
            self.get_logger().error(message, throttle_duration_sec=5.0)

    def _on_end_of_turn_hint(self, msg: EndOfTurnHint) -> None:
        p = msg.p_complete
        if not msg.utterance_id or not 0.0 <= p <= 1.0:  # also NaN
            self.record_failure("bad_input", f"llm/end_of_turn hint refused: p_complete {p!r}")
            return
        if self._listener is not None:
            self._listener.end_of_turn_hint(msg.utterance_id, msg.text, float(p))

    def _on_tts(self, msg: TtsState) -> None:
        self._robot_speaking = msg.speaking
        if self._listener is not None:
            self._listener.robot_speaking(msg.speaking, stamp_ns(msg.header.stamp))

    # --- processing (VAD thread) -------------------------------------------------------------
    def _work(self) -> None:
        listener = self._listener
        assert listener is not None
        while True:
            stopped_s = self.params.audio_stopped_s
            try:
                block, queued = self._ingest.get(timeout=stopped_s if stopped_s > 0 else None)
            except queue.Empty:  # no audio at all for audio_stopped_s
                self._guarded(listener.audio_stopped)
                continue
            if block is None:  # deactivating: an utterance still open ends with what was heard
                self._guarded(lambda: listener.audio_stopped("deactivated"))
                break
            self._guarded(lambda b=block, q=queued: self._process(listener, b, q))

    def _process(self, listener: Listener, block, queued: int) -> None:
        if block.lost:  # audio dropped in front of this block: not joined across the gap
            listener.audio_lost(block.lost)
            self._ingest.skipped(block.lost)
        if self.params is not self._listener_params:  # a runtime parameter changed
            self._listener_params = self.params
            listener.update_settings(self.params.listener_settings())
        if self._out.republishes_audio:
            self._out.audio(block.samples, block.stamp_ns)
        ready = self._echo.wait_for_reference(
            block.stamp_ns, len(block.samples), self._robot_speaking
        )
        listener.push(block.samples, block.stamp_ns, queued=queued, reference_ready=ready)

    def _guarded(self, step) -> None:
        """Keep listening: one bad block (or a failing step) must not end the node."""
        try:
            step()
        except Exception as exc:
            self.record_failure("processing", f"ASR processing failed: {exc!r}")

    # --- diagnostics -------------------------------------------------------------------------
    def diagnostic_values(self) -> dict[str, Any]:
        p, engine, mic = self.params, self._engine, self._mic
        if p.audio_source == "topic":
            device = "topic audio/input"
        elif mic is not None and mic.is_open and mic.device is not None:
            device = f"microphone {mic.device.name!r}"
        else:
            device = f"microphone {p.device or 'default'!r} (not open)"
        ingest = self._ingest.counts()
        counts = getattr(engine, "first_window_counts", None)
        kept, redone = counts() if counts is not None else (0, {})
        return {
            "model": getattr(self, "_model_name", "") if engine is not None else "(not loaded)",
            "compute": f"{engine.device} {engine.compute_type}" if engine is not None else "",
            "device": device,
            "queue_depth": ingest.depth,
            "queued_audio_s": ingest.queued / SAMPLE_RATE,
            "end_of_turn": p.end_of_turn,
            **{f"ended_by_{k}": v for k, v in sorted(self._out.ended_by.items())},
            "resumed_after_pause": self._out.resumed,
            "input_errors": mic.errors if mic is not None else 0,
            # voice activity events a publish failed for (logged; the utterance went on)
            "voice_events_lost": getattr(self._listener, "delivery_failures", 0),
            # audio dropped on overflow (failures.audio_overflow counts the blocks), audio/input
            # missing by the stamps or lost by the input device (its sample clock), and what of
            # both the VAD thread has skipped over (the rest waits for the next block)
            "audio_dropped_s": ingest.dropped / SAMPLE_RATE,
            "audio_gaps": ingest.gaps,
            "audio_gap_s": ingest.gap_samples / SAMPLE_RATE,
            "audio_skipped_s": ingest.skipped / SAMPLE_RATE,
            # the shorter first encoder window: transcripts it gave, and those redone in full
            "first_window_kept": kept,
            "first_window_redone": sum(redone.values()),
            # aec: the canceller, and what the barge-in judge decided
            **self._echo.values(self._listener, self._out.backchannels, self._out.echo_dropped),
        }


def main(args: list[str] | None = None) -> int:
    return main_for(AsrNode, args)


if __name__ == "__main__":
    raise SystemExit(main())

"""ASR node: microphone (or `audio/input`) → streaming VAD → faster-whisper transcripts.

Two worker threads: the VAD thread takes 16 kHz blocks from a queue (filled by the PortAudio
callback or the `audio/input` subscription), runs the VAD segmenter and publishes
`asr/voice_activity` at speech start/stop without ever waiting for whisper; the transcriber
thread runs whisper (partials every `partial_interval_s` of speech, finals). As soon as a
silence begins, the final is transcribed speculatively (`speculative_final`); when the VAD
confirms the end, that result is published at once (and discarded if speech resumes), so
whisper's time hides behind the `min_silence_ms` wait. A speculative result that is ready before
the end is confirmed is published as a partial, for the LLM to start prefilling.
While the robot speaks (`tts/state`) the mic is ignored (`echo_mode: gate`), or only louder,
longer speech counts and is flagged as a barge-in (`echo_mode: barge_in`).
"""

from __future__ import annotations

import array
import json
import queue
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from builtin_interfaces.msg import Time
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from std_msgs.msg import String

from bolt_agent.core.asr_engine import AsrEngine, FasterWhisperEngine
from bolt_agent.core.audio_io import (
    DeviceError,
    DeviceNotFoundError,
    MicCapture,
    StreamResampler,
    describe_devices,
    float_to_int16,
    int16_to_float,
    list_devices,
    to_mono,
)
from bolt_agent.core.models import ModelNotFoundError, resolve_model
from bolt_agent.core.vad_segmenter import (
    SAMPLE_RATE,
    SpeechEnd,
    SpeechStart,
    VadConfig,
    VadSegmenter,
)
from bolt_agent.nodes import qos, runtime
from bolt_agent_interfaces.msg import AudioChunk, Transcript, TtsState, TurnMetrics, VoiceActivity

PARAMS = {
    "model": "",  # models.yaml name or a CTranslate2 whisper directory ('' = default asr model)
    "compute_device": "auto",  # auto | cpu | cuda
    "compute_type": "",  # '' = int8 on CPU, float16 on CUDA
    "cpu_threads": 1,
    "language": "en",  # '' = detect
    "beam_size": 1,
    "encoder_window_s": 10.0,  # whisper encoder input (30 = whisper's padding; see asr_engine)
    "speculative_final": True,  # transcribe when a silence begins, publish when the VAD confirms
    "audio_source": "device",  # device | topic (audio/input, simulation and bags)
    "device": "",  # input device name or index ('' = default)
    "block_ms": 32,
    "publish_audio": False,  # device source: also publish the captured audio on audio/input
    "vad_threshold": 0.5,
    "min_silence_ms": 500,
    "speech_pad_ms": 80,
    "start_pad_ms": 250,  # audio kept before the detected onset (soft onsets are found late)
    "min_speech_ms": 150,
    "max_speech_s": 20.0,
    "partial_interval_s": 1.0,  # of speech between partial transcripts (0 = no partials)
    "no_speech_threshold": 0.6,
    "log_prob_threshold": -1.0,
    "echo_mode": "barge_in",  # off | gate | barge_in
    "barge_in_threshold": 0.8,  # VAD probability needed while the robot speaks
    "barge_in_min_ms": 300,  # speech needed while the robot speaks
    "echo_tail_ms": 300,  # gate: keep ignoring the mic this long after the robot stops
    "retry_s": 3.0,  # retry period while the input device is missing or busy
}
_BACKLOG_S = 0.5  # queued audio above which partials are skipped to catch up


@dataclass
class _Speculation:
    """A final transcribed before the VAD confirmed the end: its span and its result."""

    utt_id: str
    start: int  # padded start (the audio), compared with the SpeechEnd's
    onset: int  # where speech was detected (the stamps)
    end: int
    future: Future | None = None
    stale: bool = False  # speech resumed: the result must not be used or published


class AsrNode(LifecycleNode):
    def __init__(self, **kwargs) -> None:
        super().__init__("asr_node", **kwargs)
        runtime.declare_autostart(self)
        for name, default in PARAMS.items():
            if name == "echo_mode":  # YAML reads a bare `off` as false: accept both
                self.declare_parameter(name, default, ParameterDescriptor(dynamic_typing=True))
            else:
                self.declare_parameter(name, default)
        self._q: queue.Queue[tuple[np.ndarray, int] | None] = queue.Queue()
        self._queued = 0  # samples waiting in _q
        self._queued_lock = threading.Lock()
        self._engine: AsrEngine | None = None
        self._mic: MicCapture | None = None
        self._worker: threading.Thread | None = None
        self._whisper: ThreadPoolExecutor | None = None  # one thread: jobs run in order
        self._speculation: _Speculation | None = None
        self._last_job: Future | None = None  # the latest whisper job (partials wait for it)
        self._retry_timer = None
        self._resamplers: dict[int, StreamResampler] = {}
        self._tts_speaking = False
        self._tts_quiet_since = 0.0
        self._active = False

    # --- lifecycle ---------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        p = self.p = {name: self.get_parameter(name).value for name in PARAMS}
        if p["echo_mode"] is False or str(p["echo_mode"]).lower() in ("false", "none"):
            p["echo_mode"] = "off"
        for name, allowed in (("audio_source", ("device", "topic")),
                              ("echo_mode", ("off", "gate", "barge_in"))):  # fmt: skip
            if p[name] not in allowed:
                self.get_logger().error(f"{name} must be one of {allowed}, not {p[name]!r}")
                return TransitionCallbackReturn.FAILURE
        try:
            model_dir = resolve_model(p["model"], kind="asr")
            engine = FasterWhisperEngine(
                model_dir,
                p["compute_device"],
                p["compute_type"],
                p["cpu_threads"],
                p["language"],
                p["beam_size"],
                p["no_speech_threshold"],
                p["log_prob_threshold"],
                p["encoder_window_s"],
            )
            engine.load()
        except (ModelNotFoundError, FileNotFoundError) as exc:
            self.get_logger().error(f"ASR model missing: {exc}")
            return TransitionCallbackReturn.FAILURE
        except (RuntimeError, ValueError) as exc:  # unreadable model, bad compute type/device
            self.get_logger().error(f"ASR model could not be loaded: {exc}")
            return TransitionCallbackReturn.FAILURE
        if engine.fallback_reason:
            self.get_logger().warning(engine.fallback_reason)
        self._engine = engine
        self._vad_config = VadConfig(
            threshold=p["vad_threshold"],
            min_silence_ms=p["min_silence_ms"],
            speech_pad_ms=p["speech_pad_ms"],
            start_pad_ms=p["start_pad_ms"],
            min_speech_ms=p["min_speech_ms"],
            max_speech_s=p["max_speech_s"],
        )
        self._va_pub = self.create_publisher(VoiceActivity, "asr/voice_activity", qos.RELIABLE)
        self._text_pub = self.create_publisher(Transcript, "asr/transcript", qos.RELIABLE)
        self._metrics_pub = self.create_publisher(TurnMetrics, "bolt/turn_metrics", qos.RELIABLE)
        self._status_pub = self.create_publisher(String, "~/status", qos.LATCHED)
        self._audio_pub = None
        self._subs = [self.create_subscription(TtsState, "tts/state", self._on_tts, qos.LATCHED)]
        if p["audio_source"] == "topic":
            self._subs.append(
                self.create_subscription(AudioChunk, "audio/input", self._on_audio_msg, qos.AUDIO)
            )
        elif p["publish_audio"]:
            self._audio_pub = self.create_publisher(AudioChunk, "audio/input", qos.AUDIO)
        self.get_logger().info(
            f"whisper {model_dir.name} loaded ({engine.device}, {engine.compute_type}, "
            f"{p['cpu_threads']} thread(s))"
        )
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._segmenter = VadSegmenter(self._vad_config)
        self._anchor = (0, 0)  # (sample offset, stamp ns) of the latest block
        self._utt_id, self._utt_barge, self._last_partial, self._barge_mode = "", False, 0, False
        self._active = True
        self._speculation = self._last_job = None
        self._whisper = ThreadPoolExecutor(1, thread_name_prefix="asr-whisper")
        self._worker = threading.Thread(target=self._work, name="asr-vad", daemon=True)
        self._worker.start()
        if self.p["audio_source"] == "device":
            self._mic = MicCapture(self.p["device"], self._on_mic, SAMPLE_RATE, self.p["block_ms"])
            if not self._open_mic(rescan=False):
                self._retry_timer = self.create_timer(self.p["retry_s"], self._retry_mic)
        else:
            self._status("OK", "listening on topic audio/input")
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._active = False
        if self._retry_timer is not None:
            self.destroy_timer(self._retry_timer)
            self._retry_timer = None
        if self._mic is not None:
            self._mic.close()
            self._mic = None
        self._q.put(None)
        if self._worker is not None:
            self._worker.join(timeout=10.0)
        if self._whisper is not None:
            self._whisper.shutdown(wait=True, cancel_futures=True)
            self._whisper = None
        return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        for sub in self._subs:
            self.destroy_subscription(sub)
        for pub in (self._va_pub, self._text_pub, self._metrics_pub, self._status_pub):
            self.destroy_publisher(pub)
        if self._audio_pub is not None:
            self.destroy_publisher(self._audio_pub)
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        if self._active:
            self.on_deactivate(state)
        return TransitionCallbackReturn.SUCCESS

    # --- audio in ----------------------------------------------------------------------------
    def _open_mic(self, rescan: bool) -> bool:
        assert self._mic is not None
        try:
            self._mic.open(rescan=rescan)
        except (DeviceNotFoundError, DeviceError) as exc:
            message = f"audio input unavailable: {exc}"
            if isinstance(exc, DeviceError):
                devices = describe_devices(list_devices("input"), "input")
                message += f"; available input devices: {devices}"
            self.get_logger().error(f"{message}; retrying every {self.p['retry_s']} s")
            self._status("ERROR", message)
            return False
        dev = self._mic.device
        info = f"listening on {dev.name!r} at {self._mic.device_rate} Hz" if dev else "listening"
        self.get_logger().info(info)
        self._status("OK", info)
        return True

    def _retry_mic(self) -> None:
        if self._mic is not None and not self._mic.is_open and self._open_mic(rescan=True):
            self.destroy_timer(self._retry_timer)
            self._retry_timer = None

    def _on_mic(self, chunk: np.ndarray, _t: float) -> None:
        end_ns = self.get_clock().now().nanoseconds
        self._enqueue(chunk, end_ns - len(chunk) * 1_000_000_000 // SAMPLE_RATE)

    def _on_audio_msg(self, msg: AudioChunk) -> None:
        x = to_mono(int16_to_float(np.asarray(msg.samples, dtype=np.int16)), msg.channels)
        rate = int(msg.sample_rate) or SAMPLE_RATE
        if rate != SAMPLE_RATE:
            resampler = self._resamplers.setdefault(rate, StreamResampler(rate, SAMPLE_RATE))
            x = resampler.process(x)
        stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        self._enqueue(x, stamp or self.get_clock().now().nanoseconds)

    def _enqueue(self, chunk: np.ndarray, stamp_ns: int) -> None:
        with self._queued_lock:
            self._queued += len(chunk)
        self._q.put((chunk, stamp_ns))

    def _on_tts(self, msg: TtsState) -> None:
        if self._tts_speaking and not msg.speaking:
            self._tts_quiet_since = time.monotonic()
        self._tts_speaking = msg.speaking

    # --- processing --------------------------------------------------------------------------
    def _work(self) -> None:
        while (item := self._q.get()) is not None:
            chunk, stamp_ns = item
            with self._queued_lock:
                self._queued -= len(chunk)
            try:
                self._process(chunk, stamp_ns)
            except Exception as exc:  # keep listening; one bad block must not end the node
                self.get_logger().error(f"ASR processing failed: {exc!r}")

    def _process(self, chunk: np.ndarray, stamp_ns: int) -> None:
        seg, p = self._segmenter, self.p
        self._anchor = (seg.offset, stamp_ns)
        if self._audio_pub is not None:
            self._publish_audio(chunk, stamp_ns)
        echo = p["echo_mode"]
        tail = time.monotonic() - self._tts_quiet_since < p["echo_tail_ms"] / 1000
        if echo == "gate" and (self._tts_speaking or tail):
            if seg.in_speech:
                self._publish_va(False, seg.offset)
            seg.skip(len(chunk))
            return
        barge = echo == "barge_in" and self._tts_speaking
        if barge != self._barge_mode:
            self._barge_mode = barge
            if barge:
                seg.set_sensitivity(p["barge_in_threshold"], p["barge_in_min_ms"])
            else:
                seg.reset_sensitivity()
        for event in seg.push(chunk):
            if isinstance(event, SpeechStart):
                self._utt_id, self._utt_barge = f"u{uuid.uuid4().hex[:10]}", barge
                self._last_partial = event.offset
                self._publish_va(True, event.onset)
            elif isinstance(event, SpeechEnd):
                self._final(event)
        if seg.in_speech:
            self._speculate(seg)
        interval = int(p["partial_interval_s"] * SAMPLE_RATE)
        if (
            seg.in_speech
            and interval > 0
            and seg.offset - self._last_partial >= interval
            and self._queued < _BACKLOG_S * SAMPLE_RATE
            and self._whisper_idle()
        ):
            self._last_partial = seg.offset
            args = (self._utt_id, seg.current_audio(), seg.speech_onset, seg.offset)
            self._submit(self._transcribe_partial, *args)

    def _whisper_idle(self) -> bool:
        return self._last_job is None or self._last_job.done()

    def _submit(self, fn, *args) -> Future:
        self._last_job = self._whisper.submit(fn, *args)
        return self._last_job

    def _speculate(self, seg: VadSegmenter) -> None:
        """Start (or invalidate) the speculative final for the silence in progress."""
        spec, end = self._speculation, seg.pending_end
        if spec is not None and spec.end != end:
            spec.stale = True  # speech resumed (or a new silence began): forget it
            self._speculation = spec = None
        if spec is None and end is not None and self.p["speculative_final"]:
            start = seg.speech_start
            audio = seg.audio_between(start, end)
            spec = _Speculation(self._utt_id, start, seg.speech_onset, end)
            self._speculation = spec
            spec.future = self._submit(self._transcribe_speculative, spec, audio)

    def _transcribe_speculative(self, spec: _Speculation, audio: np.ndarray):
        if spec.stale:
            return None
        result = self._engine.transcribe(audio, final=True)
        if result is not None and not spec.stale and self._speculation is spec:
            self._publish_text(spec.utt_id, result, spec.onset, spec.end, final=False)
        return result

    def _transcribe_partial(self, utt_id: str, audio: np.ndarray, start: int, end: int) -> None:
        result = self._engine.transcribe(audio, final=False)
        if result is not None:
            self._publish_text(utt_id, result, start, end, final=False)

    def _final(self, event: SpeechEnd) -> None:
        """Publish the end of speech now; the transcript follows from the whisper thread."""
        self._publish_va(False, event.end)
        spec, self._speculation = self._speculation, None
        same = spec is not None and (spec.start, spec.end) == (event.start, event.end)
        reuse = same and not spec.stale
        if spec is not None and not reuse:
            spec.stale = True
        stamps = (self._stamp(event.end), self._utt_id)
        self._submit(self._finish, event, spec if reuse else None, *stamps)

    def _finish(self, event: SpeechEnd, spec: _Speculation | None, end_stamp, utt_id: str):
        if spec is not None:
            result = spec.future.result()  # done already: this thread ran it before this job
        else:
            result = self._engine.transcribe(event.audio, final=True)
        if result is None:
            self.get_logger().info(f"utterance {utt_id}: no speech recognised; dropped")
            return
        self._publish_text(utt_id, result, event.onset, event.end, final=True)
        metrics = TurnMetrics(turn_id=utt_id, source="asr")
        metrics.speech_end = end_stamp
        metrics.asr_final = self.get_clock().now().to_msg()
        self._metrics_pub.publish(metrics)

    # --- outputs -----------------------------------------------------------------------------
    def _stamp(self, offset: int) -> Time:
        anchor_offset, anchor_ns = self._anchor
        ns = anchor_ns + (offset - anchor_offset) * 1_000_000_000 // SAMPLE_RATE
        return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)

    def _publish_va(self, speaking: bool, offset: int) -> None:
        msg = VoiceActivity(utterance_id=self._utt_id, speaking=speaking, barge_in=self._utt_barge)
        msg.header.stamp = self._stamp(offset)
        self._va_pub.publish(msg)

    def _publish_text(self, utt_id: str, result, start: int, end: int, final: bool) -> None:
        msg = Transcript(
            utterance_id=utt_id,
            text=result.text,
            is_final=final,
            confidence=float(result.confidence),
            language=result.language,
        )
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.audio_start, msg.audio_end = self._stamp(start), self._stamp(end)
        self._text_pub.publish(msg)
        kind = "final" if final else "partial"
        self.get_logger().info(f"{kind} [{utt_id}] {result.text!r}")

    def _publish_audio(self, chunk: np.ndarray, stamp_ns: int) -> None:
        msg = AudioChunk(sample_rate=SAMPLE_RATE, channels=1)
        msg.header.stamp = Time(sec=stamp_ns // 1_000_000_000, nanosec=stamp_ns % 1_000_000_000)
        msg.samples = array.array("h", float_to_int16(chunk).tobytes())
        self._audio_pub.publish(msg)

    def _status(self, level: str, message: str, **extra) -> None:
        data = {"node": self.get_name(), "level": level, "message": message, **extra}
        self._status_pub.publish(String(data=json.dumps(data)))


def main(args: list[str] | None = None) -> int:
    return runtime.main_for(AsrNode, args)


if __name__ == "__main__":
    raise SystemExit(main())

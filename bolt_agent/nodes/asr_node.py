"""ASR node: microphone (or `audio/input`) → streaming VAD → faster-whisper transcripts.

One worker thread takes 16 kHz blocks from a queue (filled by the PortAudio callback or the
`audio/input` subscription), runs the VAD segmenter, publishes `asr/voice_activity` at speech
start/stop, partial transcripts every `partial_interval_s` of speech and one final at the end.
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
    "audio_source": "device",  # device | topic (audio/input, simulation and bags)
    "device": "",  # input device name or index ('' = default)
    "block_ms": 32,
    "publish_audio": False,  # device source: also publish the captured audio on audio/input
    "vad_threshold": 0.5,
    "min_silence_ms": 500,
    "speech_pad_ms": 80,
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
        self._worker = threading.Thread(target=self._work, name="asr-worker", daemon=True)
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
                self._publish_va(True, event.offset)
            elif isinstance(event, SpeechEnd):
                self._final(event)
        interval = int(p["partial_interval_s"] * SAMPLE_RATE)
        if (
            seg.in_speech
            and interval > 0
            and seg.offset - self._last_partial >= interval
            and self._queued < _BACKLOG_S * SAMPLE_RATE
        ):
            self._last_partial = seg.offset
            result = self._engine.transcribe(seg.current_audio(), final=False)
            if result is not None and seg.speech_start is not None:
                self._publish_text(result, seg.speech_start, seg.offset, final=False)

    def _final(self, event: SpeechEnd) -> None:
        self._publish_va(False, event.end)
        result = self._engine.transcribe(event.audio, final=True)
        if result is None:
            self.get_logger().info(f"utterance {self._utt_id}: no speech recognised; dropped")
            return
        self._publish_text(result, event.start, event.end, final=True)
        metrics = TurnMetrics(turn_id=self._utt_id, source="asr")
        metrics.speech_end = self._stamp(event.end)
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

    def _publish_text(self, result, start: int, end: int, final: bool) -> None:
        msg = Transcript(
            utterance_id=self._utt_id,
            text=result.text,
            is_final=final,
            confidence=float(result.confidence),
            language=result.language,
        )
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.audio_start, msg.audio_end = self._stamp(start), self._stamp(end)
        self._text_pub.publish(msg)
        kind = "final" if final else "partial"
        self.get_logger().info(f"{kind} [{self._utt_id}] {result.text!r}")

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

"""ASR node: microphone (or `audio/input`) → streaming VAD → whisper (CTranslate2) transcripts.

Wiring around ``bolt_agent.core.speech.listener.Listener`` (echo gate and barge-in, partials,
the speculative final, stamps): the PortAudio callback or the `audio/input` subscription fills a
queue; the VAD thread pushes each block into the listener, which publishes `asr/voice_activity`
at speech start/stop without ever waiting for whisper; a one-thread executor runs whisper
(partials every `partial_interval_s` of speech, finals, the speculative final that is transcribed
as soon as a silence begins and published when the VAD confirms the end, so whisper's time hides
behind the `min_silence_ms` wait). `tts/state` tells the listener when the robot speaks
(`echo_mode: gate` ignores the mic; `barge_in` needs louder, longer speech and flags it).
`audio/input` is subscribed best effort (sensor-data QoS): a microphone driver's best-effort
stream and our reliable publishers both match. Every received block is checked before it is
converted (rate, channels, whole frames, `max_chunk_s`); queued audio is capped at
`max_queued_s` (a flood is dropped, not buffered without bound). Refused blocks, failed
transcriptions and failed whisper jobs are logged and counted in `/diagnostics`; they never end
the node.
"""

from __future__ import annotations

import array
import itertools
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from builtin_interfaces.msg import Time
from rclpy.lifecycle import TransitionCallbackReturn

from bolt_agent.core.models import ModelNotFoundError, resolve_model
from bolt_agent.core.speech.asr_engine import AsrEngine, WhisperEngine
from bolt_agent.core.speech.audio_io import (
    DeviceError,
    DeviceNotFoundError,
    MicCapture,
    RateResamplers,
    describe_devices,
    float_to_int16,
    int16_to_float,
    list_devices,
    to_mono,
)
from bolt_agent.core.speech.end_of_turn import EndOfTurnSettings
from bolt_agent.core.speech.listener import (
    FinalMetrics,
    Listener,
    ListenerEvent,
    ListenerSettings,
    NoSpeech,
    StreamGaps,
    TranscriptEvent,
    TranscriptionFailed,
    VoiceActivityEvent,
    audio_block_problem,
)
from bolt_agent.core.speech.vad_segmenter import SAMPLE_RATE, VadConfig, VadSegmenter
from bolt_agent.nodes import qos
from bolt_agent.nodes.base import BoltLifecycleNode, param
from bolt_agent.nodes.runtime import main_for
from bolt_agent_interfaces.msg import (
    AudioChunk,
    EndOfTurnHint,
    Transcript,
    TtsState,
    TurnMetrics,
    VoiceActivity,
)

_BACKLOG_S = 0.5  # queued audio above which partials are skipped to catch up
_DRAIN_S = 10.0  # deactivation waits this long for the VAD thread, then for the owed finals


def _echo_mode(value: Any) -> Any:
    """YAML reads a bare ``off`` as false: accept false/none for 'off'."""
    if value is False or str(value).lower() in ("false", "none"):
        return "off"
    return value


@dataclass(frozen=True)
class AsrParams:
    model: str = param(
        "",
        "models.yaml name or a CTranslate2 whisper directory ('' = the default asr model)",
        load_time=True,
    )
    compute_device: str = param(
        "auto",
        "where whisper runs: auto (CUDA when it works, else the CPU), cpu or cuda",
        load_time=True,
        choices=("auto", "cpu", "cuda"),
    )
    compute_type: str = param(
        "", "CTranslate2 compute type ('' = int8 on CPU, float16 on CUDA)", load_time=True
    )
    cpu_threads: int = param(
        1, "CTranslate2 CPU threads for whisper", load_time=True, low=1, high=256
    )
    language: str = param(
        "en", "language code of the speech ('' = detect it per utterance)", load_time=True
    )
    beam_size: int = param(
        1,
        "beam size of final transcriptions (partials are greedy)",
        load_time=True,
        low=1,
        high=16,
    )
    encoder_window_s: float = param(
        10.0,
        "seconds of whisper's padded 30 s input the encoder sees (at least the audio + 1 s; "
        "0 or 30 = whisper's full padding)",
        load_time=True,
        low=0.0,
        high=30.0,
    )
    encoder_first_window_s: float = param(
        6.0,
        "a shorter encoder window tried first (audio up to this - 2 s, a set language, greedy "
        "finals): ~25 % less whisper time; a transcript that repeats itself, runs away or reads "
        "as silence is redone with encoder_window_s (0 = off)",
        load_time=True,
        low=0.0,
        high=30.0,
    )
    speculative_final: bool = param(
        True,
        "transcribe an utterance as soon as a silence begins and publish it when the VAD "
        "confirms the end (discarded if speech resumes)",
    )
    audio_source: str = param(
        "device",
        "where audio comes from: 'device' (a microphone) or 'topic' (audio/input: simulation, "
        "bags)",
        load_time=True,
        choices=("device", "topic"),
    )
    device: str = param("", "input device name or index ('' = the default device)", load_time=True)
    block_ms: int = param(
        10,
        "microphone block in ms: how often audio reaches the VAD and the end-of-turn decision "
        "(10: 24 ms less capture delay than 32 through PulseAudio, docs/speech.md)",
        load_time=True,
        low=1,
        high=1000,
    )
    publish_audio: bool = param(
        False, "device source: also publish the captured audio on audio/input", load_time=True
    )
    vad_threshold: float = param(
        0.5, "VAD speech probability that starts an utterance", load_time=True, low=0.0, high=1.0
    )
    min_silence_ms: int = param(
        500,
        "end_of_turn fixed: the silence in ms that ends an utterance",
        load_time=True,
        low=0,
        high=60000,
    )
    end_of_turn: str = param(
        "semantic",
        "when the user's turn is over: 'fixed' (min_silence_ms of silence) or 'semantic' (from "
        "the words of the speculative transcript: end_of_turn_silence_ms when they are "
        "complete, end_of_turn_max_silence_ms when not; the hint comes from llm/end_of_turn, "
        "else the text decides)",
        load_time=True,
        choices=("fixed", "semantic"),
    )
    end_of_turn_silence_ms: int = param(
        250,
        "semantic: the silence in ms that ends a turn whose words are complete",
        low=0,
        high=60000,
    )
    end_of_turn_max_silence_ms: int = param(
        1200,
        "semantic: the longest silence in ms (it ends any turn: a pause mid-sentence is "
        "waited for this long)",
        load_time=True,
        low=0,
        high=60000,
    )
    end_of_turn_threshold: float = param(
        0.05,
        "semantic: the LLM's p_complete (llm/end_of_turn) at or above which the words are a "
        "complete turn",
        low=0.0,
        high=1.0,
    )
    end_of_turn_likely_threshold: float = param(
        0.03,
        "semantic: p_complete at or above which (and below end_of_turn_threshold) words that "
        "look finished (final punctuation, no ellipsis, a last word that closes) end the turn "
        "after end_of_turn_likely_silence_ms (at most end_of_turn_threshold)",
        low=0.0,
        high=1.0,
    )
    end_of_turn_likely_silence_ms: int = param(
        600,
        "semantic: the silence in ms that ends a turn judged likely complete (kept within "
        "[end_of_turn_silence_ms, end_of_turn_max_silence_ms])",
        low=0,
        high=60000,
    )
    end_of_turn_hint_timeout_ms: int = param(
        800,
        "semantic: silence in ms after which the text alone decides when no hint has come "
        "(no LLM node, a remote engine, a busy worker)",
        low=0,
        high=60000,
    )
    speech_pad_ms: int = param(
        48,
        "audio in ms kept after the end of speech; the speculative transcript waits for it "
        "(48: the same words as 80 on 126 utterances, 32 ms sooner; 32 misheard more: "
        "benchmarks/pad_accuracy.py)",
        load_time=True,
        low=0,
        high=10000,
    )
    start_pad_ms: int = param(
        250,
        "audio in ms kept before the detected onset (soft onsets are found late)",
        load_time=True,
        low=0,
        high=10000,
    )
    min_speech_ms: int = param(
        150, "speech in ms needed to start an utterance", load_time=True, low=0, high=60000
    )
    max_speech_s: float = param(
        20.0,
        "longest utterance in s: longer speech is cut and transcribed",
        load_time=True,
        low=0.1,
        high=600.0,
    )
    partial_interval_s: float = param(
        1.0,
        "seconds of speech between partial transcripts (0 = no partials)",
        low=0.0,
        high=600.0,
    )
    no_speech_threshold: float = param(
        0.6,
        "whisper no-speech probability above which a low-confidence segment is dropped",
        load_time=True,
        low=0.0,
        high=1.0,
    )
    log_prob_threshold: float = param(
        -1.0,
        "mean token log-probability below which a likely no-speech segment is dropped",
        load_time=True,
    )
    echo_mode: str = param(
        "barge_in",
        "while the robot speaks: 'off' (listen as usual), 'gate' (ignore the mic, and for "
        "echo_tail_ms after) or 'barge_in' (only louder, longer speech counts, flagged "
        "barge_in); a bare YAML off (read as false) means 'off'",
        choices=("off", "gate", "barge_in"),
        dynamic_typing=True,
        normalize=_echo_mode,
    )
    barge_in_threshold: float = param(
        0.8, "VAD probability needed while the robot speaks (barge_in)", low=0.0, high=1.0
    )
    barge_in_min_ms: int = param(
        300, "speech in ms needed while the robot speaks (barge_in)", low=0, high=60000
    )
    echo_tail_ms: int = param(
        300,
        "gate: keep ignoring the mic this long in ms after the robot stops",
        low=0,
        high=60000,
    )
    retry_s: float = param(
        3.0,
        "period in s of the retries while the input device is missing or busy (taken when "
        "the node activates)",
        low=0.01,
        high=3600.0,
    )
    max_chunk_s: float = param(
        2.0,
        "longest audio/input block in s that is accepted; a longer one is refused and counted",
        low=0.01,
        high=600.0,
    )
    audio_gap_ms: float = param(
        250.0,
        "audio/input: a block stamped more than this after where the previous one ended means "
        "audio was lost on the way (device: more than this lost by the input's sample clock); "
        "an utterance open ends there (ended_by_audio_lost) instead of joining the words around "
        "the gap (0 = never: for publishers whose stamps jitter)",
        low=0.0,
        high=60_000.0,
    )
    audio_stopped_s: float = param(
        3.0,
        "no audio for this long with an utterance open (a bag or file ended, the source went "
        "away) ends it with what was heard, counted as ended_by_audio_stopped (0 = wait for "
        "audio to come back); keep it above max_chunk_s",
        low=0.0,
        high=600.0,
    )
    max_queued_s: float = param(
        30.0,
        "audio in s allowed to wait for the VAD thread; blocks beyond it are dropped and "
        "counted (a flood must not grow memory without bound)",
        low=0.1,
        high=3600.0,
    )

    def whisper_engine(self, device: str = "", cpu_threads: int = 0) -> WhisperEngine:
        """The engine these parameters describe, not loaded (benchmarks set the device and
        the threads the stack gives it)."""
        return WhisperEngine(
            resolve_model(self.model, kind="asr"),
            device or self.compute_device,
            self.compute_type,
            cpu_threads or self.cpu_threads,
            self.language,
            self.beam_size,
            self.no_speech_threshold,
            self.log_prob_threshold,
            self.encoder_window_s,
            self.encoder_first_window_s,
        )


def _time(ns: int) -> Time:
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


class AsrNode(BoltLifecycleNode):
    Params = AsrParams
    params: AsrParams

    def __init__(self, **kwargs) -> None:
        super().__init__("asr_node", **kwargs)
        # (block, stamp ns of its first sample, samples lost in front of it) | None: stop
        self._q: queue.Queue[tuple[np.ndarray, int, int] | None] = queue.Queue()
        self._queued = 0  # samples waiting in _q
        self._queued_lock = threading.Lock()
        self._dropped = 0  # samples lost (dropped, or missing by the stamps) since the last block
        self._dropped_total = self._skipped_total = 0  # (dropped on overflow; skipped by the VAD)
        # audio/input blocks missing by their stamps, every ns of it (_lost_samples applies
        # audio_gap_ms, to the microphone's losses as well)
        self._gaps = StreamGaps(tolerance_ns=0)
        self._owed: Listener | None = None  # transcriptions deactivation did not see finish
        self._gap_count = self._gap_samples = 0
        self._engine: AsrEngine | None = None
        self._mic: MicCapture | None = None
        self._worker: threading.Thread | None = None
        self._whisper: ThreadPoolExecutor | None = None  # one thread: jobs run in order
        self._listener: Listener | None = None
        self._resamplers = RateResamplers(SAMPLE_RATE)
        self._robot_speaking = False  # the latest tts/state (latched: may come before activate)
        self._ended_by: dict[str, int] = {}  # silence | hint | text | audio_stopped | ...
        self._resumed = 0  # utterances resumed after a speculative end

    def _listener_settings(self) -> ListenerSettings:
        p = self.params
        complete = min(p.end_of_turn_silence_ms, p.end_of_turn_max_silence_ms)
        return ListenerSettings(
            echo_mode=p.echo_mode,
            barge_in_threshold=p.barge_in_threshold,
            barge_in_min_ms=p.barge_in_min_ms,
            echo_tail_ms=p.echo_tail_ms,
            partial_interval_s=p.partial_interval_s,
            speculative_final=p.speculative_final,
            backlog_s=_BACKLOG_S,
            end_of_turn=EndOfTurnSettings(
                p.end_of_turn,
                complete_silence_ms=complete,
                incomplete_silence_ms=p.end_of_turn_max_silence_ms,
                threshold=p.end_of_turn_threshold,
                hint_timeout_ms=p.end_of_turn_hint_timeout_ms,
                likely_threshold=min(p.end_of_turn_likely_threshold, p.end_of_turn_threshold),
                likely_silence_ms=min(
                    max(p.end_of_turn_likely_silence_ms, complete), p.end_of_turn_max_silence_ms
                ),
            ),
        )

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
        if p.end_of_turn == "semantic" and not p.speculative_final:
            self.get_logger().warning(
                "end_of_turn semantic needs speculative_final: the words are judged from the "
                "speculative transcript; every turn waits end_of_turn_max_silence_ms"
            )
        self._vad_config = VadConfig(
            threshold=p.vad_threshold,
            # semantic: the VAD's silence is only the longest wait; the words end turns earlier
            min_silence_ms=p.end_of_turn_max_silence_ms
            if p.end_of_turn == "semantic"
            else p.min_silence_ms,
            speech_pad_ms=p.speech_pad_ms,
            start_pad_ms=p.start_pad_ms,
            min_speech_ms=p.min_speech_ms,
            max_speech_s=p.max_speech_s,
        )
        self._va_pub = self.create_publisher(VoiceActivity, "asr/voice_activity", qos.RELIABLE)
        self._text_pub = self.create_publisher(Transcript, "asr/transcript", qos.RELIABLE)
        self._metrics_pub = self.create_publisher(TurnMetrics, "bolt/turn_metrics", qos.RELIABLE)
        self._audio_pub = None
        self._subs = [
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
        elif p.publish_audio:
            self._audio_pub = self.create_publisher(AudioChunk, "audio/input", qos.AUDIO)
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
        self._q, self._queued, self._dropped = queue.Queue(), 0, 0
        self._gaps.reset()
        self._resamplers.reset()
        self._whisper = ThreadPoolExecutor(1, thread_name_prefix="asr-whisper")
        self._listener_params = p
        self._listener = Listener(
            self._engine,
            self._listener_settings(),
            VadSegmenter(self._vad_config),
            runner=self._whisper,
            emit=self._publish,
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
        self._q.put(None)
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
        for pub in (self._va_pub, self._text_pub, self._metrics_pub):
            self.destroy_publisher(pub)
        if self._audio_pub is not None:
            self.destroy_publisher(self._audio_pub)
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
        tolerance = int(self.params.audio_gap_ms * 1e6)
        if not tolerance or missing_ns <= tolerance:
            return 0
        lost = missing_ns * SAMPLE_RATE // 1_000_000_000
        self._gap_count += 1
        self._gap_samples += lost
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
            self._gaps.reset()
            return
        x = to_mono(int16_to_float(np.asarray(msg.samples, dtype=np.int16)), msg.channels)
        rate = int(msg.sample_rate) or SAMPLE_RATE
        stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        frames = len(msg.samples) // max(1, msg.channels)
        # a block lost on the way (best effort), or a publisher that paused (the two look
        # alike; an utterance it cuts is logged as such: ended_by audio_lost)
        missing_ns = self._gaps.block(stamp, frames * 1_000_000_000 // rate)
        lost = self._lost_samples(missing_ns, "audio/input")
        x = self._resamplers.process(x, rate, gap=lost > 0)
        self._enqueue(x, stamp or self.get_clock().now().nanoseconds, lost)

    def _enqueue(self, chunk: np.ndarray, stamp_ns: int, lost: int = 0) -> None:
        """Queue a block for the VAD thread; ``lost``: samples missing in front of it."""
        if not self._active:  # inactive: nothing reads the queue
            return
        with self._queued_lock:
            full = self._queued + len(chunk) > self.params.max_queued_s * SAMPLE_RATE
            self._dropped += lost
            if full:  # the VAD thread skips the gap before the next block it takes
                self._dropped += len(chunk)
                self._dropped_total += len(chunk)
                lost = 0
            else:
                self._queued += len(chunk)
                lost, self._dropped = self._dropped, 0
        if full:
            message = f"audio dropped: more than max_queued_s {self.params.max_queued_s} s queued"
            self.record_failure("audio_overflow", message, log=False)
            self.get_logger().error(message, throttle_duration_sec=5.0)
            return
        self._q.put((chunk, stamp_ns, lost))

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
            self._listener.robot_speaking(msg.speaking)

    # --- processing (VAD thread) -------------------------------------------------------------
    def _work(self) -> None:
        listener = self._listener
        assert listener is not None
        while True:
            stopped_s = self.params.audio_stopped_s
            try:
                item = self._q.get(timeout=stopped_s if stopped_s > 0 else None)
            except queue.Empty:  # no audio at all for audio_stopped_s
                try:
                    listener.audio_stopped()
                except Exception as exc:
                    self.record_failure("processing", f"ASR processing failed: {exc!r}")
                continue
            if item is None:  # deactivating: an utterance still open ends with what was heard
                try:
                    listener.audio_stopped("deactivated")
                except Exception as exc:
                    self.record_failure("processing", f"ASR processing failed: {exc!r}")
                break
            chunk, stamp_ns, lost = item
            with self._queued_lock:
                self._queued -= len(chunk)
                queued = self._queued
            try:
                if lost:  # audio dropped in front of this block: not joined across the gap
                    listener.audio_lost(lost)
                    self._skipped_total += lost
                if self.params is not self._listener_params:  # a runtime parameter changed
                    self._listener_params = self.params
                    listener.update_settings(self._listener_settings())
                if self._audio_pub is not None:
                    self._publish_audio(chunk, stamp_ns)
                listener.push(chunk, stamp_ns, queued=queued)
            except Exception as exc:  # keep listening; one bad block must not end the node
                self.record_failure("processing", f"ASR processing failed: {exc!r}")

    # --- outputs (VAD thread: voice activity; whisper thread: transcripts) ---------------------
    def _publish(self, event: ListenerEvent) -> None:
        if isinstance(event, VoiceActivityEvent):
            if event.resumed:
                self._resumed += 1
                self.get_logger().info(f"[{event.utterance_id}] the user went on after a pause")
            msg = VoiceActivity(
                utterance_id=event.utterance_id,
                speaking=event.speaking,
                barge_in=event.barge_in,
                resumed=event.resumed,
            )
            msg.header.stamp = _time(event.stamp_ns)
            self._va_pub.publish(msg)
        elif isinstance(event, TranscriptEvent):
            msg = Transcript(
                utterance_id=event.utterance_id,
                text=event.text,
                is_final=event.is_final,
                confidence=event.confidence,
                language=event.language,
                speculative=event.speculative,
            )
            msg.header.stamp = self.get_clock().now().to_msg()
            msg.audio_start, msg.audio_end = _time(event.audio_start_ns), _time(event.audio_end_ns)
            self._text_pub.publish(msg)
            kind = "final" if event.is_final else "speculative" if event.speculative else "partial"
            lag = (self.get_clock().now().nanoseconds - event.audio_end_ns) / 1e9
            work = f"whisper {event.transcribe_s:.2f} s" if event.transcribe_s else "reused"
            self.get_logger().info(
                f"{kind} [{event.utterance_id}] {event.text!r} ({lag:.2f} s after its audio "
                f"ended; queued {event.queued_s:.2f} s, {work})"
            )
        elif isinstance(event, FinalMetrics):
            self._ended_by[event.ended_by] = self._ended_by.get(event.ended_by, 0) + 1
            if event.ended_by == "audio_lost":
                self.get_logger().warning(
                    f"[{event.utterance_id}] audio was lost mid-utterance (dropped beyond "
                    f"max_queued_s {self.params.max_queued_s} s, or missing by the stamps): the "
                    "utterance ends with what was heard"
                )
            elif event.ended_by == "audio_stopped":
                self.get_logger().warning(
                    f"[{event.utterance_id}] no audio for audio_stopped_s "
                    f"{self.params.audio_stopped_s} s: the utterance ends with what was heard"
                )
            elif event.ended_by == "deactivated":
                self.get_logger().warning(
                    f"[{event.utterance_id}] deactivated mid-utterance: it ends with what was heard"
                )
            elif event.ended_by != "silence":
                self.get_logger().info(
                    f"end of turn [{event.utterance_id}] after {event.silence_ms:.0f} ms of "
                    f"silence (the words are complete: {event.ended_by})"
                )
            metrics = TurnMetrics(turn_id=event.utterance_id, source="asr")
            metrics.speech_end = _time(event.speech_end_ns)
            metrics.asr_final = self.get_clock().now().to_msg()
            self._metrics_pub.publish(metrics)
        elif isinstance(event, NoSpeech):
            self.get_logger().info(f"utterance {event.utterance_id}: no speech recognised; dropped")
        elif isinstance(event, TranscriptionFailed):
            self.record_failure(
                "transcription",
                f"utterance {event.utterance_id}: {event.stage} transcription failed: "
                f"{event.error}",
            )
            if event.stage == "final":  # the utterance's turn ends here: say so in its metrics
                # (a partial or speculative failure is not: the final still comes)
                reason = f"failed: final transcription: {event.error}"[:200]
                metrics = TurnMetrics(turn_id=event.utterance_id, source="asr", outcome=reason)
                self._metrics_pub.publish(metrics)

    # --- diagnostics -------------------------------------------------------------------------
    def diagnostic_values(self) -> dict[str, Any]:
        p, engine, mic = self.params, self._engine, self._mic
        if p.audio_source == "topic":
            device = "topic audio/input"
        elif mic is not None and mic.is_open and mic.device is not None:
            device = f"microphone {mic.device.name!r}"
        else:
            device = f"microphone {p.device or 'default'!r} (not open)"
        with self._queued_lock:
            queued = self._queued
        counts = getattr(engine, "first_window_counts", None)
        kept, redone = counts() if counts is not None else (0, {})
        return {
            "model": getattr(self, "_model_name", "") if engine is not None else "(not loaded)",
            "compute": f"{engine.device} {engine.compute_type}" if engine is not None else "",
            "device": device,
            "queue_depth": self._q.qsize(),
            "queued_audio_s": queued / SAMPLE_RATE,
            "end_of_turn": p.end_of_turn,
            **{f"ended_by_{k}": v for k, v in sorted(self._ended_by.items())},
            "resumed_after_pause": self._resumed,
            "input_errors": mic.errors if mic is not None else 0,
            # voice activity events a publish failed for (logged; the utterance went on)
            "voice_events_lost": getattr(self._listener, "delivery_failures", 0),
            # audio dropped on overflow (failures.audio_overflow counts the blocks), audio/input
            # missing by the stamps or lost by the input device (its sample clock), and what of
            # both the VAD thread has skipped over (the rest waits for the next block)
            "audio_dropped_s": self._dropped_total / SAMPLE_RATE,
            "audio_gaps": self._gap_count,
            "audio_gap_s": self._gap_samples / SAMPLE_RATE,
            "audio_skipped_s": self._skipped_total / SAMPLE_RATE,
            # the shorter first encoder window: transcripts it gave, and those redone in full
            "first_window_kept": kept,
            "first_window_redone": sum(redone.values()),
        }

    def _publish_audio(self, chunk: np.ndarray, stamp_ns: int) -> None:
        msg = AudioChunk(sample_rate=SAMPLE_RATE, channels=1)
        msg.header.stamp = _time(stamp_ns)
        msg.samples = array.array("h", float_to_int16(chunk).tobytes())
        self._audio_pub.publish(msg)


def main(args: list[str] | None = None) -> int:
    return main_for(AsrNode, args)


if __name__ == "__main__":
    raise SystemExit(main())

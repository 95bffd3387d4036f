"""A pipecat peer in the acoustic voice-to-voice benchmark: the same three models, the same
PulseAudio loop, pipecat's pipeline instead of our stack.

    python -m bolt_agent.benchmarks.pipecat_peer serve '<json cfg>'

The peer process listens on the default PortAudio input and speaks on the default output (the
``PULSE_SOURCE``/``PULSE_SINK`` of ``pulse.env()`` route them to ``user_mouth.monitor`` and
``robot_speaker``, as for ``stack_host``). Pipeline (pipecat's usual shape): transport in →
``WhisperSTTService`` (faster-whisper, our whisper-base directory) → user aggregator (Silero VAD
+ the smart-turn v3 analyzer, pipecat's defaults) → ``OpenAILLMService`` on a
``llama_cpp.server`` child process serving our Gemma 3 270M GGUF → ``PiperTTSService`` (our
en_US-joe-medium voice) → transport out → assistant aggregator. Same thread budget as the stack
(llama.cpp ``n_threads``/``n_threads_batch``, whisper ``cpu_threads``, Piper's onnxruntime
intra-op threads); pipecat's own defaults otherwise (``PEER_DEFAULTS`` lists what differs).

The transport is pipecat's ``LocalAudioTransport`` ported from PyAudio to sounddevice (the same
PortAudio calls: 20 ms input callback blocks, blocking writes, PortAudio's low latency, default
devices): PyAudio has no Linux wheel on PyPI and would need PortAudio's headers to build.

Line protocol (as ``stack_host``, so ``voice_loop._Proc`` drives it): one JSON line per event on
stdout — ``{"event": "ready", ...}`` once the input stream delivers audio, then the pipeline's
events (``vad_start``, ``vad_stop``, ``transcript``, ``llm_start``, ``llm_first_text``,
``llm_end``, ``tts_first_audio``, ``bot_started``, ``bot_stopped``) with their wall time;
``quit`` (or EOF) on stdin ends it.

``run_peer_loop`` is ``voice_loop.run_voice_loop`` for the peer: the same utterances, player,
recorder and acoustic analysis (``analyse``), with the peer's stdout events instead of DDS.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bolt_agent.core.processes import die_with_parent

#: what the peer runs with that differs from our stack (besides the pipeline itself)
PEER_DEFAULTS: dict[str, Any] = {
    "threads": "the same as the benchmark's stack (effective_params: llm n_threads / "
    "n_threads_batch, asr cpu_threads, tts cpu_threads); pipecat's Silero VAD and smart-turn "
    "sessions 1 thread each (pipecat's defaults)",
    "vad": "pipecat SileroVADAnalyzer defaults: confidence 0.7, start_secs 0.2, stop_secs 0.2, "
    "min_volume 0.6 (stack: Silero threshold 0.5, min_speech_ms 150, the silence set by the end "
    "of turn): a pause inside an utterance ends a segment, and each segment is transcribed on "
    "its own",
    "turn_end": "pipecat's default user-turn strategies: start on VAD or a transcript, stop by "
    "the smart-turn v3.2 ONNX analyzer (audio prosody) once the segment's transcript is in "
    "(stack: asr_node end_of_turn, semantic by default: the words of the early transcript "
    "and the LLM's end-of-turn hint; fixed: the VAD's min_silence_ms)",
    "asr": "WhisperSTTService (segmented: one transcription per VAD segment, after it ends), "
    "faster-whisper's defaults: beam_size 5, compute_type 'default' (whisper-base is saved "
    "float16: float32 on this CPU), 30 s encoder window, no_speech_prob 0.4 (stack: beam_size "
    "1, int8, 10 s window, the final transcript started early, when the silence begins)",
    "llm": "llama_cpp.server child process on 127.0.0.1 through OpenAILLMService (chat API, "
    "streaming), the GGUF's chat template (the bundled Gemma GGUF has none: llama-cpp-python's "
    "'gemma' format, which has no system role), a one-line system_instruction, max_tokens; the "
    "server's sampling defaults (temperature 0.8, top_p 0.95, top_k 40, min_p 0.05, repeat "
    "penalty 1.1); no tools, thinking, few-shot or prompt prewarm (stack: llama.cpp in process, "
    "profile prompt, temperature 1.0, top_k 64, prefill at start-up and at speech start)",
    "tts": "PiperTTSService: pipecat's sentence aggregation, Piper's 22.05 kHz resampled to "
    "24 kHz, 40 ms output chunks (stack: first clause → Piper, 10 ms output blocks, the "
    "silence before a turn's first word trimmed to 10 ms)",
    "audio_io": "sounddevice port of pipecat's LocalAudioTransport (PyAudio has no Linux "
    "wheel): 16 kHz input in 20 ms callback blocks, blocking writes, PortAudio low latency, "
    "the 'default' ALSA→PulseAudio devices, as the stack (stack: 10 ms mic blocks)",
    "warm_up": "none (pipecat's): the first transcription and completion pay their start-up",
    "answer_length": "max_tokens per answer (bolt-agent bench --peer-max-tokens, 48) (stack: "
    "llm_node max_new_tokens per step): it bounds how long a turn takes, not when it is heard",
}
SYSTEM_PROMPT = (
    "You are Reachy Mini, a small friendly robot. Answer in one or two short spoken sentences."
)


def _emit(event: str, **fields: Any) -> None:
    with _EMIT_LOCK:
        print(json.dumps({"event": event, "wall": time.time(), **fields}), flush=True)


_EMIT_LOCK = threading.Lock()


def stack_settings(max_tokens: int = 48, overrides: dict | None = None) -> dict[str, Any]:
    """The peer's configuration: our models and the thread budget the benchmark's stack runs
    with (``effective_params``: the YAML defaults, the in-process tuning, ``overrides``)."""
    from bolt_agent.core.models import resolve_model
    from bolt_agent.stack.spec import StackSpec, effective_params

    spec = StackSpec(sim=False, overrides=overrides or {})
    llm, asr, tts = (effective_params(spec, n) for n in ("llm_node", "asr_node", "tts_node"))
    n_threads = int(llm["n_threads"])
    return {
        "llm_model": str(resolve_model(llm.get("model", ""), kind="llm")),
        "asr_model": str(resolve_model(asr.get("model", ""), kind="asr")),
        "tts_model": str(resolve_model(tts.get("model", ""), kind="tts")),
        "n_threads": n_threads,
        "n_threads_batch": int(llm.get("n_threads_batch") or n_threads),
        "n_ctx": int(llm["n_ctx"]),
        "n_batch": int(llm["n_batch"]),
        "n_ubatch": int(llm["n_ubatch"]),
        "asr_cpu_threads": int(asr["cpu_threads"]),
        "tts_cpu_threads": int(tts["cpu_threads"]),
        "max_tokens": max_tokens,
        "chat_format": chat_format_for(resolve_model(llm.get("model", ""), kind="llm")),
    }


def chat_format_for(gguf: Path | str) -> str:
    """The llama_cpp.server ``--chat_format`` for a GGUF: '' (its own template) when it has one;
    llama-cpp-python's ``gemma`` format for a Gemma GGUF without one (the bundled gemma-3-270m):
    the server's fallback is Llama-2's ``[INST]``/``<<SYS>>`` format, which the model answered
    with markup or nothing (4 of 18 turns unheard in a first run)."""
    from bolt_agent.benchmarks.jetson_memory import read_gguf

    meta, _ = read_gguf(gguf)
    if meta.get("tokenizer.chat_template"):
        return ""
    return "gemma" if str(meta.get("general.architecture", "")).startswith("gemma") else ""


# --- the llama.cpp server --------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_llm_server(cfg: dict[str, Any], log) -> tuple[subprocess.Popen, str]:
    """``python -m llama_cpp.server`` on 127.0.0.1 with the stack's LLM settings: (proc, URL)."""
    port = int(cfg.get("llm_port") or _free_port())
    args = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model", cfg["llm_model"],
        "--model_alias", "gemma",
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_threads", str(cfg["n_threads"]),
        "--n_threads_batch", str(cfg["n_threads_batch"]),
        "--n_ctx", str(cfg["n_ctx"]),
        "--n_batch", str(cfg["n_batch"]),
        "--n_ubatch", str(cfg["n_ubatch"]),
        "--verbose", "False",
    ]  # fmt: skip
    if cfg.get("chat_format"):
        args += ["--chat_format", cfg["chat_format"]]
    # in the peer's process group (stopped with it) and gone with the peer however it ends: an
    # interrupted bench once left this server running
    proc = subprocess.Popen(args, stdout=log, stderr=log, preexec_fn=die_with_parent)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama_cpp.server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/models", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("llama_cpp.server did not answer within 120 s")


def stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --- pipecat pieces (imported lazily: only the peer process needs pipecat) ---------------------


def _transport_classes():
    import sounddevice as sd
    from pipecat.frames.frames import InputAudioRawFrame, OutputAudioRawFrame, StartFrame
    from pipecat.processors.frame_processor import FrameProcessorSetup
    from pipecat.transports.base_input import BaseInputTransport
    from pipecat.transports.base_output import BaseOutputTransport
    from pipecat.transports.base_transport import BaseTransport, TransportParams

    from bolt_agent.core.audio.audio_io import find_device

    class SdInput(BaseInputTransport):
        """pipecat's LocalAudioInputTransport on sounddevice (20 ms callback blocks)."""

        def __init__(self, params: TransportParams):
            super().__init__(params)
            self._stream = None
            self.flowing = threading.Event()

        async def setup(self, setup: FrameProcessorSetup):
            await super().setup(setup)
            loop = self.get_event_loop()

            def callback(indata, frames, _time, _status):
                self.flowing.set()
                frame = InputAudioRawFrame(
                    audio=bytes(indata),
                    sample_rate=self._sample_rate,
                    num_channels=self._params.audio_in_channels,
                )
                asyncio.run_coroutine_threadsafe(self.push_audio_frame(frame), loop)

            self._stream = sd.RawInputStream(
                device=find_device("", "input").index,  # 'default', as PyAudio and the stack
                samplerate=self._sample_rate,
                channels=self._params.audio_in_channels,
                dtype="int16",
                blocksize=int(self._sample_rate / 100) * 2,  # 20 ms, as LocalAudioTransport
                latency="low",  # PyAudio opens with the device's default low latency
                callback=callback,
            )

        async def start(self, frame: StartFrame):
            await super().start(frame)
            if self._stream is not None:
                self._stream.start()
                await self.set_transport_ready(frame)

        async def cleanup(self):
            await super().cleanup()
            if self._stream is not None:
                self._stream.stop()
                self._stream.close()
                self._stream = None

    class SdOutput(BaseOutputTransport):
        """pipecat's LocalAudioOutputTransport on sounddevice (blocking writes, one thread)."""

        def __init__(self, params: TransportParams):
            super().__init__(params)
            self._stream = None
            from concurrent.futures import ThreadPoolExecutor

            self._executor = ThreadPoolExecutor(max_workers=1)

        async def setup(self, setup: FrameProcessorSetup):
            await super().setup(setup)
            self._stream = sd.RawOutputStream(
                device=find_device("", "output").index,
                samplerate=self.sample_rate,
                channels=self._params.audio_out_channels,
                dtype="int16",
                latency="low",
            )

        async def start(self, frame: StartFrame):
            await super().start(frame)
            if self._stream is not None:
                self._stream.start()
                await self.set_transport_ready(frame)

        async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
            if self._stream is None:
                return False
            await self.get_event_loop().run_in_executor(
                self._executor, self._stream.write, frame.audio
            )
            return True

        async def cleanup(self):
            try:
                await super().cleanup()
                if self._stream is not None:
                    self._stream.stop()
                    self._stream.close()
                    self._stream = None
            finally:
                self._executor.shutdown(wait=False)

    class SdTransport(BaseTransport):
        def __init__(self, params: TransportParams):
            super().__init__()
            self._params = params
            self._input: SdInput | None = None
            self._output: SdOutput | None = None

        def input(self) -> SdInput:
            if self._input is None:
                self._input = SdInput(self._params)
            return self._input

        def output(self) -> SdOutput:
            if self._output is None:
                self._output = SdOutput(self._params)
            return self._output

    return SdTransport, TransportParams


def _event_observer():
    from pipecat.frames.frames import (
        BotStartedSpeakingFrame,
        BotStoppedSpeakingFrame,
        LLMFullResponseEndFrame,
        LLMFullResponseStartFrame,
        LLMTextFrame,
        TranscriptionFrame,
        TTSAudioRawFrame,
        VADUserStartedSpeakingFrame,
        VADUserStoppedSpeakingFrame,
    )
    from pipecat.observers.base_observer import BaseObserver, FramePushed

    simple = {
        VADUserStartedSpeakingFrame: "vad_start",
        VADUserStoppedSpeakingFrame: "vad_stop",
        LLMFullResponseStartFrame: "llm_start",
        LLMFullResponseEndFrame: "llm_end",
        BotStartedSpeakingFrame: "bot_started",
        BotStoppedSpeakingFrame: "bot_stopped",
    }

    class EventObserver(BaseObserver):
        """Prints each frame of interest once (frames pass several processors; the bot speaking
        frames travel both ways)."""

        def __init__(self):
            super().__init__()
            self._seen: set[int] = set()
            self._first_text = self._first_audio = False

        async def on_push_frame(self, data: FramePushed):
            frame = data.frame
            if frame.id in self._seen:
                return
            kind = type(frame)
            if kind in simple:
                self._seen.add(frame.id)
                name = simple[kind]
                if name == "llm_start":
                    self._first_text = self._first_audio = False
                _emit(name)
            elif isinstance(frame, TranscriptionFrame):
                self._seen.add(frame.id)
                _emit("transcript", text=frame.text)
            elif isinstance(frame, LLMTextFrame) and not self._first_text:
                self._first_text = True
                _emit("llm_first_text", text=frame.text)
            elif isinstance(frame, TTSAudioRawFrame) and not self._first_audio:
                self._first_audio = True
                _emit("tts_first_audio")

    return EventObserver


def _piper_service(cfg: dict[str, Any]):
    import onnxruntime
    from pipecat.services.piper.tts import PiperTTSService

    model = Path(cfg["tts_model"])
    tts = PiperTTSService(
        settings=PiperTTSService.Settings(voice=model.name.removesuffix(".onnx")),
        download_dir=model.parent,  # the file is there: no download
    )
    # the stack's thread budget: Piper's onnxruntime session with cpu_threads intra-op threads
    # (PiperVoice.load takes onnxruntime's default, every core); same graph, same providers
    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads = max(1, int(cfg["tts_cpu_threads"]))
    opts.inter_op_num_threads = 1
    tts._voice.session = onnxruntime.InferenceSession(
        str(model), sess_options=opts, providers=["CPUExecutionProvider"]
    )
    return tts


def _whisper_service(cfg: dict[str, Any]):
    from faster_whisper import WhisperModel
    from pipecat.services.whisper.stt import WhisperSTTService

    class Whisper(WhisperSTTService):
        """pipecat's WhisperSTTService with the stack's ``cpu_threads`` (its _load passes none)."""

        cpu_threads = int(cfg["asr_cpu_threads"])

        def _load(self):
            self._model = WhisperModel(
                str(self._settings.model),
                device=self._device,
                compute_type=self._compute_type,
                cpu_threads=self.cpu_threads,
            )

    return Whisper(settings=WhisperSTTService.Settings(model=cfg["asr_model"]))


async def _serve(cfg: dict[str, Any], server: subprocess.Popen, base_url: str) -> None:
    from pipecat.audio.vad.silero import SileroVADAnalyzer
    from pipecat.frames.frames import EndFrame
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.processors.aggregators.llm_response_universal import (
        LLMContextAggregatorPair,
        LLMUserAggregatorParams,
    )
    from pipecat.services.openai.llm import OpenAILLMService
    from pipecat.workers.runner import WorkerRunner

    transport_cls, params_cls = _transport_classes()
    transport = transport_cls(params_cls(audio_in_enabled=True, audio_out_enabled=True))
    stt = _whisper_service(cfg)
    llm = OpenAILLMService(
        api_key="none",
        base_url=base_url,
        settings=OpenAILLMService.Settings(
            model="gemma", system_instruction=SYSTEM_PROMPT, max_tokens=int(cfg["max_tokens"])
        ),
    )
    tts = _piper_service(cfg)
    context = LLMContext()
    user, assistant = LLMContextAggregatorPair(
        context, user_params=LLMUserAggregatorParams(vad_analyzer=SileroVADAnalyzer())
    )
    pipeline = Pipeline([transport.input(), stt, user, llm, tts, transport.output(), assistant])
    task = PipelineWorker(
        pipeline,
        params=PipelineParams(enable_metrics=True),
        observers=[_event_observer()()],
        idle_timeout_secs=None,  # the benchmark ends it (quit); a slow load is no idle session
    )
    runner = WorkerRunner(handle_sigint=False, handle_sigterm=False)
    loop = asyncio.get_running_loop()

    def stdin_reader() -> None:
        for line in sys.stdin:
            if line.strip() == "quit":
                break
        asyncio.run_coroutine_threadsafe(task.queue_frame(EndFrame()), loop)

    async def announce_ready() -> None:
        # PulseAudio through ALSA delivers nothing for a while after a stream opens: "ready"
        # means the input is flowing (as the stack's AudioInput warm-up)
        inp = transport.input()
        deadline = time.monotonic() + 30
        while not inp.flowing.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        applied = {  # read back from what runs, not from cfg
            "llm_cmdline": Path(f"/proc/{server.pid}/cmdline").read_text().split("\0")[1:-1],
            "asr_model": str(stt._settings.model),
            "asr_cpu_threads": stt.cpu_threads,
            "tts_model": tts._voice.session._model_path,
            "tts_intra_op_threads": tts._voice.session.get_session_options().intra_op_num_threads,
        }
        _emit("ready", flowing=inp.flowing.is_set(), applied=applied, pid=os.getpid())
        threading.Thread(target=stdin_reader, daemon=True).start()

    ready = asyncio.create_task(announce_ready())
    await runner.add_workers(task)
    await runner.run()
    ready.cancel()


def serve(cfg: dict[str, Any]) -> int:
    cfg = {**stack_settings(int(cfg.get("max_tokens", 48))), **cfg}
    server, url = start_llm_server(cfg, sys.stderr)
    try:
        asyncio.run(_serve(cfg, server, url))
    finally:
        stop_process(server)
    return 0


# --- the benchmark loop ----------------------------------------------------------------------


class _Events:
    """The peer's stdout events, read by a thread (``_Proc.read``), kept in order."""

    def __init__(self, proc):
        self.proc = proc
        self.items: list[dict] = []

    def wait(self, pred, timeout: float, start: int = 0) -> dict | None:
        """The first event from index ``start`` on that satisfies ``pred`` (None on timeout)."""
        deadline = time.monotonic() + timeout
        i = start
        while True:
            while i < len(self.items):
                if pred(self.items[i]):
                    return self.items[i]
                i += 1
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                line = self.proc.read(min(left, 1.0))
            except TimeoutError:
                if self.proc.proc.poll() is not None:
                    raise RuntimeError("the pipecat peer exited") from None
                continue
            try:
                self.items.append(json.loads(line))
            except json.JSONDecodeError:
                continue


def run_peer_loop(
    work: Path,
    turns: int,
    log=print,
    max_tokens: int = 48,
    overrides: dict | None = None,
) -> dict:
    """``turns`` acoustic turns against the pipecat peer (same utterances, sinks, recorder and
    analysis as ``voice_loop.run_voice_loop``); voice-to-voice from the recording.

    ``overrides``: the stack's parameter overrides (``bolt-agent bench --set``), so the peer
    keeps the thread budget the stack ran with. Returns ``turns`` (``TurnOutcome``s, ``v2v_s``
    and ``stages_s`` as the stack's), ``voice_to_voice_p50_s``/``_p90_s``, ``settings`` (the
    models, threads, max_tokens and ``peer``: what differs from the stack), ``load_s``, ``run_s``.
    """
    from bolt_agent.benchmarks.voice_loop import (
        TurnOutcome,
        _Proc,
        analyse,
        loop_figures,
        make_utterances,
        read_recording,
        start_bench_pulse,
    )

    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    cfg = stack_settings(max_tokens, overrides)
    utts = make_utterances(work, turns)
    t0 = time.time()
    pulse = start_bench_pulse(work)
    procs: list = []
    outcomes: list[TurnOutcome] = []
    try:
        rec = _Proc(
            ["-m", "bolt_agent.benchmarks.audio_procs", "recorder", str(work / "peer_rec")],
            pulse.env(source="bench_mix.monitor"),
            work / "peer_recorder.log",
        )
        procs.append(rec)
        player = _Proc(
            ["-m", "bolt_agent.benchmarks.audio_procs", "player"],
            pulse.env(sink="user_mouth"),
            work / "peer_player.log",
        )
        procs.append(player)
        peer = _Proc(
            ["-m", "bolt_agent.benchmarks.pipecat_peer", "serve", json.dumps(cfg)],
            pulse.env(sink="robot_speaker", source="user_mouth.monitor"),
            work / "peer.log",
        )
        procs.append(peer)
        rec.read(30), player.read(30)
        log("loading the pipecat peer…")
        events = _Events(peer)
        ready = events.wait(lambda e: e.get("event") == "ready", 240)
        if ready is None:
            raise RuntimeError(f"the pipecat peer did not start (see {work}/peer.log)")
        load_s = time.time() - t0
        with open(work / "peer_turns.jsonl", "w") as saved:
            for i in range(turns):
                outcomes.append(_peer_turn(i, utts[i % len(utts)], player, events, log))
                saved.write(json.dumps(asdict(outcomes[-1]), ensure_ascii=False) + "\n")
                saved.flush()
        rec.send("flush")
        rec.read(10)
    finally:
        for p in reversed(procs):
            p.stop()
        pulse.stop()
    audio, clock = read_recording(work / "peer_rec")
    for o in outcomes:
        analyse(o, utts[o.index % len(utts)], audio, clock)
    v2v = [o.v2v_s for o in outcomes if o.v2v_s is not None]
    return {
        "turns": outcomes,
        "turns_ok": len(v2v),
        # the same figures as the stack's loop (voice-to-voice over the turns not split, …)
        **loop_figures([asdict(o) for o in outcomes]),
        "settings": {**cfg, "peer": PEER_DEFAULTS, "pipecat_version": _pipecat_version()},
        "applied": ready.get("applied", {}),
        "load_s": load_s,
        "run_s": time.time() - t0,
        "recording_s": len(audio) / 16000,
    }


def _pipecat_version() -> str:
    from importlib.metadata import version

    return version("pipecat-ai")


def _peer_turn(i: int, utt, player, events: _Events, log, settle_s: float = 2.0):
    """Play one utterance; wait until the peer has answered and gone quiet; stamp the stages.

    pipecat may answer a turn more than once (each VAD segment of an utterance is transcribed
    on its own; a late transcript starts a new user turn): the turn is over once the bot has
    spoken and then nothing happened for ``settle_s`` with the bot silent, so no answer of
    this turn overlaps the next utterance."""
    from bolt_agent.benchmarks.voice_loop import TurnOutcome

    out = TurnOutcome(i, utt.text, kind=utt.kind)
    start = len(events.items)
    player.send(f"play {utt.path}")
    out.play_wall = float(player.read(10).split()[1])
    player.read(30)

    def mine() -> list[dict]:
        return [e for e in events.items[start:] if e.get("wall", 0) >= out.play_wall]

    first_audio = None
    deadline = time.monotonic() + 60
    while first_audio is None and time.monotonic() < deadline:
        first_audio = events.wait(
            lambda e: e.get("event") == "bot_started" and e.get("wall", 0) >= out.play_wall,
            1.0,
            start,
        )
        evs = mine()
        starts = [e["wall"] for e in evs if e["event"] == "llm_start"]
        ends = [e["wall"] for e in evs if e["event"] == "llm_end"]
        if (  # answered, and nothing came of it: text without audio (empty, markup only)
            first_audio is None
            and starts
            and ends
            and ends[-1] >= starts[-1]
            and time.time() - evs[-1]["wall"] > 2.5 * settle_s
        ):
            out.error = "the peer's answer made no audio"
            break
    else:
        if first_audio is None:
            out.error = "the peer said nothing within 60 s"
    deadline = time.monotonic() + 120
    while first_audio is not None and time.monotonic() < deadline:
        seen = len(events.items)
        events.wait(lambda _e: True, settle_s, seen)  # any event within settle_s?
        bot = [e["event"] for e in mine() if e.get("event") in ("bot_started", "bot_stopped")]
        if len(events.items) == seen and bot[-1] == "bot_stopped":
            break
    else:
        if first_audio is not None:
            out.error = "the peer did not go quiet within 120 s"
    _stamp(out, mine(), first_audio)
    log(f"turn {i}: “{out.transcript}” → “{out.first_sentence.strip()[:80]}”")
    time.sleep(0.5)
    return out


def _stamp(out, evs: list[dict], first_audio: dict | None) -> None:
    """The stages of the answer that made the first robot audio, traced back from it, under the
    stack's stage names (``voice_loop.STAGES``, which ``analyse`` splits the latency on):
    vad_end (the VAD stop before the transcript), asr_final (the transcript the LLM ran on),
    llm_first_token, first_audio (the first audio frame the output transport wrote); plus the
    peer's own llm_start (the turn analyzer ended the user's turn) and tts_first_audio."""

    def last(name: str, before: float) -> dict | None:
        return next((e for e in reversed(evs) if e["event"] == name and e["wall"] <= before), None)

    def first(name: str, after: float) -> dict | None:
        return next((e for e in evs if e["event"] == name and e["wall"] >= after), None)

    texts = [e.get("text", "") for e in evs if e["event"] == "transcript"]
    out.transcript = " ".join(t.strip() for t in texts)
    # the peer's user-turn ends: the user aggregator handed the context to the LLM (pipecat
    # transcribes each VAD segment on its own, so its transcripts are not turn ends; the
    # smart-turn analyzer decides). The text: the transcripts up to that moment.
    out.finals = [
        (
            "",
            " ".join(
                e.get("text", "").strip()
                for e in evs
                if e["event"] == "transcript" and e["wall"] <= llm["wall"]
            ),
            llm["wall"],
        )
        for llm in evs
        if llm["event"] == "llm_start"
    ]
    if first_audio is None:
        return
    t_audio = first_audio["wall"]
    out.stamps["first_audio"] = t_audio
    llm = last("llm_start", t_audio)
    if llm is None:
        return
    out.stamps["llm_start"] = llm["wall"]
    for name, stage in (
        ("llm_first_text", "llm_first_token"),
        ("tts_first_audio", "tts_first_audio"),
    ):
        if (e := first(name, llm["wall"])) is not None and e["wall"] <= t_audio:
            out.stamps[stage] = e["wall"]
            if name == "llm_first_text":
                out.first_sentence = e.get("text", "")
    if (asr := last("transcript", llm["wall"])) is not None:
        out.stamps["asr_final"] = asr["wall"]
        if (vad := last("vad_stop", asr["wall"])) is not None:
            out.vad_end_wall = vad["wall"]


def main(argv: list[str]) -> int:
    if argv and argv[0] == "serve":
        return serve(json.loads(argv[1]) if len(argv) > 1 else {})
    if argv and argv[0] == "loop":  # python -m … loop WORK_DIR TURNS: a standalone peer run
        import tempfile

        work = Path(argv[1]) if len(argv) > 1 else Path(tempfile.mkdtemp(prefix="pipecat-peer-"))
        res = run_peer_loop(work, int(argv[2]) if len(argv) > 2 else 6)
        res["turns"] = [asdict(t) for t in res["turns"]]
        (work / "peer_result.json").write_text(json.dumps(res, indent=1, ensure_ascii=False))
        print(json.dumps({k: v for k, v in res.items() if k != "turns"}, indent=1))
        print(f"wrote {work / 'peer_result.json'}")
        return 0 if res["turns_ok"] else 1
    print(
        "usage: python -m bolt_agent.benchmarks.pipecat_peer serve '<json cfg>' | loop [WORK] [N]",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

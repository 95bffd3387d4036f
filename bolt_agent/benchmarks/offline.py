"""Benchmarks without ROS, run in a process of their own (no rclpy is imported here).

    python -m bolt_agent.benchmarks.offline IN.json OUT.json

- ``raw``: the voice pipeline on the raw libraries, one process, sequential, same utterance WAVs
  and the stack's own voice settings (``cfg["voice"]``: threads, knobs, encoder window, first
  clause): Silero VAD offline + the min_silence wait, faster-whisper, llama-cpp-python with the
  same prompt/grammar/thinking up to the first sentence, Piper's first chunk.
- ``llm``: our engine (``LlamaEngine``/``LlamaSession``, what llm_node runs) vs raw
  ``Llama.create_completion`` (same prompt, greedy): TTFT and tok/s; TTFT with 4K tokens of
  history vs none (prefix reuse); output tokens per knob setting (``TurnRunner``).
- ``speech``: ASR/TTS real-time factors and TTS time to first audio (``speech_bench``).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import wave
from pathlib import Path
from typing import Any

import numpy as np

from bolt_agent.core.asr.asr_engine import encoder_frames
from bolt_agent.core.llm.chat_template import Knobs
from bolt_agent.core.llm.markers import THINK_CLOSE, THINK_OPEN
from bolt_agent.core.models import resolve_model

RATE = 16000
PROMPT = "Tell me a short story about a small robot who learns to dance in the kitchen."


def _wav(path: str) -> np.ndarray:
    with wave.open(path, "rb") as w:
        return np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768


def _profile(name: str):
    from bolt_agent.core.llm.profile import load_profile

    return load_profile(name)


def windowed_whisper_model(whisper_model: Any) -> Any:
    """faster-whisper's ``WhisperModel`` whose encoder sees only ``encoder_frames`` of the padded
    input: the raw library with the encoder window of the stack's ``WhisperEngine``."""

    class WindowedWhisperModel(whisper_model):
        encoder_frames: int | None = None

        def encode(self, features: np.ndarray):
            n = self.encoder_frames
            if n is not None and features.shape[-1] > n:
                features = np.ascontiguousarray(features[..., :n])
            return super().encode(features)

    return WindowedWhisperModel


def library_transcribe(
    model: Any,
    audio: np.ndarray,
    window_s: float,
    beam_size: int = 1,
    no_speech_threshold: float = 0.6,
    log_prob_threshold: float = -1.0,
) -> list[Any]:
    """faster-whisper's own ``transcribe`` of one utterance as asr_node runs whisper (English,
    greedy then the temperature fallback, no timestamps, no VAD, the encoder window) on a
    ``windowed_whisper_model``: the reference that benchmarks and tests compare with."""
    model.encoder_frames = encoder_frames(window_s, audio.size)
    segments, _ = model.transcribe(
        audio,
        language="en",
        beam_size=beam_size,
        temperature=[0.0, 0.2, 0.4],
        condition_on_previous_text=False,
        without_timestamps=True,
        vad_filter=False,
        no_speech_threshold=no_speech_threshold,
        log_prob_threshold=log_prob_threshold,
    )
    return list(segments)


def raw_pipeline(cfg: dict) -> dict:
    """Per utterance: detection wait + VAD + ASR + LLM to first sentence + TTS first chunk."""
    from faster_whisper import WhisperModel
    from faster_whisper.vad import VadOptions, get_speech_timestamps
    from llama_cpp import Llama, LlamaGrammar
    from piper import PiperVoice

    from bolt_agent.core.llm.dialogue import Dialogue, Step
    from bolt_agent.core.llm.tool_grammar import build_grammar
    from bolt_agent.core.tts.sentences import SentenceSplitter

    voice = cfg.get("voice", {})
    llm_p, asr_p = voice.get("llm_node", {}), voice.get("asr_node", {})
    prof = _profile(llm_p.get("profile", cfg.get("profile", "reachy_mini")))
    # the library's own whisper, its encoder cut to the stack's window as WhisperEngine cuts it
    asr = windowed_whisper_model(WhisperModel)(
        str(resolve_model("", kind="asr")),
        device="cpu",
        compute_type="int8",
        cpu_threads=asr_p.get("cpu_threads", 1),
    )
    window_s = float(asr_p.get("encoder_window_s", 30.0))
    llm = Llama(
        model_path=str(resolve_model("", kind="llm")),
        n_ctx=4096,
        n_threads=llm_p.get("n_threads", 2),
        n_threads_batch=llm_p.get("n_threads_batch") or llm_p.get("n_threads", 2),
        n_batch=256,
        verbose=False,
    )
    tts = PiperVoice.load(str(resolve_model("", kind="tts")))
    from bolt_agent.core.llm.chat_template import ChatTemplate

    bos = llm.detokenize([llm.token_bos()], special=True).decode()
    template = ChatTemplate.bundled(bos_token=bos)
    grammar = LlamaGrammar.from_string(build_grammar(prof.registry, "auto", 160, 1), verbose=False)
    budget = llm_p.get("thinking_token_budget", -1)
    knobs = Knobs(  # the stack's voice knobs
        bool(llm_p.get("enable_thinking", True)),
        budget if budget >= 0 else None,
        bool(llm_p.get("conversational_mode", False)),
    )
    thinking_tokens = (budget if budget >= 0 else 128) if knobs.enable_thinking else 0
    clause = int(llm_p.get("first_clause_chars", 0))
    dialogue = Dialogue(prof.persona)
    sampling = {"temperature": 1.0, "top_k": 64, "top_p": 0.95}
    min_silence = int(asr_p.get("min_silence_ms", 500)) / 1000

    def toks(text: str) -> list[int]:  # the template already starts with <bos>
        return llm.tokenize(text.encode(), add_bos=False, special=True)

    turns = []
    for path in cfg["wavs"]:
        audio = _wav(path)
        t0 = time.perf_counter()
        stamps = get_speech_timestamps(
            audio,
            VadOptions(
                min_silence_duration_ms=int(min_silence * 1000),
                speech_pad_ms=int(asr_p.get("speech_pad_ms", 80)),
            ),
        )
        seg = audio[stamps[0]["start"] : stamps[-1]["end"]] if stamps else audio
        t_vad = time.perf_counter() - t0
        text = " ".join(s.text.strip() for s in library_transcribe(asr, seg, window_s))
        t_asr = time.perf_counter() - t0 - t_vad
        turn = dialogue.begin_turn(f"r{len(turns)}", text)
        prompt = template.render(dialogue.messages(), prof.registry.as_openai(), knobs)
        t1 = time.perf_counter()
        ttft = None
        prompt2 = prompt
        if thinking_tokens:
            thought = ""
            for chunk in llm.create_completion(
                toks(prompt + THINK_OPEN), max_tokens=thinking_tokens, stream=True, **sampling
            ):
                ttft = ttft if ttft is not None else time.perf_counter() - t1
                thought += chunk["choices"][0]["text"]
            close = THINK_CLOSE
            prompt2 = prompt + THINK_OPEN + thought.split(close)[0] + close
        answer, first, splitter = "", "", SentenceSplitter(clause)
        for chunk in llm.create_completion(
            toks(prompt2), max_tokens=96, stream=True, grammar=grammar, **sampling
        ):
            ttft = ttft if ttft is not None else time.perf_counter() - t1
            piece = chunk["choices"][0]["text"]
            answer += piece
            done = splitter.push(piece) or (["<"] if "<" in piece else [])
            if done:
                first = done[0] if done[0] != "<" else answer.split("<")[0].strip()
                break
        first = first or answer.split("<")[0].strip() or "Okay."
        t_llm = time.perf_counter() - t1
        t2 = time.perf_counter()
        if next(iter(tts.synthesize(first)), None) is None:  # nothing speakable: say a word
            next(iter(tts.synthesize("Okay.")))
        t_tts = time.perf_counter() - t2
        turn.steps.append(Step(content=first))
        total = min_silence + t_vad + t_asr + t_llm + t_tts
        turns.append(
            {
                "text": text,
                "first_sentence": first,
                "vad_s": t_vad,
                "asr_s": t_asr,
                "llm_ttft_s": ttft,
                "llm_first_sentence_s": t_llm,
                "tts_first_s": t_tts,
                "eos_to_first_audio_s": total,
            }
        )
    return {
        "turns": turns,
        "min_silence_s": min_silence,
        "median_eos_to_first_audio_s": statistics.median(t["eos_to_first_audio_s"] for t in turns),
    }


def llm_bench(cfg: dict) -> dict:
    from llama_cpp import Llama

    from bolt_agent.core.llm.llama.engine import LlamaConfig, LlamaEngine
    from bolt_agent.core.llm.types import SamplingParams

    model = str(resolve_model("", kind="llm"))
    n_tok, runs = cfg.get("llm_tokens", 64), cfg.get("llm_runs", 3)
    greedy = SamplingParams(temperature=0.0)
    out: dict = {"tokens": n_tok, "runs": runs, "prompt": PROMPT, "sampling": "greedy"}
    engine = LlamaEngine(LlamaConfig(model, n_ctx=8192, n_threads=2)).load()
    knobs = Knobs(False, None, False)
    prompt = engine.chat_template.render([{"role": "user", "content": PROMPT}], None, knobs)

    def ours(eng=engine) -> tuple[float, float]:
        eng.llm.reset()  # no cached prefix: both sides prefill the whole prompt
        t0 = time.perf_counter()
        session = eng.start(prompt)
        session.sample(greedy)
        ttft = time.perf_counter() - t0
        t1 = time.perf_counter()
        for _ in range(n_tok - 1):
            if session.sample(greedy).is_eog:
                break
        return ttft, (session.stats.generated - 1) / (time.perf_counter() - t1)

    raw = Llama(
        model_path=model, n_ctx=8192, n_threads=2, n_threads_batch=2, n_batch=256, verbose=False
    )
    tokens = raw.tokenize(prompt.encode(), add_bos=False, special=True)

    def raw_run() -> tuple[float, float]:
        raw.reset()
        t0, first, n = time.perf_counter(), 0.0, 0
        for _chunk in raw.create_completion(tokens, max_tokens=n_tok, temperature=0.0, stream=True):
            n += 1
            if n == 1:
                first = time.perf_counter()
        end = time.perf_counter()
        return first - t0, (n - 1) / (end - first) if n > 1 else 0.0

    ours(), raw_run()  # warm-up (page cache, threads)
    o_runs, r_runs = [], []
    for k in range(runs):  # interleaved, alternating order: same conditions on average
        if k % 2:
            r_runs.append(raw_run()), o_runs.append(ours())
        else:
            o_runs.append(ours()), r_runs.append(raw_run())
    med = statistics.median
    out["node_engine"] = {"ttft_s": med(r[0] for r in o_runs), "tok_s": med(r[1] for r in o_runs)}
    out["raw"] = {"ttft_s": med(r[0] for r in r_runs), "tok_s": med(r[1] for r in r_runs)}
    out["tok_s_ratio"] = out["node_engine"]["tok_s"] / out["raw"]["tok_s"]
    out["ttft_ratio"] = out["node_engine"]["ttft_s"] / out["raw"]["ttft_s"]
    raw.close()
    print(f"llm: node/raw tok/s {out['tok_s_ratio']:.2f}", file=sys.stderr, flush=True)
    if not cfg.get("quick"):
        out["contention"] = contention(engine, ours, cfg)
    out["prefix_reuse"] = prefix_reuse(engine, cfg.get("history_tokens", 4000))
    print(f"llm: prefix reuse {out['prefix_reuse']['ratio']:.2f}", file=sys.stderr, flush=True)
    if not cfg.get("quick"):
        out["knobs"] = knob_tokens(engine, cfg)
    engine.close()
    if not cfg.get("quick"):  # the same with a full-size sliding-window cache (n_ctx cells)
        full = LlamaEngine(LlamaConfig(model, n_ctx=8192, n_threads=2, swa_full=True)).load()
        out["prefix_reuse_swa_full"] = prefix_reuse(full, cfg.get("history_tokens", 4000))
        full.close()
    return out


def contention(engine, ours, cfg: dict) -> dict:
    """Decode tok/s with 2 vs 1 llama.cpp threads, alone and next to one busy process (what the
    ASR or TTS thread does to the LLM on 2 cores)."""
    import subprocess

    res = {}
    for label, busy in (("alone", False), ("one_core_busy", True)):
        hog = None
        if busy:
            hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            for threads in (2, 1):
                _set_threads(engine.llm, threads)
                res[f"{label}_threads{threads}_tok_s"] = statistics.median(
                    ours()[1] for _ in range(1 if cfg.get("quick") else 2)
                )
        finally:
            if hog is not None:
                hog.kill()
                hog.wait()
    _set_threads(engine.llm, 2)
    return res


def _set_threads(llm, n: int) -> None:
    from llama_cpp import llama_cpp as capi

    capi.llama_set_n_threads(llm._ctx.ctx, n, n)


QUESTIONS = (
    "What time is it?",
    "Where is the cup?",
    "Can you dance?",
    "Is the door open?",
    "What colour is the sky?",
    "Do you like music?",
    "Who made you?",
)


def prefix_reuse(engine, history_tokens: int, rounds: int = len(QUESTIONS)) -> dict:
    """TTFT of a new user turn after ~history_tokens of cached history vs with no history
    (both with the system prompt and the history already in the KV cache, as in a conversation).

    Two engines with the same configuration hold the two conversations, and their questions are
    interleaved (empty, history, empty, …) so that load changes on a shared machine hit both."""
    from bolt_agent.core.llm.llama.engine import LlamaEngine
    from bolt_agent.core.llm.types import SamplingParams

    greedy, knobs, tpl = (
        SamplingParams(temperature=0.0),
        Knobs(False, None, False),
        engine.chat_template,
    )
    system = {"role": "system", "content": "You are a helpful robot."}
    filler = " ".join(f"The robot counted item number {i} on the kitchen shelf." for i in range(40))
    history: list[dict] = []
    while engine.count_tokens(tpl.render([system, *history], None, knobs)) < history_tokens:
        history += [{"role": "user", "content": filler}, {"role": "assistant", "content": "Noted."}]

    def ttft(eng, messages: list[dict]) -> tuple[float, int, int]:
        t0 = time.perf_counter()
        s = eng.start(tpl.render(messages, None, knobs))
        s.sample(greedy)
        return time.perf_counter() - t0, s.stats.prompt_tokens, s.stats.reused_tokens

    other = LlamaEngine(engine.config).load()
    try:
        engines = {"empty": (other, []), "history": (engine, history)}
        cold, warm = {}, {name: [] for name in engines}
        for name, (eng, hist) in engines.items():
            eng.llm.reset()
            cold[name] = ttft(eng, [system, *hist, {"role": "user", "content": "Warm-up?"}])
        for q in QUESTIONS[:rounds]:
            for name, (eng, hist) in engines.items():
                warm[name].append(ttft(eng, [system, *hist, {"role": "user", "content": q}]))
    finally:
        other.close()
    res: dict = {"rounds": rounds}
    for name in engines:
        res[name] = {
            "ttft_s": statistics.median(w[0] for w in warm[name]),
            "ttft_runs_s": [w[0] for w in warm[name]],
            "prompt_tokens": warm[name][0][1],
            "reused_tokens": warm[name][0][2],
            "cold_ttft_s": cold[name][0],
        }
    res["ratio"] = res["history"]["ttft_s"] / res["empty"]["ttft_s"]
    return res


def knob_tokens(engine, cfg: dict) -> dict:
    """Output tokens per knob setting through TurnRunner (the node's turn logic), stack sampling."""
    from bolt_agent.core.llm.dialogue import Dialogue
    from bolt_agent.core.llm.turn_runner import RunnerConfig, TurnRequest, TurnRunner
    from bolt_agent.core.llm.types import SamplingParams

    prof = _profile(cfg.get("profile", "reachy_mini"))

    class Sink:
        def __getattr__(self, _name):
            return lambda *a, **k: None

        def dispatch(self, *_a):
            from concurrent.futures import Future

            from bolt_agent.core.llm.turn_runner import ToolResult

            f: Future = Future()
            f.set_result(ToolResult(True, "done"))
            return f

    settings = {
        "conv_on_think_off": Knobs(False, None, True),
        "conv_off_think_off": Knobs(False, None, False),
        "conv_on_think_on": Knobs(True, None, True),
        "conv_on_think_budget24": Knobs(True, 24, True),
        "conv_off_think_on": Knobs(True, None, False),
    }
    out = {}
    questions = ("Hello! What is your name?",)
    for name, knobs in settings.items():
        rows = []
        for seed, q in enumerate(questions * cfg.get("knob_runs", 1)):
            runner = TurnRunner(
                engine,
                Dialogue(prof.persona),
                prof.registry,
                RunnerConfig(
                    sampling=SamplingParams(seed=seed),
                    constrained=True,
                    max_steps=1,
                    max_new_tokens=64,
                    max_thinking_tokens=128,
                ),
            )
            t0 = time.perf_counter()
            r = runner.run(TurnRequest(f"k{seed}", q, knobs), Sink())
            rows.append((r.completion_tokens, r.thinking_tokens, time.perf_counter() - t0))
        out[name] = {
            "completion_tokens": statistics.mean(x[0] for x in rows),
            "thinking_tokens": statistics.mean(x[1] for x in rows),
            "turn_s": statistics.mean(x[2] for x in rows),
        }
    return out


def speech(cfg: dict) -> dict:
    """ASR/TTS figures from ``benchmarks.speech_bench`` (imported, not copied), plus TTS RTF."""
    from bolt_agent.benchmarks import speech_bench as sb
    from bolt_agent.core.tts.tts_engine import PiperEngine

    runs = cfg.get("speech_runs", 2)
    tts = PiperEngine(resolve_model("", kind="tts"), cpu_threads=1)
    tts.load()
    audio, truth = sb.make_audio(tts)
    asr = sb.bench_asr(audio, truth, 1, runs)
    tts_r = sb.bench_tts(1, runs)
    t0 = time.perf_counter()
    chunks = list(tts.synthesize(sb.TTS_TEXT))
    synth = time.perf_counter() - t0
    dur = sum(len(c.audio) for c in chunks) / tts.sample_rate
    return {"asr": asr, "tts": tts_r, "tts_rtf": synth / dur, "threads": 1, "runs": runs}


def main(argv: list[str]) -> int:
    cfg = json.loads(Path(argv[0]).read_text())
    out = {}
    for part in cfg.get("parts", ("raw", "llm", "speech")):
        t0 = time.perf_counter()
        out[part] = {"raw": raw_pipeline, "llm": llm_bench, "speech": speech}[part](cfg)
        out[part]["bench_s"] = time.perf_counter() - t0
        print(f"{part} done in {out[part]['bench_s']:.0f}s", file=sys.stderr, flush=True)
    Path(argv[1]).write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

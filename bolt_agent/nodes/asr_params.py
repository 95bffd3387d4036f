"""asr_node's parameters: one frozen dataclass, each field declared once with its description
(``param``); ``config/params/asr_node.yaml`` mirrors the defaults. The settings the ASR stage's
core objects take are derived here, so the node only wires them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bolt_agent.core.asr.asr_engine import WhisperEngine
from bolt_agent.core.asr.barge_in import DEFAULT_BACKCHANNELS, DEFAULT_STOP_WORDS, BargeInSettings
from bolt_agent.core.asr.end_of_turn import EndOfTurnSettings
from bolt_agent.core.asr.listener import ListenerSettings
from bolt_agent.core.asr.vad_segmenter import VadConfig
from bolt_agent.core.models import resolve_model
from bolt_agent.nodes.params import param

BACKLOG_S = 0.5  # queued audio above which partials are skipped to catch up


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
        "finals) to save whisper time; a transcript that repeats itself, runs away or reads "
        "as silence is redone with encoder_window_s (0 = off)",
        load_time=True,
        low=0.0,
        high=30.0,
    )
    early_final: bool = param(
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
        "(shorter blocks reach it sooner: docs/speech.md)",
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
        "the words of the early transcript: end_of_turn_silence_ms when they are "
        "complete, end_of_turn_max_silence_ms when not; the hint comes from llm/end_of_turn, "
        "else the text decides)",
        load_time=True,
        choices=("fixed", "semantic"),
    )
    end_of_turn_silence_ms: int = param(
        250, "semantic: silence in ms that ends a turn whose words are complete", low=0, high=60000
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
    end_of_turn_trust_confidence: float = param(
        0.0,
        "semantic: an early transcript less confident than this (whisper's mean token "
        "probability) may be misheard: a complete judgement waits "
        "end_of_turn_likely_silence_ms at least, and the text alone never ends the turn "
        "(0 = off)",
        low=0.0,
        high=1.0,
    )
    end_of_turn_last_word_confidence: float = param(
        0.4,
        "semantic: an early greedy transcript whose last word is less sure than this ends no "
        "turn by its words; end_of_turn_max_silence_ms does (0 = off)",
        low=0.0,
        high=1.0,
    )
    speech_pad_ms: int = param(
        48,
        "audio in ms kept after the end of speech; the early transcript waits for it (a "
        "shorter pad is sooner but cuts last words: benchmarks/pad_accuracy.py)",
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
        1.0, "seconds of speech between partial transcripts (0 = no partials)", low=0.0, high=600.0
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
        "echo_tail_ms after), 'barge_in' (only louder, longer speech counts, flagged "
        "barge_in) or 'aec' (the robot's voice cancelled against audio/output, then "
        "interruptions told from backchannels by their words); a bare YAML off (read as "
        "false) means 'off'",
        choices=("off", "gate", "barge_in", "aec"),
        dynamic_typing=True,
        normalize=_echo_mode,
    )
    barge_in_threshold: float = param(
        0.8, "VAD probability needed while the robot speaks (barge_in)", low=0.0, high=1.0
    )
    barge_in_min_ms: int = param(
        300, "speech in ms needed while the robot speaks (barge_in)", low=0, high=60000
    )
    aec_canceller: str = param(
        "speex",
        "aec: 'speex' cancels the echo here against audio/output (SpeexDSP's MDF filter; the "
        "TTS must publish audio/output: audio_sink topic), 'external' takes the input as "
        "already cancelled (PulseAudio's module-echo-cancel, a microphone array's own "
        "canceller) and only tells interruptions from backchannels",
        load_time=True,
        choices=("speex", "external"),
    )
    aec_filter_ms: int = param(
        200,
        "aec: the longest echo path the canceller models in ms (the room's delay and tail, "
        "plus the output and input latency when the reference is not stamped at the speaker)",
        load_time=True,
        low=10,
        high=2000,
    )
    aec_reference_wait_ms: float = param(
        300.0,
        "aec, while the robot speaks: how long after its end a microphone block may wait for "
        "what the robot played over the same span to come on audio/output (then it is "
        "cancelled against what has come, and counted in aec_late_references)",
        low=0.0,
        high=5000.0,
    )
    aec_threshold: float = param(
        0.6, "VAD probability needed while the robot speaks (aec)", low=0.0, high=1.0
    )
    aec_min_ms: int = param(
        150, "speech in ms needed while the robot speaks (aec)", low=0, high=60000
    )
    aec_residual_db: float = param(
        -40.0, "aec: cancelled audio under this dBFS is the canceller's residue", low=-120, high=0
    )
    barge_in_probe_ms: int = param(
        250, "aec: ms of voice per quick transcript (0: early/final only)", low=0, high=10000
    )
    backchannel_words: tuple[str, ...] = param(
        DEFAULT_BACKCHANNELS,
        "aec: words and phrases that never stop the robot ('uh-huh', 'i see'); an utterance "
        "of only these is published with backchannel=true",
    )
    stop_words: tuple[str, ...] = param(
        DEFAULT_STOP_WORDS, "aec: words that stop the robot at once ('wait')"
    )
    interrupt_after_ms: int = param(
        1500, "aec: voice in ms over the robot that stops it whatever its words", low=1, high=60000
    )
    interrupt_words: int = param(
        3, "aec: this many words that are not backchannels stop the robot", low=1, high=100
    )
    interrupt_confidence: float = param(
        0.45,
        "aec: words whisper heard with less confidence (0..1) do not count towards "
        "interrupt_words, and a quick transcript's stop word must be heard twice",
        low=0.0,
        high=1.0,
    )
    echo_tail_ms: int = param(
        300,
        "gate: keep ignoring the mic this long in ms after the robot stops; aec: an "
        "utterance starting this long after it stopped is still judged as a barge-in",
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

    def listener_settings(self) -> ListenerSettings:
        """The Listener's settings: the semantic end of turn's silences are kept in order
        (complete <= likely <= max) and the likely threshold at most the threshold."""
        complete = min(self.end_of_turn_silence_ms, self.end_of_turn_max_silence_ms)
        return ListenerSettings(
            echo_mode=self.echo_mode,
            barge_in_threshold=self.barge_in_threshold,
            barge_in_min_ms=self.barge_in_min_ms,
            aec_threshold=self.aec_threshold,
            aec_min_ms=self.aec_min_ms,
            aec_residual_db=self.aec_residual_db,
            barge_in_probe_ms=self.barge_in_probe_ms,
            judge=BargeInSettings(
                backchannels=self.backchannel_words,
                stop_words=self.stop_words,
                interrupt_after_ms=self.interrupt_after_ms,
                interrupt_words=self.interrupt_words,
                interrupt_confidence=self.interrupt_confidence,
            ),
            echo_tail_ms=self.echo_tail_ms,
            partial_interval_s=self.partial_interval_s,
            early_final=self.early_final,
            backlog_s=BACKLOG_S,
            end_of_turn=EndOfTurnSettings(
                self.end_of_turn,
                complete_silence_ms=complete,
                incomplete_silence_ms=self.end_of_turn_max_silence_ms,
                threshold=self.end_of_turn_threshold,
                hint_timeout_ms=self.end_of_turn_hint_timeout_ms,
                trust_confidence=self.end_of_turn_trust_confidence,
                last_word_confidence=self.end_of_turn_last_word_confidence,
                likely_threshold=min(self.end_of_turn_likely_threshold, self.end_of_turn_threshold),
                likely_silence_ms=min(
                    max(self.end_of_turn_likely_silence_ms, complete),
                    self.end_of_turn_max_silence_ms,
                ),
            ),
        )

    def vad_config(self) -> VadConfig:
        """The VAD segmenter's settings. Semantic end of turn: the VAD's silence is only the
        longest wait (the words end turns earlier)."""
        semantic = self.end_of_turn == "semantic"
        return VadConfig(
            threshold=self.vad_threshold,
            min_silence_ms=self.end_of_turn_max_silence_ms if semantic else self.min_silence_ms,
            speech_pad_ms=self.speech_pad_ms,
            start_pad_ms=self.start_pad_ms,
            min_speech_ms=self.min_speech_ms,
            max_speech_s=self.max_speech_s,
        )

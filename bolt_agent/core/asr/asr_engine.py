"""Speech recognition behind a small interface: 16 kHz float32 audio → text with confidence.

``WhisperEngine`` runs a CTranslate2 whisper model (core/asr/whisper_ct2: faster-whisper's
numbers without importing faster-whisper): int8 on CPU, float16 on CUDA unless a compute type
is given. Whisper pads every input to 30 s and the encoder's cost grows faster than linearly
with its input; ``encoder_window_s`` gives the encoder only the first N seconds of that
padding (at least the audio + 1 s), as whisper.cpp's ``audio_ctx`` does: on whisper-base int8,
2 threads, a 2 s utterance took 0.73 s with 30 s and 0.25 s with a 10 s window, same text on 12
test lines (shorter windows made the decoder repeat itself). Texts that whisper itself marks
as no speech, or that are empty, are dropped, so silence and noise give ``None`` instead of a
hallucinated sentence.
"""

from __future__ import annotations

import math
import re
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bolt_agent.core.asr.whisper_ct2 import (
    HOP,
    MAX_FRAMES,
    MAX_LENGTH,
    SAMPLE_RATE,
    Decoded,
    WhisperVocab,
    compression_ratio,
    decode_with_fallback,
    degenerate,
    encoder_input,
    log_mel,
    mel_filters,
    repeated_sentence,
)

_WORDLESS = re.compile(r"^[\W_]*$")
_LETTERS = re.compile(r"[^\W_]")
#: the first window's padding after the audio, at least (with less, whisper-base repeats itself)
FIRST_WINDOW_MARGIN_S = 2.0
#: the first window's decoding stops at this many tokens per second of audio (+ 8): speech
#: gives 3-5 (whisper's tokens), a runaway repetition is cut short and redone
FIRST_WINDOW_TOKENS_PER_S = 8.0
#: any decoding stops at this many tokens per second of audio (+ 8): a loop is cut short
MAX_TOKENS_PER_S = 8.0


def _token_budget(tokens_per_s: float, samples: int) -> int:
    """The most tokens a decoding of ``samples`` of 16 kHz audio may give (+ 8)."""
    return int(tokens_per_s * samples / SAMPLE_RATE) + 8


def _max_length(max_tokens: int, prompt: list[int]) -> int:
    """CTranslate2's ``max_length`` for a budget of ``max_tokens``: it counts the prompt and
    more (seen giving half of it), so the budget itself is checked on the tokens given."""
    return min(MAX_LENGTH, 2 * (max_tokens + len(prompt) + 1))


@dataclass(frozen=True)
class AsrResult:
    text: str
    confidence: float  # 0..1, exp(mean token log-probability)
    language: str
    no_speech_prob: float
    #: 0..1, the least sure token of the last word (1: not known, e.g. a beam search). A
    #: misheard last word ("and then" heard as "and earn.", 0.27) can make a fragment look
    #: finished while the mean over the other words stays high
    last_word_confidence: float = 1.0


class AsrEngine(ABC):
    @abstractmethod
    def load(self) -> None: ...

    @abstractmethod
    def transcribe(self, audio: np.ndarray, final: bool = True) -> AsrResult | None:
        """Text of ``audio`` (16 kHz mono float32), or None when it holds no speech.
        ``final=False`` asks for a cheap partial (greedy, no temperature fallback)."""

    def warm_up(self) -> float:
        """Pay the model's one-time costs before the first utterance; seconds it took."""
        return 0.0

    def close(self) -> None:  # noqa: B027 - optional hook
        """Free the model."""


def _tokens_of(sentence: str, tokens: list[int], decode: Any) -> int:
    """How many of ``tokens`` spell ``sentence`` (the first of a loop's copies); the share of
    its characters when no prefix decodes to it exactly."""
    for k in range(1, len(tokens) + 1):
        if decode(tokens[:k]).strip() == sentence:
            return k
    text = decode(tokens).strip()
    return max(1, round(len(tokens) * len(sentence) / max(1, len(text))))


def last_word_probability(decoded: Any, decode: Any) -> float:
    """The least probable token of ``decoded``'s last word (trailing punctuation skipped); 1.0
    when the decoding kept no token probabilities. ``decode``: token ids → text."""
    probs = getattr(decoded, "token_probs", ())
    tokens = list(decoded.tokens)[: len(probs)]
    if not probs or not tokens:
        return 1.0
    word: list[float] = []
    for token, prob in zip(reversed(tokens), reversed(probs), strict=True):
        piece = decode([token])
        if not _LETTERS.search(piece):
            if word:
                break  # punctuation before the word ("Hello, there")
            continue  # ".", "?", "..." after it
        word.append(prob)
        if piece.startswith(" "):
            break  # the word's first token
    return min(word) if word else 1.0


def is_kept(seg: Any, no_speech_threshold: float, log_prob_threshold: float) -> bool:
    """A segment with words that whisper does not judge silence (``combine_segments``)."""
    text = seg.text.strip()
    if not text or _WORDLESS.match(text):
        return False
    silent = seg.no_speech_prob > no_speech_threshold and seg.avg_logprob < log_prob_threshold
    return not (silent or seg.no_speech_prob > (1.0 + no_speech_threshold) / 2)


def combine_segments(
    segments: list[Any], no_speech_threshold: float, log_prob_threshold: float
) -> tuple[str, float, float] | None:
    """(text, confidence, max no_speech_prob) of the kept segments, or None if none is kept.

    A segment is dropped when its text is empty/wordless, or when whisper judges it silence:
    ``no_speech_prob`` above the threshold while its mean log-probability is low (whisper's rule),
    or ``no_speech_prob`` above (1 + threshold) / 2 whatever the log-probability.
    """
    kept, logprob_sum, tokens, no_speech = [], 0.0, 0, 0.0
    for seg in segments:
        if not is_kept(seg, no_speech_threshold, log_prob_threshold):
            continue
        text = seg.text.strip()
        n = max(1, len(seg.tokens))
        kept.append(text)
        logprob_sum += seg.avg_logprob * n
        tokens += n
        no_speech = max(no_speech, seg.no_speech_prob)
    if not kept:
        return None
    confidence = math.exp(logprob_sum / tokens) if tokens else 0.0
    return " ".join(kept), min(1.0, max(0.0, confidence)), no_speech


class WhisperEngine(AsrEngine):
    def __init__(
        self,
        model_dir: str | Path,
        device: str = "auto",
        compute_type: str = "",
        cpu_threads: int = 1,
        language: str = "en",
        beam_size: int = 1,
        no_speech_threshold: float = 0.6,
        log_prob_threshold: float = -1.0,
        encoder_window_s: float = 10.0,
        first_window_s: float = 0.0,
    ) -> None:
        self.model_dir = Path(model_dir)
        self.device, self.compute_type, self.cpu_threads = device, compute_type, cpu_threads
        self.language = language or None
        self.beam_size = beam_size
        self.no_speech_threshold, self.log_prob_threshold = no_speech_threshold, log_prob_threshold
        self.encoder_window_s = encoder_window_s
        self.first_window_s = first_window_s
        self.first_window_kept = 0  # transcripts the first, shorter window gave
        self.first_window_redone: dict[str, int] = {}  # redone with the full window, by reason
        self._counts_lock = threading.Lock()  # diagnostics read the counts from another thread
        self._model: Any = None
        self._vocab: Any = None  # whisper_ct2.WhisperVocab
        self._filters: np.ndarray | None = None
        self._suppress: list[int] = []
        self.fallback_reason = ""  # set when 'auto' found CUDA but could not use it
        self.device_reason = ""  # why 'auto' chose the CPU (no CUDA device, no CUDA runtime)

    @staticmethod
    def pick_device(device: str) -> str:
        """``device``, or for 'auto' CUDA when CTranslate2 sees a GPU, else the CPU."""
        return WhisperEngine.probe_device(device)[0]

    @staticmethod
    def probe_device(device: str) -> tuple[str, str]:
        """(device, why CUDA was not chosen for 'auto' or ''). The reason is kept, not hidden:
        a Jetson that silently runs whisper on its CPU looks like a slow model."""
        if device != "auto":
            return device, ""
        try:
            import ctranslate2

            count = ctranslate2.get_cuda_device_count()
        except (ImportError, RuntimeError, OSError) as exc:  # no CUDA runtime, broken driver
            return "cpu", f"CUDA not probed ({exc!r}); using the CPU"
        if count > 0:
            return "cuda", ""
        return "cpu", "CTranslate2 sees no CUDA device; using the CPU"

    def load(self) -> None:
        for name in ("model.bin", "tokenizer.json"):
            if not (self.model_dir / name).exists():
                raise FileNotFoundError(f"whisper model file missing: {self.model_dir / name}")
        device = self.pick_device(self.device)
        if self.device == "auto" and device == "cpu":
            self.device_reason = self.probe_device("auto")[1]
        try:
            self._model, compute_type = self._open(device)
        except (RuntimeError, ValueError) as exc:
            if self.device != "auto" or device == "cpu":
                raise
            self.fallback_reason = f"CUDA unusable ({exc}); using the CPU"
            device = "cpu"
            self._model, compute_type = self._open(device)
        self.device, self.compute_type = device, compute_type
        self._vocab = WhisperVocab(self.model_dir / "tokenizer.json")
        self._filters = mel_filters(self._model.n_mels)
        self._suppress = self._vocab.suppressed()

    def _open(self, device: str) -> tuple[Any, str]:
        import ctranslate2

        compute_type = self.compute_type or ("float16" if device == "cuda" else "int8")
        model = ctranslate2.models.Whisper(
            str(self.model_dir),
            device=device,
            compute_type=compute_type,
            intra_threads=max(1, self.cpu_threads),
            inter_threads=1,
        )
        return model, compute_type

    def warm_up(self) -> float:
        """Transcribe 1 s of faint noise once (the result is dropped); its duration in s.
        CTranslate2's first encode and generate pay one-time costs: in a fresh process the
        first utterance took 0.43 s instead of ~0.28 s here, and with this 0.28-0.32 s."""
        t0 = time.perf_counter()
        noise = np.random.default_rng(0).standard_normal(SAMPLE_RATE).astype(np.float32)
        self.transcribe(noise * 0.01, final=False)  # (the first window's shape, if on)
        if self.first_window_s > 0:  # and the full window's, which its redos use
            first, self.first_window_s = self.first_window_s, 0.0
            try:
                self.transcribe(noise * 0.01, final=False)
            finally:
                self.first_window_s = first
        with self._counts_lock:  # counts of what users said, not of the warm-up
            self.first_window_kept, self.first_window_redone = 0, {}
        return time.perf_counter() - t0

    def first_window_counts(self) -> tuple[int, dict[str, int]]:
        """(transcripts the first window gave, those redone with the full one by reason): one
        snapshot, safe to take from another thread."""
        with self._counts_lock:
            return self.first_window_kept, dict(self.first_window_redone)

    def transcribe(self, audio: np.ndarray, final: bool = True) -> AsrResult | None:
        import ctranslate2

        if self._model is None or self._filters is None:
            raise RuntimeError("WhisperEngine.load() was not called")
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        if audio.size < 1600:  # under 0.1 s: nothing whisper can read
            return None
        content = log_mel(audio, self._filters)[:, :-1]  # whisper drops one more frame
        pieces, language = [], self.language
        if not self._model.is_multilingual:
            language = "en"  # an English-only model (*.en) has neither language nor task tokens
        for seek in range(0, content.shape[-1], MAX_FRAMES):  # 30 s windows (one, usually)
            samples = min(audio.size - seek * HOP, MAX_FRAMES * HOP)
            chunk = content[:, seek : seek + MAX_FRAMES]
            first = self._first_window(chunk, samples, language, final)
            if first is not None:
                pieces.append(first)
                continue
            x = encoder_input(chunk, self._encoder_frames(samples))
            encoded = self._model.encode(ctranslate2.StorageView.from_array(x))
            if language is None:
                language = self._model.detect_language(encoded)[0][0][0][2:-2]
            prompt = self._prompt(language)
            # speech gives 3-5 tokens a second: a loop ("Excuse me. Excuse me. ..." to the
            # 448-token limit, 3-4 s of decoding per temperature on 0.8 s of audio in the echo
            # benchmark) is cut short, and its high compression ratio still calls the fallback
            max_length = _max_length(_token_budget(MAX_TOKENS_PER_S, samples), prompt)
            pieces.append(
                decode_with_fallback(
                    self._model,
                    encoded,
                    prompt,
                    self._vocab,
                    self._suppress,
                    (0.0, 0.2, 0.4) if final else (0.0,),
                    self.beam_size if final else 1,
                    self.log_prob_threshold,
                    self.no_speech_threshold,
                    max_length=max_length,
                )
            )
        combined = combine_segments(pieces, self.no_speech_threshold, self.log_prob_threshold)
        if combined is None:
            return None
        text, confidence, no_speech = combined
        thresholds = (self.no_speech_threshold, self.log_prob_threshold)
        last = next((p for p in reversed(pieces) if is_kept(p, *thresholds)), None)
        last_word = last_word_probability(last, self._vocab.decode) if last is not None else 1.0
        return AsrResult(text, confidence, language or "", no_speech, last_word)

    def _first_window(
        self, chunk: np.ndarray, samples: int, language: str | None, final: bool
    ) -> Decoded | None:
        """One greedy decoding over the shorter ``first_window_s`` encoder window, kept unless
        it shows whisper's short-window failure (``degenerate``: a repeated run of words, a
        runaway text, a low log-probability; a loop of one sentence keeps that sentence,
        ``repeated_sentence``) or whisper calls it silence (the audio passed
        the VAD: the full window judges that); None = transcribe with the full window as
        usual. Only for audio that leaves the window at least ``FIRST_WINDOW_MARGIN_S`` of
        padding, a known language (``language`` set: detection needs the full window's
        encoding) and greedy decoding (a final with ``beam_size`` > 1 gets its beam)."""
        import ctranslate2

        if self.first_window_s <= 0 or language is None or (final and self.beam_size > 1):
            return None
        if samples / SAMPLE_RATE + FIRST_WINDOW_MARGIN_S > self.first_window_s:
            return None
        full = self._encoder_frames(samples)
        frames = encoder_frames(self.first_window_s, samples)
        if frames is None or (full is not None and frames >= full):
            return None
        x = encoder_input(chunk, frames)
        encoded = self._model.encode(ctranslate2.StorageView.from_array(x))
        max_tokens = _token_budget(FIRST_WINDOW_TOKENS_PER_S, samples)
        prompt = self._prompt(language)
        # a bound that cuts a loop short (``degenerate`` checks the budget on the tokens given)
        decoded = decode_with_fallback(
            self._model, encoded, prompt, self._vocab, self._suppress, (0.0,), 1,
            self.log_prob_threshold, self.no_speech_threshold,
            max_length=_max_length(max_tokens, prompt),
        )  # fmt: skip
        why = degenerate(decoded, max_tokens, self.log_prob_threshold)
        sentence = repeated_sentence(decoded.text) if why else ""
        if sentence and decoded.avg_logprob >= self.log_prob_threshold:
            # the loop's first sentence is the transcript: keep it instead of redoing it (the
            # redo cost 0.3-0.5 s on one recorded turn in seven, the p90 of the voice loop)
            kept = _tokens_of(sentence, decoded.tokens, self._vocab.decode)
            decoded = replace(
                decoded,
                text=sentence,
                tokens=decoded.tokens[:kept],
                token_probs=decoded.token_probs[:kept],
                compression_ratio=compression_ratio(sentence),
            )
            why = ""
        if not why and decoded.no_speech_prob > self.no_speech_threshold:
            why = "silence"  # a short "Yes." is not dropped on the short window's word alone
        with self._counts_lock:
            if why:
                self.first_window_redone[why] = self.first_window_redone.get(why, 0) + 1
                return None
            self.first_window_kept += 1
        return decoded

    def _prompt(self, language: str) -> list[int]:
        """Whisper's start of transcript: language and task (multilingual models), no
        timestamps."""
        vocab = self._vocab
        if not self._model.is_multilingual:
            return [vocab.sot, vocab.no_timestamps]
        return [vocab.sot, vocab.language(language), vocab.transcribe, vocab.no_timestamps]

    def _encoder_frames(self, samples: int) -> int | None:
        return encoder_frames(self.encoder_window_s, samples)

    def close(self) -> None:
        self._model = None


def encoder_frames(window_s: float, samples: int) -> int | None:
    """Mel frames (100 per second) the encoder sees for ``samples`` of 16 kHz audio with an
    encoder window of ``window_s`` (at least the audio + 1 s); None = whisper's full 30 s."""
    if window_s <= 0 or window_s >= 30:
        return None
    frames = max(int(window_s * 100), samples // 160 + 100)
    return frames if frames < 3000 else None

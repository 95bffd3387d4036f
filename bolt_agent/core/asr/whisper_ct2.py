"""Whisper on CTranslate2 directly: log-mel features, the prompt, and decoding with whisper's
temperature fallback, for one utterance without timestamps.

This is the part of faster-whisper's ``WhisperModel.transcribe`` that the ASR node uses (one
utterance of at most 30 s, a known language, no timestamps, no prompt), with the same numbers:
``test/test_whisper_ct2.py`` checks the features and the transcripts against faster-whisper.
The node does not import faster-whisper because its package imports PyAV and huggingface_hub
at the top (to decode files and download models, which the node never does): 22 MiB of the
stack's RSS and 128 modules. The model directory is the same CTranslate2 conversion.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bolt_agent.core.asr.byte_bpe import ByteLevelTokenizer

SAMPLE_RATE = 16000
N_FFT = 400
HOP = 160  # 100 frames per second
MAX_FRAMES = 3000  # whisper's 30 s input
MAX_LENGTH = 448  # whisper's decoder positions
# faster-whisper's defaults for what it does not expose to us (TranscriptionOptions)
BEST_OF = 5  # hypotheses sampled per fallback temperature
COMPRESSION_RATIO_THRESHOLD = 2.4  # above: the text repeats itself, try the next temperature
_WORD = re.compile(r"[\w']+")
REPEATED_RUN = 4  # words: a run this long said twice in one utterance is a decoding loop
MAX_INITIAL_TIMESTAMP_INDEX = 50  # 1 s at 0.02 s per timestamp


def mel_filters(n_mels: int, sr: int = SAMPLE_RATE, n_fft: int = N_FFT) -> np.ndarray:
    """(n_mels, n_fft // 2 + 1) Slaney mel filterbank (librosa's default, whisper's features)."""
    fft_freqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)
    f_sp = 200.0 / 3  # Hz per mel in the linear part
    mels = np.linspace(0.0, 45.245640471924965, n_mels + 2)  # 0 Hz .. 8 kHz in Slaney mels
    freqs = f_sp * mels
    min_log_mel = 1000.0 / f_sp  # the log part starts at 1 kHz
    log_part = mels >= min_log_mel
    freqs[log_part] = 1000.0 * np.exp(np.log(6.4) / 27.0 * (mels[log_part] - min_log_mel))
    fdiff = np.diff(freqs)
    ramps = freqs[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    weights *= (2.0 / (freqs[2 : n_mels + 2] - freqs[:n_mels]))[:, None]  # equal area
    return weights.astype(np.float32)


def log_mel(audio: np.ndarray, filters: np.ndarray) -> np.ndarray:
    """(n_mels, frames) log-mel spectrogram of 16 kHz audio with whisper's normalisation.

    As faster-whisper computes it: 160 samples of zero padding, a centred (reflect-padded) STFT
    with a periodic Hann window, the last frame dropped, log10 clamped to 8 below the maximum."""
    x = np.pad(np.asarray(audio, dtype=np.float32).reshape(-1), (0, HOP))
    x = np.pad(x, (N_FFT // 2, N_FFT // 2), mode="reflect")
    n = 1 + (len(x) - N_FFT) // HOP
    frames = np.lib.stride_tricks.as_strided(x, (n, N_FFT), (HOP * x.strides[0], x.strides[0]))
    window = np.hanning(N_FFT + 1)[:-1].astype(np.float32)
    spectrum = np.fft.rfft(frames * window, n=N_FFT, axis=-1).astype(np.complex64)
    power = np.abs(spectrum[:-1]) ** 2  # (frames, bins)
    log = np.log10(np.clip(filters @ power.T, 1e-10, None))
    log = np.maximum(log, log.max() - 8.0)
    return (log + 4.0) / 4.0


def encoder_input(content: np.ndarray, frames: int | None) -> np.ndarray:
    """(1, n_mels, frames) encoder input: ``content`` frames zero-padded (or cut) to ``frames``
    (None: whisper's 30 s)."""
    frames = MAX_FRAMES if frames is None else min(frames, MAX_FRAMES)
    content = content[:, :frames]
    out = np.zeros((1, content.shape[0], frames), dtype=np.float32)
    out[0, :, : content.shape[-1]] = content
    return out


class WhisperVocab:
    """The special tokens, the suppressed tokens and the text of whisper's tokenizer.json
    (``byte_bpe``: ~8 MiB less in the node than the ``tokenizers`` package)."""

    def __init__(self, tokenizer_json: str | Path) -> None:
        self._tok = ByteLevelTokenizer(tokenizer_json, keep_encoder=True)
        self.eot = self._id("<|endoftext|>")
        self.sot = self._id("<|startoftranscript|>")
        self.transcribe = self._id("<|transcribe|>")
        self.translate = self._id("<|translate|>")
        self.sot_prev = self._id("<|startofprev|>")
        self.sot_lm = self._id("<|startoflm|>")
        self.no_timestamps = self._id("<|notimestamps|>")
        self.no_speech = self._tok.token_to_id("<|nospeech|>")
        if self.no_speech is None:  # older conversions
            self.no_speech = self._id("<|nocaptions|>")
        self._suppressed = self._suppression_list()  # with the encoder of the load's parse

    def _id(self, token: str) -> int:
        got = self._tok.token_to_id(token)
        if got is None:
            raise ValueError(f"whisper tokenizer has no {token} token")
        return got

    def language(self, code: str) -> int:
        return self._id(f"<|{code}|>")

    def decode(self, tokens: list[int]) -> str:
        return self._tok.decode([t for t in tokens if t < self.eot])

    def suppressed(self) -> list[int]:
        """Whisper's default suppression (``suppress_tokens=[-1]``): symbols of non-speech
        annotations ("♪", "[MUSIC]", "(speaking foreign language)") and the task tokens."""
        return list(self._suppressed)

    def _suppression_list(self) -> list[int]:
        symbols = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』')
        symbols += [
            "<<",
            ">>",
            "<<<",
            ">>>",
            "--",
            "---",
            "-(",
            "-[",
            "('",
            '("',
            "((",
            "))",
            "(((",
            ")))",
            "[[",
            "]]",
            "{{",
            "}}",
            "♪♪",
            "♪♪♪",
        ]
        miscellaneous = set("♩♪♫♬♭♮♯")  # multi-token: their shared first token is enough
        encode = self._tok.encoder().encode  # the merges, for this list only (then dropped)
        result = {encode(" -")[0], encode(" '")[0]}
        for symbol in symbols + sorted(miscellaneous):
            for tokens in (encode(symbol), encode(" " + symbol)):
                if len(tokens) == 1 or symbol in miscellaneous:
                    result.add(tokens[0])
        result |= {self.transcribe, self.translate, self.sot, self.sot_prev, self.sot_lm}
        result.add(self.no_speech)
        return sorted(result)


@dataclass(frozen=True)
class Decoded:
    """One decoding of one utterance (the fields ``asr_engine.combine_segments`` reads)."""

    text: str
    tokens: list[int]
    avg_logprob: float
    no_speech_prob: float
    temperature: float
    compression_ratio: float
    #: each token's probability where the decoding was greedy (empty otherwise): how sure
    #: whisper was of the words one by one, which the mean log-probability hides
    token_probs: tuple[float, ...] = ()


def compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


def degenerate(decoded: Decoded, max_tokens: int, log_prob_threshold: float) -> str:
    """Why a decoding looks like whisper's failure mode rather than the speech ('' = it does
    not): it repeats itself (compression ratio above 2.4, or a run of 4 words said twice:
    "Please give me a happy nod. Please give me a happy"), outran ``max_tokens``, or its
    mean log-probability is under the threshold. A short encoder window brings these on."""
    if decoded.compression_ratio > COMPRESSION_RATIO_THRESHOLD:
        return "repeats itself"
    if len(decoded.tokens) > max_tokens:
        return f"more than {max_tokens} tokens"
    if decoded.avg_logprob < log_prob_threshold:
        return "low log-probability"
    words = _WORD.findall(decoded.text.lower())
    seen: dict[tuple[str, ...], int] = {}
    for i in range(len(words) - REPEATED_RUN + 1):
        run = tuple(words[i : i + REPEATED_RUN])
        if run in seen and i - seen[run] >= REPEATED_RUN:  # (not overlapping itself)
            return f"{REPEATED_RUN} words said twice"
        seen.setdefault(run, i)
    return ""


_SENTENCE_BREAK = re.compile(r"(?<=[.?!])\s+")


def repeated_sentence(text: str) -> str:
    """The sentence of whisper's short-window loop, when that is all the text is: one sentence
    said again and again, the last copy perhaps cut by the token budget ("Do you like music? Do
    you like music? Do you like"); '' otherwise. Over 100 recorded user turns every first-window
    redo was such a loop, and its first sentence was the full window's transcript in 13 of 14."""
    parts = [p.strip() for p in _SENTENCE_BREAK.split(text.strip()) if p.strip()]
    if len(parts) < 2 or not parts[0].endswith((".", "?", "!")):
        return ""
    first = parts[0].lower()
    for k, part in enumerate(parts[1:], start=2):
        again = part.lower()
        if again != first and not (k == len(parts) and first.startswith(again)):
            return ""
    return parts[0]


def _host_array(row: Any) -> np.ndarray:
    """One step's logits as a float64 array: a row on the GPU is copied to the host first
    (a CUDA StorageView has no array interface)."""
    if getattr(row, "device", "cpu") != "cpu":
        import ctranslate2

        row = row.to_device(ctranslate2.Device.cpu)
    return np.asarray(row, dtype=np.float64).reshape(-1)


def chosen_probs(logits: Any, tokens: list[int]) -> tuple[float, ...]:
    """The probability of each chosen token under its step's logits (CTranslate2's
    ``return_logits_vocab``: one row of the vocabulary per step, the end token's last).
    Empty (probabilities unknown) when a row cannot be read: they inform the end of turn and
    must never cost the transcript."""
    probs = []
    try:
        for token, row in zip(tokens, logits, strict=False):
            x = _host_array(row)
            top = x.max()
            probs.append(float(np.exp(x[token] - top) / np.exp(x - top).sum()))
    except (TypeError, ValueError, AttributeError, RuntimeError, IndexError):
        return ()
    return tuple(probs)


def decode_with_fallback(
    model: Any,
    encoded: Any,
    prompt: list[int],
    vocab: WhisperVocab,
    suppress: list[int],
    temperatures: tuple[float, ...],
    beam_size: int,
    log_prob_threshold: float,
    no_speech_threshold: float,
    max_length: int = MAX_LENGTH,
) -> Decoded:
    """Decode at the first temperature; when the text repeats itself (compression ratio above
    2.4) or its mean log-probability is under the threshold, decode again at the next one,
    unless whisper judges the audio silence. All failed: the best mean log-probability among
    the texts that do not repeat themselves (whisper's ``generate_with_fallback``)."""
    tried: list[Decoded] = []
    for temperature in temperatures:
        if temperature > 0:
            kwargs = {
                "beam_size": 1,
                "num_hypotheses": BEST_OF,
                "sampling_topk": 0,
                "sampling_temperature": temperature,
            }
        else:
            # greedy: the logits of the chosen tokens come at no measurable cost (0.084 s with
            # against 0.086 s without, 7 tokens) and give each token's probability
            kwargs = {"beam_size": beam_size, "patience": 1.0}
            kwargs["return_logits_vocab"] = beam_size == 1
        result = model.generate(
            encoded,
            [prompt],
            length_penalty=1.0,
            repetition_penalty=1.0,
            no_repeat_ngram_size=0,
            max_length=max_length,
            return_scores=True,
            return_no_speech_prob=True,
            suppress_blank=True,
            suppress_tokens=suppress,
            max_initial_timestamp_index=MAX_INITIAL_TIMESTAMP_INDEX,
            **kwargs,
        )[0]
        tokens = list(result.sequences_ids[0])
        n = len(tokens)
        avg_logprob = result.scores[0] * n / (n + 1)  # the score is normalised by length
        text = vocab.decode(tokens).strip()
        probs = chosen_probs(result.logits[0], tokens) if kwargs.get("return_logits_vocab") else ()
        decoded = Decoded(
            text,
            tokens,
            avg_logprob,
            result.no_speech_prob,
            temperature,
            compression_ratio(text),
            probs,
        )
        tried.append(decoded)
        retry = decoded.compression_ratio > COMPRESSION_RATIO_THRESHOLD
        retry = retry or avg_logprob < log_prob_threshold
        if result.no_speech_prob > no_speech_threshold and avg_logprob < log_prob_threshold:
            retry = False  # silence
        if not retry:
            return decoded
    plain = [d for d in tried if d.compression_ratio <= COMPRESSION_RATIO_THRESHOLD]
    best = max(plain or tried, key=lambda d: d.avg_logprob)
    return best

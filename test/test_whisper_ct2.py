"""Whisper on CTranslate2 without faster-whisper (core/asr/whisper_ct2): the same features,
suppressed tokens and transcripts as faster-whisper's ``WhisperModel.transcribe`` (the
reference, imported here only), the same token ids and texts as the ``tokenizers`` package
(core/asr/byte_bpe), and an ASR path that imports neither faster-whisper, PyAV nor
tokenizers."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from bolt_agent.core.asr.whisper_ct2 import WhisperVocab, log_mel, mel_filters
from bolt_agent.core.models import resolve_model
from support.audio_fixtures import speech_wav  # noqa: F401 - fixture


def _chirp(seconds: float = 2.3) -> np.ndarray:
    t = np.arange(int(16000 * seconds)) / 16000
    rng = np.random.default_rng(3)
    return (0.3 * np.sin(2 * np.pi * (200 + 900 * t) * t) + rng.normal(0, 0.01, t.size)).astype(
        np.float32
    )


def test_features_are_faster_whispers():
    from faster_whisper.feature_extractor import FeatureExtractor

    ref = FeatureExtractor(feature_size=80)
    filters = mel_filters(80)
    assert np.allclose(filters, ref.mel_filters, rtol=0, atol=1e-7)
    for audio in (_chirp(), _chirp(0.4), np.zeros(3200, np.float32)):
        ours, theirs = log_mel(audio, filters), ref(audio)
        assert ours.shape == theirs.shape
        assert np.allclose(ours, theirs, rtol=0, atol=2e-5), np.abs(ours - theirs).max()


def test_suppressed_tokens_are_faster_whispers():
    import tokenizers
    from faster_whisper.tokenizer import Tokenizer
    from faster_whisper.transcribe import get_suppressed_tokens

    model_dir = resolve_model("", kind="asr")
    hf = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    ref = Tokenizer(hf, True, task="transcribe", language="en")
    vocab = WhisperVocab(model_dir / "tokenizer.json")
    assert vocab.suppressed() == list(get_suppressed_tokens(ref, [-1]))
    assert [vocab.sot, vocab.language("en"), vocab.transcribe] == ref.sot_sequence
    assert (vocab.no_timestamps, vocab.no_speech, vocab.eot) == (
        ref.no_timestamps,
        ref.no_speech,
        ref.eot,
    )
    with pytest.raises(ValueError, match=r"no <\|xx\|>"):
        vocab.language("xx")


def test_byte_bpe_encodes_and_decodes_as_the_tokenizers_package():
    """Every vocabulary entry's text and a set of awkward texts encode to the same ids, and
    every id and random id sequences (split UTF-8 sequences included) decode to the same text."""
    import random

    import tokenizers

    from bolt_agent.core.asr.byte_bpe import ByteLevelTokenizer

    path = resolve_model("", kind="asr") / "tokenizer.json"
    hf, ours = tokenizers.Tokenizer.from_file(str(path)), ByteLevelTokenizer(path)
    n = len(ours.decoder) - 1  # the last entry is <|endoftext|>: special, not text
    assert n == 50257
    assert [ours.decode([i]) for i in range(n)] == [hf.decode([i]) for i in range(n)]
    rng = random.Random(0)
    for _ in range(500):
        ids = [rng.randrange(n) for _ in range(rng.randrange(1, 24))]
        assert ours.decode(ids) == hf.decode(ids), ids

    texts = [hf.decode([i]) for i in range(n)] + [
        " I would like to buy, a long sword and a shield, please.",
        "It's 3.5 km—don't you think? CAN'T, I'LL, we've",
        "naïve café ½ Ⅻ ² १२३ ٣٤",
        "under_score __init__  multiple   spaces\n\nnew\tlines ",
        "♪♪ ♪ [MUSIC] (speaking foreign language) 日本語 😀👍🏽",
        "<|en|> a special token <|endoftext|>in text",
    ]
    encode = ours.encoder().encode
    wrong = [t for t in texts if encode(t) != hf.encode(t, add_special_tokens=False).ids]
    assert wrong == [], wrong[:5]


@pytest.mark.slow
def test_transcripts_are_faster_whispers(speech_wav):  # noqa: F811
    """Same words, same confidence (to rounding), on Piper speech, with the node's encoder
    window; and on a padded 31 s input (two whisper windows) the words of both (a smoke
    check: the default max_speech_s is 20 s, so this path is not compared with faster-whisper)."""
    from faster_whisper import WhisperModel

    from bolt_agent.benchmarks.offline import library_transcribe, windowed_whisper_model
    from bolt_agent.core.asr.asr_engine import WhisperEngine

    model_dir = resolve_model("", kind="asr")
    ours = WhisperEngine(model_dir, "cpu", cpu_threads=2, encoder_window_s=10)
    ours.load()
    assert ours.warm_up() > 0  # as asr_node does: it leaves nothing behind (same words below)
    ref = windowed_whisper_model(WhisperModel)(
        str(model_dir), device="cpu", compute_type="int8", cpu_threads=2
    )
    for (first, last), text in zip(speech_wav.truth, speech_wav.texts, strict=True):
        audio = speech_wav.audio[max(0, first - 4000) : last + 1600]
        segments = library_transcribe(ref, audio, 10)
        got = ours.transcribe(audio)
        assert got is not None and len(segments) == 1
        assert got.text == segments[0].text.strip(), (text, got.text, segments[0].text)
        assert got.confidence == pytest.approx(np.exp(segments[0].avg_logprob), abs=1e-4)
    a, b = speech_wav.truth
    first = speech_wav.audio[a[0] - 4000 : a[1] + 1600]
    second = speech_wav.audio[b[0] - 4000 : b[1] + 1600]
    gap = np.zeros(16000 * 30 - first.size, np.float32)
    long = ours.transcribe(np.concatenate([first, gap, second]))  # two 30 s windows
    assert long is not None and "back room" in long.text and "leather boots" in long.text, long


@pytest.mark.slow
def test_the_asr_path_imports_neither_faster_whisper_nor_pyav(speech_wav):  # noqa: F811
    """asr_node's module, its VAD and its engine, loaded and run: faster-whisper (and PyAV,
    huggingface_hub, which it imports) and tokenizers stay out of the process."""
    first, last = speech_wav.truth[0]
    np.save(speech_wav.path.with_suffix(".npy"), speech_wav.audio[first - 4000 : last + 1600])
    code = f"""
import json, sys
import numpy as np
import bolt_agent.nodes.asr_node
from bolt_agent.core.models import resolve_model
from bolt_agent.core.asr.asr_engine import WhisperEngine
from bolt_agent.core.asr.vad_segmenter import SileroStream
audio = np.load({str(speech_wav.path.with_suffix(".npy"))!r})
probs = SileroStream().load()(audio[: len(audio) // 512 * 512])
engine = WhisperEngine(resolve_model("", kind="asr"), "cpu")
engine.load()
print(json.dumps({{"text": engine.transcribe(audio).text, "speech": float(probs.max()),
    "loaded": [m for m in ("faster_whisper", "av", "huggingface_hub", "tokenizers")
               if m in sys.modules]}}))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["loaded"] == [] and got["speech"] > 0.9
    assert "back room" in got["text"], got


@pytest.mark.slow
def test_the_parity_benchmark_runs_both_and_reports_identical_transcripts(tmp_path):
    from bolt_agent.benchmarks.whisper_parity import main

    out = tmp_path / "parity.json"
    assert main(["--seeds", "11", "--limit", "3", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["utterances"] == 3 and result["identical"] == 3, result["different"]
    assert result["time_ratio"] > 0 and set(result["median_s"]) == {"ours", "faster_whisper"}


def test_an_english_only_model_gets_neither_language_nor_task_tokens():
    """(No *.en model is bundled: its one difference, the prompt, is checked on its own.)"""
    from types import SimpleNamespace

    from bolt_agent.core.asr.asr_engine import WhisperEngine

    model_dir = resolve_model("", kind="asr")
    engine = WhisperEngine(model_dir, "cpu")
    engine._vocab = vocab = WhisperVocab(model_dir / "tokenizer.json")
    engine._model = SimpleNamespace(is_multilingual=False)
    assert engine._prompt("en") == [vocab.sot, vocab.no_timestamps]
    engine._model = SimpleNamespace(is_multilingual=True)
    assert engine._prompt("de") == [vocab.sot, vocab.language("de"), vocab.transcribe,
                                    vocab.no_timestamps]  # fmt: skip


def _decoded(text: str, tokens: int = 8, avg_logprob: float = -0.2):
    from bolt_agent.core.asr.whisper_ct2 import Decoded, compression_ratio

    return Decoded(text, list(range(tokens)), avg_logprob, 0.01, 0.0, compression_ratio(text))


def test_a_decoding_loop_is_told_from_speech():
    """``degenerate``: what the shorter first encoder window brings on (whisper-base, seen on
    Piper lines) is told from a sentence, including one with a word said twice."""
    from bolt_agent.core.asr.whisper_ct2 import degenerate

    assert degenerate(_decoded("Please give me a happy nod."), 20, -1.0) == ""
    assert degenerate(_decoded("No, no, I said the red one, the red one."), 20, -1.0) == ""
    looped = "Please give me a happy nod. Please give me a happy"
    assert degenerate(_decoded(looped), 20, -1.0) == "4 words said twice"
    music = "Do you like music" + " music" * 40
    assert degenerate(_decoded(music, 19), 60, -1.0) == "repeats itself"
    assert degenerate(_decoded("Can I trade my bow", 20), 20, -1.0) == ""
    assert degenerate(_decoded("Can I trade my bow", 21), 20, -1.0) == "more than 20 tokens"
    assert degenerate(_decoded("Mm.", 2, -1.5), 20, -1.0) == "low log-probability"


def test_a_loop_of_one_sentence_gives_that_sentence():
    """``repeated_sentence``: the first window's usual failure on recorded speech is one
    sentence said again (the last copy cut by the token budget); anything else is redone."""
    from bolt_agent.core.asr.whisper_ct2 import repeated_sentence

    loop = "Do you like music? Do you like music? Do you like music? Do you like"
    assert repeated_sentence(loop) == "Do you like music?"
    assert repeated_sentence("Please give me a happy nod. please give me a happy nod.") == (
        "Please give me a happy nod."
    )
    assert repeated_sentence("Please give me a happy nod.") == ""  # said once: no loop
    assert repeated_sentence("Nod. Then wave. Nod.") == ""  # other sentences in between
    assert repeated_sentence("Do you like music? Do you like dancing?") == ""
    cut = "Please give me a happy nod. Please give me a happy"  # the second copy cut short
    assert repeated_sentence(cut) == "Please give me a happy nod."
    assert repeated_sentence("Please give me a happy nod. Please give me a hat") == ""
    assert repeated_sentence("Do you like music Do you like music") == ""  # no sentence end


@pytest.mark.slow
def test_the_first_window_keeps_a_clean_transcript_and_redoes_a_runaway_one(
    speech_wav,  # noqa: F811
    monkeypatch,
):
    """``first_window_s`` (asr_node's ``encoder_first_window_s``): Piper's two lines come out
    of the shorter window with the full window's words (its punctuation may differ: "Hello
    there, let me …" against "Hello there. Let me …" on an AVX-512 EPYC); with a token budget
    too small for any sentence, every transcript is redone with the full window and gives the
    full window's text."""
    from bolt_agent.benchmarks.pad_accuracy import words
    from bolt_agent.core.asr import asr_engine
    from bolt_agent.core.asr.asr_engine import WhisperEngine

    model_dir = resolve_model("", kind="asr")
    full = WhisperEngine(model_dir, "cpu", cpu_threads=2, encoder_window_s=10)
    first = WhisperEngine(model_dir, "cpu", cpu_threads=2, encoder_window_s=10, first_window_s=6)
    full.load()
    first.load()
    lines = [
        speech_wav.audio[max(0, a - 4000) : b + 1600] for a, b in speech_wav.truth
    ]  # fmt: skip
    expected = [full.transcribe(audio).text for audio in lines]
    assert [words(first.transcribe(audio).text) for audio in lines] == [words(t) for t in expected]
    assert first.first_window_kept == len(lines) and first.first_window_redone == {}
    assert full.first_window_kept == 0  # (off by default in the engine)

    # a budget of a few tokens: (8 - 2 per second of audio)
    monkeypatch.setattr(asr_engine, "FIRST_WINDOW_TOKENS_PER_S", -2.0)
    assert [first.transcribe(audio).text for audio in lines] == expected
    redone = first.first_window_redone
    assert sum(redone.values()) == len(lines) and all(k.startswith("more than") for k in redone)
    assert first.first_window_kept == len(lines)
    # audio that leaves the window less than 2 s of padding goes straight to the full window
    long = np.concatenate([lines[0], np.zeros(16000 * 3, np.float32)])
    assert first.transcribe(long).text == full.transcribe(long).text
    assert first.first_window_counts()[0] == len(lines)
    assert sum(first.first_window_counts()[1].values()) == len(lines)  # (none more)
    # a greedy final is what the first window gives; a beam asked for gets the full window
    first.beam_size = 2
    assert first.transcribe(lines[0]).text == expected[0]
    assert first.first_window_counts()[0] == len(lines)
    assert sum(first.first_window_counts()[1].values()) == len(lines)
    # faint noise gives nothing through the first window either, and the warm-up's own
    # transcripts (both windows) are not counted as what users said
    first.beam_size = 1
    noise = np.random.default_rng(1).standard_normal(16000).astype(np.float32) * 0.01
    assert first.transcribe(noise) is None
    assert first.warm_up() > 0 and first.first_window_counts() == (0, {})


def test_the_last_words_probability_is_its_least_sure_token_before_the_punctuation():
    """``last_word_probability``: the tokens of the last word ("wards" is " w" + "ards"), not
    the punctuation after it; 1.0 (unknown) for a decoding without token probabilities."""
    from dataclasses import replace

    from bolt_agent.core.asr.asr_engine import last_word_probability
    from bolt_agent.core.asr.whisper_ct2 import Decoded

    pieces = {1: " Hand", 2: " to", 3: " w", 4: "ards", 5: ".", 6: "Yes", 7: ",", 8: " there"}

    def decode(tokens):
        return "".join(pieces[t] for t in tokens)

    d = Decoded("Hand to wards.", [1, 2, 3, 4, 5], -0.4, 0.0, 0.0, 1.0, (0.9, 0.6, 0.38, 1.0, 0.2))
    assert last_word_probability(d, decode) == 0.38
    assert last_word_probability(replace(d, tokens=[1, 2, 3, 4], token_probs=(0.9, 0.6, 0.5, 0.4)),
                                 decode) == 0.4  # fmt: skip
    assert last_word_probability(replace(d, token_probs=()), decode) == 1.0
    one = Decoded("Yes, there", [6, 7, 8], -0.1, 0.0, 0.0, 1.0, (0.3, 0.1, 0.7))
    assert last_word_probability(one, decode) == 0.7  # the comma before it is not the word
    alone = Decoded("Yes", [6], -0.1, 0.0, 0.0, 1.0, (0.3,))
    assert last_word_probability(alone, decode) == 0.3  # a first word has no leading space


def test_token_probabilities_match_ctranslate2s_own_score():
    """The probabilities read off the greedy decoding's logits give back CTranslate2's score
    (the sum of the tokens' log-probabilities and the end token's, over the tokens): the
    logits are the step's, the token is the chosen one. And the engine's early transcript of
    a real voice carries its last word's probability; a beam search's does not."""
    import math

    import ctranslate2

    from bolt_agent.core.asr.asr_engine import WhisperEngine
    from bolt_agent.core.asr.whisper_ct2 import chosen_probs, encoder_input
    from bolt_agent.testing.voices import VOICES, speak, trim

    audio = trim(speak(VOICES[1], "Please look at me and then give me a little nod."))
    engine = WhisperEngine(resolve_model("", kind="asr"), "cpu", cpu_threads=2, beam_size=2)
    engine.load()
    content = log_mel(audio, engine._filters)[:, :-1]
    x = encoder_input(content, engine._encoder_frames(audio.size))
    model = engine._model
    encoded = model.encode(ctranslate2.StorageView.from_array(x))
    result = model.generate(
        encoded,
        [engine._prompt("en")],
        beam_size=1,
        return_scores=True,
        return_logits_vocab=True,
        suppress_tokens=engine._suppress,
    )[0]
    tokens = list(result.sequences_ids[0])
    probs = chosen_probs(result.logits[0], [*tokens, engine._vocab.eot])
    assert len(probs) == len(tokens) + 1 and all(0 < p <= 1 for p in probs)
    assert sum(math.log(p) for p in probs) / len(tokens) == pytest.approx(
        result.scores[0], abs=1e-3
    )

    early = engine.transcribe(audio, final=False)
    assert early is not None and early.text.lower().startswith("please look at me")
    assert 0.0 < early.last_word_confidence < 1.0
    final = engine.transcribe(audio, final=True)  # a beam of 2: no token probabilities
    assert final is not None and final.last_word_confidence == 1.0


def test_token_probabilities_read_rows_off_the_gpu_and_never_cost_the_transcript():
    """A CUDA row (no array interface) is copied to the host first; a row that cannot be read
    leaves the probabilities unknown instead of failing the transcription (the Jetson runs
    whisper on its GPU, this machine cannot)."""
    from bolt_agent.core.asr.whisper_ct2 import chosen_probs

    class GpuRow:
        device = "cuda"

        def __init__(self, values):
            self.values = values

        def to_device(self, device):
            assert str(device).lower().endswith("cpu")
            return np.asarray(self.values, dtype=np.float16)

    rows = [GpuRow([0.0, 2.0, 0.0]), GpuRow([3.0, 0.0, 0.0])]
    probs = chosen_probs(rows, [1, 0])
    assert probs == pytest.approx((np.exp(2) / (np.exp(2) + 2), np.exp(3) / (np.exp(3) + 2)))

    class Unreadable:
        device = "cpu"

    assert chosen_probs([Unreadable()], [0]) == ()

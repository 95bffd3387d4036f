"""The pad-accuracy benchmark's scoring and its audio: word errors as whisper's output is
compared, and the early audio taken where the listener would take it."""

from __future__ import annotations

import numpy as np

from bolt_agent.benchmarks.pad_accuracy import last_early_audio, table, word_errors
from bolt_agent.core.asr.vad_segmenter import VadConfig, VadSegmenter
from support.audio_fixtures import ScriptedProbs


def test_word_errors_ignore_case_punctuation_and_spelling():
    assert word_errors("My favourite colour, please.", "my favorite color please") == (0, 4)
    assert word_errors("a b c", "a x c d") == (2, 3)  # one substitution, one insertion
    assert word_errors("a b", "") == (2, 2)


def test_the_early_audio_ends_its_pad_after_the_silence_onset():
    probs = [0.0] * 5 + [0.9] * 20 + [0.0] * 60  # speech in windows 5..24
    audio = np.arange(len(probs) * 512, dtype=np.float32)
    config = VadConfig(speech_pad_ms=48, start_pad_ms=0, min_speech_ms=150, min_silence_ms=1200)
    taken = last_early_audio(VadSegmenter(config, ScriptedProbs(probs)), audio)
    assert taken is not None
    assert taken[0] == 5 * 512 and taken[-1] == 25 * 512 + 768 - 1  # onset … silence + 48 ms
    silent = VadSegmenter(config, ScriptedProbs([0.0] * 40))
    assert last_early_audio(silent, audio[: 40 * 512]) is None


def test_table_says_better_and_worse_against_the_first_pad():
    result = {
        "pads": [80, 48],
        "utterances": 10,
        "summary": {
            "80": {"wer": 0.02, "word_errors": 2, "lines_with_errors": 2,
                   "better_than_first": 0, "worse_than_first": 0},
            "48": {"wer": 0.01, "word_errors": 1, "lines_with_errors": 1,
                   "better_than_first": 1, "worse_than_first": 0},
        },
    }  # fmt: skip
    text = table(result)
    assert "| 48 | 1.00% (1) | 1 of 10 | 1 / 0 |" in text and "better / worse than 80" in text

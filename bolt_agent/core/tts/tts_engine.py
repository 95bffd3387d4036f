"""Text-to-speech behind a small interface: text → one int16 chunk per sentence.

``PiperEngine`` wraps piper-tts with its own onnxruntime session so the thread count is ours
(Piper's ``PiperVoice.load`` uses onnxruntime's default, every core).
"""

from __future__ import annotations

import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bolt_agent.core.tts.sentences import SentenceSplitter


@dataclass(frozen=True)
class SynthChunk:
    text: str  # the sentence this audio says
    audio: np.ndarray = field(repr=False)  # int16 mono
    sample_rate: int


def split_sentences(text: str) -> list[str]:
    splitter = SentenceSplitter()
    sentences = splitter.push(text.strip() + " ")
    rest = splitter.flush()
    return sentences + ([rest] if rest else [])


def spoken_prefix(text: str, fraction: float) -> str:
    """The words of ``text`` said after ``fraction`` (0..1) of its audio played (rounded down)."""
    words = text.split()
    if fraction >= 1.0:
        return text.strip()
    n = int(len(words) * max(0.0, fraction))
    return " ".join(words[:n])


class TtsEngine(ABC):
    """A loaded voice; ``synthesize`` yields one chunk per sentence, first as soon as ready."""

    sample_rate: int = 22050

    @abstractmethod
    def load(self) -> None: ...

    @abstractmethod
    def synthesize_sentence(self, sentence: str) -> np.ndarray:
        """int16 mono audio of one sentence."""

    def synthesize(self, text: str) -> Iterator[SynthChunk]:
        for sentence in split_sentences(text):
            audio = self.synthesize_sentence(sentence)
            if len(audio):
                yield SynthChunk(sentence, audio, self.sample_rate)

    def release_memory(self) -> None:  # noqa: B027 - optional hook
        """Give working memory kept for speed back (between turns, off the critical path)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Free the model."""


class _ArenaSession:
    """The onnxruntime session Piper runs (``session.run(None, feeds)``), with run options that
    give the CPU arena's growth back to the allocator at the end of a run while ``shrink``."""

    def __init__(self, session: Any) -> None:
        import onnxruntime

        self.session = session
        self.shrink = False
        self._shrink_options = onnxruntime.RunOptions()
        self._shrink_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")

    def run(self, output_names: Any, input_feed: Any, run_options: Any = None) -> Any:
        options = self._shrink_options if self.shrink else run_options
        return self.session.run(output_names, input_feed, options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)


class PiperEngine(TtsEngine):
    """Piper voice (.onnx + .onnx.json); ``cpu_threads`` bounds onnxruntime's intra-op pool.

    onnxruntime's CPU arena keeps the peak of the longest sentence so far (≈ 20 MiB per second
    of audio: 170 MiB for a 150-character sentence). Sentences longer than ``shrink_above_chars``
    give that growth back after synthesis (≈ 17 % slower for them: 0.53 vs 0.46 s for 113
    characters, docs/benchmarks.md); shorter ones run on the kept arena at full speed, and
    ``release_memory`` (tts_node calls it once a turn is spoken) gives the rest back: ≈ 95 MiB
    after a turn of sentences up to 60 characters, for one word's synthesis (~50 ms) between
    turns. Shrinking after every sentence instead cost 7-15 % per sentence. ``-1``: never shrink
    per sentence; ``mem_arena=False``: no arena at all (≈ 30 % slower for every sentence).
    ``seed``: reproducible audio (a simulated user, test fixtures); None: a new voice each run.
    """

    def __init__(
        self,
        model_path: str | Path,
        config_path: str | Path | None = None,
        cpu_threads: int = 1,
        use_cuda: bool = False,
        length_scale: float | None = None,
        mem_arena: bool = True,
        shrink_above_chars: int = 60,
        seed: int | None = None,
    ) -> None:
        self.model_path = Path(model_path)
        self.config_path = Path(config_path) if config_path else Path(f"{model_path}.json")
        self.cpu_threads, self.use_cuda, self.length_scale = cpu_threads, use_cuda, length_scale
        self.mem_arena, self.shrink_above_chars = mem_arena, shrink_above_chars
        self.seed = seed
        self._voice: Any = None
        self._syn_config: Any = None
        self._lock = threading.Lock()  # one synthesis at a time: the shrink flag is shared

    def load(self) -> None:
        import onnxruntime
        from piper import PiperVoice, SynthesisConfig
        from piper.config import PiperConfig

        for path in (self.model_path, self.config_path):
            if not path.exists():
                raise FileNotFoundError(f"Piper voice file missing: {path}")
        if self.seed is not None:
            # VITS draws its noise inside the graph, from a generator seeded when the session is
            # made: seeded, one voice says the same texts in the same order with the same audio
            onnxruntime.set_seed(self.seed)
        opts = onnxruntime.SessionOptions()
        opts.intra_op_num_threads = max(1, self.cpu_threads)
        opts.inter_op_num_threads = 1
        opts.enable_cpu_mem_arena = self.mem_arena
        providers = ["CUDAExecutionProvider"] if self.use_cuda else []
        providers.append("CPUExecutionProvider")
        session = onnxruntime.InferenceSession(
            str(self.model_path), sess_options=opts, providers=providers
        )
        config = PiperConfig.from_dict(json.loads(self.config_path.read_text()))
        self._voice = PiperVoice(session=_ArenaSession(session), config=config)
        self.sample_rate = int(config.sample_rate)
        self._syn_config = SynthesisConfig(length_scale=self.length_scale)

    def synthesize_sentence(self, sentence: str) -> np.ndarray:
        limit = self.shrink_above_chars
        audio = self._run(sentence, self.mem_arena and 0 <= limit < len(sentence))
        if audio is None:
            raise RuntimeError("PiperEngine.load() was not called (or the voice was closed)")
        return audio

    def release_memory(self) -> None:
        """One word synthesised with the arena's shrinkage on: every arena region left unused
        goes back to the allocator (the kept peak of the last turn's sentences). Nothing to do
        without an arena or a voice (closed meanwhile)."""
        if self.mem_arena:
            self._run("a", shrink=True)

    def _run(self, text: str, shrink: bool) -> np.ndarray | None:
        """One synthesis at a time (the shrink flag is the session's); None without a voice."""
        with self._lock:
            voice = self._voice
            if voice is None:
                return None
            voice.session.shrink = shrink
            parts = [c.audio_int16_array for c in voice.synthesize(text, self._syn_config)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)

    def close(self) -> None:
        with self._lock:  # after a synthesis in progress, never under it
            self._voice = None

"""Text-to-speech behind a small interface: text → one int16 chunk per sentence.

``PiperEngine`` wraps piper-tts with its own onnxruntime session so the thread count is ours
(Piper's ``PiperVoice.load`` uses onnxruntime's default, every core).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bolt_agent.core.sentences import SentenceSplitter


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

    def close(self) -> None:  # noqa: B027 - optional hook
        """Free the model."""


class PiperEngine(TtsEngine):
    """Piper voice (.onnx + .onnx.json); ``cpu_threads`` bounds onnxruntime's intra-op pool."""

    def __init__(
        self,
        model_path: str | Path,
        config_path: str | Path | None = None,
        cpu_threads: int = 1,
        use_cuda: bool = False,
        length_scale: float | None = None,
    ) -> None:
        self.model_path = Path(model_path)
        self.config_path = Path(config_path) if config_path else Path(f"{model_path}.json")
        self.cpu_threads, self.use_cuda, self.length_scale = cpu_threads, use_cuda, length_scale
        self._voice: Any = None
        self._syn_config: Any = None

    def load(self) -> None:
        import onnxruntime
        from piper import PiperVoice, SynthesisConfig
        from piper.config import PiperConfig

        for path in (self.model_path, self.config_path):
            if not path.exists():
                raise FileNotFoundError(f"Piper voice file missing: {path}")
        opts = onnxruntime.SessionOptions()
        opts.intra_op_num_threads = max(1, self.cpu_threads)
        opts.inter_op_num_threads = 1
        providers = ["CUDAExecutionProvider"] if self.use_cuda else []
        providers.append("CPUExecutionProvider")
        session = onnxruntime.InferenceSession(
            str(self.model_path), sess_options=opts, providers=providers
        )
        config = PiperConfig.from_dict(json.loads(self.config_path.read_text()))
        self._voice = PiperVoice(session=session, config=config)
        self.sample_rate = int(config.sample_rate)
        self._syn_config = SynthesisConfig(length_scale=self.length_scale)

    def synthesize_sentence(self, sentence: str) -> np.ndarray:
        if self._voice is None:
            raise RuntimeError("PiperEngine.load() was not called")
        parts = [c.audio_int16_array for c in self._voice.synthesize(sentence, self._syn_config)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)

    def close(self) -> None:
        self._voice = None

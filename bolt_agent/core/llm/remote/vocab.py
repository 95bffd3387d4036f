"""The local GGUF's vocabulary and chat template, without its weights.

A remote engine renders prompts with the same template the local engine would use and budgets
the history token-accurately, so it needs the model's tokenizer; llama.cpp loads a vocabulary
alone (``vocab_only``) in about a second and a few MB, instead of the whole model.
"""

from __future__ import annotations

from pathlib import Path

from bolt_agent.core.llm.chat_template import ChatTemplate
from bolt_agent.core.llm.types import EngineError


class LocalVocabulary:
    def __init__(self, model_path: str):
        if not Path(model_path).is_file():
            raise EngineError(f"LLM model file not found: {model_path}")
        from llama_cpp import Llama

        self._llm = Llama(model_path=model_path, vocab_only=True, verbose=False)

    def tokenize(self, text: str) -> list[int]:
        """As the local engine tokenizes a prompt: special tokens parsed, no BOS added."""
        return self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def template(self, override: str = "") -> ChatTemplate:
        """The override, else the GGUF's own template, else the bundled Bolt template (the
        local engine's rule)."""
        return ChatTemplate.for_gguf(self._llm, override)

    def close(self) -> None:
        self._llm.close()

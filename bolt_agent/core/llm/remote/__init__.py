"""The LLM on an OpenAI-compatible server (llama.cpp's, llama-cpp-python's, vLLM, NIM), with
an optional local fallback. ``build_remote_engine`` is what llm_node and the benchmark call."""

from __future__ import annotations

import os
from collections.abc import Callable

from bolt_agent.core.llm.remote.engine import RemoteConfig, RemoteEngine
from bolt_agent.core.llm.remote.fallback import FallbackEngine
from bolt_agent.core.llm.remote.sse import RemoteError
from bolt_agent.core.llm.types import EngineError, TextEngine

__all__ = [
    "FallbackEngine",
    "RemoteConfig",
    "RemoteEngine",
    "RemoteError",
    "api_key_from_env",
    "build_remote_engine",
]


def api_key_from_env(name: str) -> str:
    """The key is named, never given: it stays out of YAML, logs and bags."""
    if not name:
        return ""
    value = os.environ.get(name)
    if value is None:
        raise EngineError(f"api_key_env names {name!r}, which is not set in the environment")
    return value


def build_remote_engine(
    config: RemoteConfig,
    model_path: str,
    load_local: Callable[[], TextEngine] | None,
    warm: bool = True,
    chat_template: str = "",
    on_fallback: Callable[[str], None] = lambda reason: None,
) -> TextEngine:
    """A remote engine that renders and counts with the local GGUF's template and vocabulary
    (the warm local engine's, else the vocabulary alone), wrapped in a fallback when
    ``load_local`` is given. Without a readable GGUF: the bundled template, estimated counts."""
    if load_local is not None and warm:
        local = load_local()
        remote = RemoteEngine(config, local.chat_template, getattr(local, "tokenize", None))
        return FallbackEngine(remote, lambda: local, warm=True, on_fallback=on_fallback)
    template, tokenize = None, None
    if model_path and os.path.isfile(model_path):
        from bolt_agent.core.llm.remote.vocab import LocalVocabulary

        vocab = LocalVocabulary(model_path)
        template, tokenize = vocab.template(chat_template), vocab.tokenize
    remote = RemoteEngine(config, template, tokenize)
    if load_local is None:
        return remote
    return FallbackEngine(remote, load_local, warm=False, on_fallback=on_fallback)

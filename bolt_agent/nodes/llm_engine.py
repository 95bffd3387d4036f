"""llm_node's engine from its parameters: llama.cpp in the process (``engine: local``), or an
OpenAI-compatible server with an optional local fallback (``engine: openai``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from bolt_agent.core.llm.llama.engine import LlamaEngine
from bolt_agent.core.models import resolve_model
from bolt_agent.nodes.llm_params import LlmParams


def load_engine(p: LlmParams, on_fallback: Callable[[str], None], logger: Any) -> tuple[Any, Path]:
    """The loaded engine and the model file it was asked for. Raises what the loaders raise
    (``ModelNotFoundError``, ``EngineError``, ``FileNotFoundError``, ``ValueError``)."""
    model_path = resolve_model(p.model, kind="llm")
    draft_path = str(resolve_model(p.draft_model, kind="drafter")) if p.draft_model else ""

    def load_local() -> LlamaEngine:  # (also the remote engine's fallback)
        return LlamaEngine(p.llama_config(str(model_path), draft_path)).load()

    if p.engine == "local":
        return load_local(), model_path
    from bolt_agent.core.llm.remote import RemoteConfig, api_key_from_env, build_remote_engine

    config = RemoteConfig(
        base_url=p.base_url,
        api_key=api_key_from_env(p.api_key_env),
        model=p.remote_model,
        api=p.remote_api,
        timeout_s=p.remote_timeout_s,
        grammar_field=p.remote_grammar_field,
        n_ctx=p.n_ctx,
    )
    engine = build_remote_engine(
        config,
        str(model_path),
        load_local if p.remote_fallback == "local" else None,
        warm=p.remote_fallback_warm,
        chat_template=p.chat_template,
        on_fallback=on_fallback,
    )
    logger.info(f"LLM server: {engine.describe()}")
    return engine, model_path

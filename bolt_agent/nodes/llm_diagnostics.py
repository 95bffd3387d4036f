"""The engine's values in llm_node's ``/diagnostics``: model, device, the queue, and (local
engine) what the small sliding-window cache's checkpoints have done."""

from __future__ import annotations

from typing import Any


def engine_values(engine: Any, params: Any, scheduler: Any, runner: Any) -> dict[str, Any]:
    """The values of a loaded local engine (``core.llm.llama.engine.LlamaEngine``)."""
    speculation = engine.speculation.summary() if engine.speculation is not None else "none"
    guard = getattr(engine, "swa_guard", None)
    return {
        "model": engine.config.model_path,
        "device": f"GPU ({params.n_gpu_layers} layers)" if params.n_gpu_layers else "CPU",
        "chat_template": engine.chat_template.name,
        "speculative": speculation,  # speculative decoding (DFlash, n-gram, draft model)
        "queue_depth": scheduler.pending() if scheduler is not None else 0,
        "current_turn": scheduler.current_turn if scheduler is not None else "",
        "history_turns": len(runner.dialogue.turns) if runner is not None else 0,
        # tokens in the KV cache: the start-up prefill of system prompt + examples is done
        # once this is past them (the first answer is then fast)
        "cached_tokens": getattr(getattr(engine, "_llm", None), "n_tokens", 0),
        # rollbacks past the small sliding-window cache: served by the checkpoint, or a
        # prefill of the whole prompt (seconds on a CPU; should stay 0 in a conversation)
        "swa_restored": getattr(guard, "restored", 0),
        "swa_full_prefills": getattr(guard, "refilled", 0),
        # a stable-prefix checkpoint not taken (the cache had lost the window before it)
        "swa_anchor_kept": getattr(guard, "kept_anchor", 0),
        # checkpoints cut back to a rollback before their end (the deepest, in tokens), and
        # those a rollback went further back into than they keep (CUT_BACK_TOKENS)
        "swa_cut_backs": getattr(guard, "cut_backs", 0),
        "swa_cut_back_deepest": getattr(guard, "cut_back_deepest", 0),
        "swa_checkpoints_dropped": getattr(guard, "dropped", 0),
        "swa_checkpoint_mib": guard.held_bytes() / 2**20 if guard is not None else 0.0,
    }


def remote_values(engine: Any, scheduler: Any) -> dict[str, Any]:
    """The values of a server engine (``engine: openai``, ``core.llm.remote``)."""
    return {
        "model": engine.describe(),
        "device": "remote",
        "chat_template": engine.chat_template.name,
        "remote_ttft_s": f"{engine.last_ttft_s:.3f}" if engine.last_ttft_s else "",
        "remote_fallbacks": getattr(engine, "fallbacks", 0),
        "queue_depth": scheduler.pending() if scheduler is not None else 0,
    }

"""Speculative decoding for ``LlamaEngine``: mode selection and the fallback chain.

Modes (``LlamaConfig.speculative``):

* ``none``        plain decoding (the default);
* ``dflash``      a DFlash drafter GGUF (``draft_model``) fed with the target's layer features;
* ``ngram``       prompt lookup, no extra model;
* ``draft_model`` a small GGUF with the target's vocabulary, in its own context.

A mode that cannot run here falls back along ``dflash → ngram → none`` and
``draft_model → ngram → none``; each reason is logged and kept in :class:`SpeculationInfo`.
Nothing on this path lets llama.cpp abort the process: DFlash pairs are validated from metadata
first (``gguf_check``), and every mode needs a target whose cache can drop its last positions.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from llama_cpp import llama_cpp as capi

from bolt_agent.core.llm.llama.speculative.decoder import Drafter, SpecSession
from bolt_agent.core.llm.llama.speculative.gguf_check import DrafterError
from bolt_agent.core.llm.llama.speculative.native import kv_cache_bytes

__all__ = [
    "MODES",
    "DrafterError",
    "SpecConfig",
    "SpeculationInfo",
    "SpeculationUnavailable",
    "Speculator",
    "build_speculator",
]

log = logging.getLogger("bolt_agent.speculative")

MODES = ("none", "dflash", "ngram", "draft_model")
FALLBACK = {"dflash": "ngram", "draft_model": "ngram", "ngram": "none"}


@dataclass(frozen=True)
class SpecConfig:
    mode: str = "none"
    draft_model: str = ""  # the DFlash drafter (dflash) or the draft GGUF (draft_model)
    n_max: int = 7  # draft tokens per step
    p_min: float = 0.0  # stop a draft at a token the drafter gives less than this probability
    n_gpu_layers: int = 0  # for the drafter / draft model


@dataclass
class SpeculationInfo:
    requested: str
    active: str = "none"
    n_max: int = 0
    reasons: list[str] = field(default_factory=list)  # why requested modes were skipped
    memory: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        mib = ", ".join(f"{k}={v / 2**20:.1f} MiB" for k, v in self.memory.items())
        text = f"speculative decoding: {self.active}"
        if self.active != "none":
            text += f" (n_max={self.n_max})"
        if self.reasons:
            text += f"; requested {self.requested}, fell back: " + "; ".join(self.reasons)
        return text + (f"; memory: {mib}" if mib else "")


class SpeculationUnavailable(RuntimeError):
    """A mode cannot run with this target (the message says why)."""


class Speculator:
    """An engine-wide drafter; each ``LlamaSession`` gets a :class:`SpecSession` from it."""

    def __init__(self, llm, drafter: Drafter, info: SpeculationInfo):
        self._llm = llm
        self.drafter = drafter
        self.info = info

    def session(self, llm, stats, sampler_for, text) -> SpecSession:
        return SpecSession(llm, self.drafter, stats, sampler_for, text)

    def close(self) -> None:
        self.drafter.close()


def build_speculator(llm, config: SpecConfig, strict: bool = False):
    """``(Speculator | None, SpeculationInfo)`` for a loaded ``llama_cpp.Llama``.

    With ``strict`` the first failure raises (DrafterError or :class:`SpeculationUnavailable`)
    instead of falling back.
    """
    if config.mode not in MODES:
        raise ValueError(f"speculative mode {config.mode!r} not one of {', '.join(MODES)}")
    info = SpeculationInfo(requested=config.mode)
    mode = config.mode
    while mode != "none":
        try:
            _check_rollback(llm)
            drafter = _make(mode, llm, config)
        except (DrafterError, SpeculationUnavailable) as exc:
            if strict:
                raise
            reason = f"{mode}: {exc}"
            log.warning("%s; falling back to %s", reason, FALLBACK[mode])
            info.reasons.append(reason)
            mode = FALLBACK[mode]
            continue
        info.active, info.n_max = mode, drafter.n_max
        info.memory = {
            "target_kv_bytes": kv_cache_bytes(llm._model.model, llm.n_ctx()),
            **drafter.memory(),
        }
        log.info(info.summary())
        return Speculator(llm, drafter, info), info
    return None, info


def _make(mode: str, llm, config: SpecConfig) -> Drafter:
    if config.n_max < 1:
        raise SpeculationUnavailable(f"n_max={config.n_max}: nothing to draft")
    if mode == "ngram":
        from bolt_agent.core.llm.llama.speculative.ngram import NgramDrafter

        return NgramDrafter(config.n_max)
    if not config.draft_model:
        raise SpeculationUnavailable("no draft_model file given")
    if mode == "draft_model":
        from bolt_agent.core.llm.llama.speculative.draft_model import DraftModelDrafter

        return DraftModelDrafter(
            llm, config.draft_model, config.n_max, config.p_min, config.n_gpu_layers
        )
    from bolt_agent.core.llm.llama.speculative.dflash import DFlashDrafter
    from bolt_agent.core.llm.llama.speculative.gguf_check import (
        check_pair,
        read_drafter,
        target_info,
    )

    info = read_drafter(config.draft_model)
    check_pair(info, target_info(llm))
    return DFlashDrafter(llm, info, config.n_max, config.p_min, config.n_gpu_layers)


def _check_rollback(llm) -> None:
    """Speculation removes rejected positions: the target's cache must allow that."""
    model = llm._model.model
    if capi.llama_model_is_recurrent(model) or capi.llama_model_is_hybrid(model):
        raise SpeculationUnavailable(
            "recurrent/hybrid target: its cache cannot drop rejected positions"
        )
    if not _probe_seq_rm(llm):
        raise SpeculationUnavailable(
            "the target's cache refuses partial removal (llama_memory_seq_rm)"
        )


def _probe_seq_rm(llm) -> bool:
    """Decode two tokens on the (fresh) target, try to drop the second, clear again."""
    ctx = llm._ctx.ctx
    mem = capi.llama_get_memory(ctx)
    token = max(0, capi.llama_vocab_bos(llm._model.vocab))
    llm.n_tokens = 0
    capi.llama_memory_clear(mem, True)
    llm._batch.set_batch(batch=[token, token], n_past=0, logits_all=False)
    ok = capi.llama_decode(ctx, llm._batch.batch) == 0 and capi.llama_memory_seq_rm(mem, 0, 1, -1)
    capi.llama_memory_clear(mem, True)
    llm.n_tokens = 0
    return bool(ok)

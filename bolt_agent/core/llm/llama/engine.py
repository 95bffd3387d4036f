"""LLM engines: a small ABC for the dialogue layer and its llama-cpp-python implementation.

The engine does prefill with KV-cache prefix reuse and token-by-token decoding; everything about
turns, knobs and tools lives above it (``turn_runner``). A session samples one token at a time
(optionally under a GBNF grammar), and can be forced to take given text (budget forcing).
"""

from __future__ import annotations

import codecs
import logging
import math
import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bolt_agent.core.llm.chat_template import ChatTemplate
from bolt_agent.core.llm.types import (
    DecodeSession,
    EngineError,
    SamplingParams,
    SessionStats,
    TextEngine,
    Token,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LlamaConfig:
    model_path: str
    n_ctx: int = 4096
    n_gpu_layers: int = 0
    n_threads: int = 2  # decode
    n_threads_batch: int = 0  # prefill (0 = n_threads)
    n_batch: int = 256
    # physical batch: sizes llama.cpp's compute buffer (4 B x n_vocab x n_ubatch of logits, 64
    # MiB for Gemma's 262k vocabulary, mostly never touched; the attention scores of a
    # micro-batch, n_kv x n_ubatch per head, are) and the sliding-window cache (n_swa + n_ubatch
    # cells, padded to 256). 64 rather than 256 trades a slower long prefill for less of the
    # buffer touched (figures: docs/memory.md)
    n_ubatch: int = 64
    # full-size sliding-window cache (llama-cpp-python's default): n_ctx cells per SWA layer
    # instead of n_swa + n_ubatch; off, prefix reuse is kept valid by llama/swa_cache.SwaGuard
    swa_full: bool = False
    flash_attn: str = "auto"  # on | off | auto (on with GPU layers; slower on this CPU)
    # K/V cache element types (f16 | bf16 | q8_0 | q4_0 | ...): q8_0 halves the cache (34 B per 32
    # values); a quantised V cache needs flash attention, so it is refused without it. K ``auto``:
    # see _cache_type_k
    cache_type_k: str = "auto"
    cache_type_v: str = "f16"
    use_mmap: bool = True  # map the GGUF: pages of CPU-resident tensors load on first touch
    # llama.cpp's CPU repacking (``use_extra_bufts``): an anonymous, interleaved copy of the
    # repackable CPU weights for its AVX2/NEON kernels. Off, the weights stay clean file-backed
    # pages of the mapping; on the bundled 270M model repacking cost 12.7 MiB and was not
    # faster (off ÷ on: prefill 1.02-1.05, decode 0.99-1.06; benchmarks/node_memory). GPU
    # layers are never repacked; for a big model on the CPU, measure both
    cpu_repack: bool = False
    # where the token / per-layer embedding tables live (they are always on the host):
    #   auto: llama.cpp's default: a pinned (page-locked) host copy with a GPU, read in whole
    #   mmap: left in the file mapping (no pinned copy, per-layer table read lazily), so only the
    #         pages of rows of tokens actually seen become resident (docs/memory.md)
    embeddings: str = "auto"
    chat_template: str = ""  # '' = the GGUF's own, else the bundled Bolt template
    extra: dict = field(default_factory=dict)  # passed to llama_cpp.Llama
    speculative: str = "none"  # none | dflash | ngram | draft_model (see core/speculative)
    draft_model: str = ""  # DFlash drafter GGUF (dflash) or draft GGUF (draft_model)
    spec_n_max: int = 7  # draft tokens per step
    spec_p_min: float = 0.0  # stop a draft below this drafter probability


class LlamaEngine(TextEngine):
    """llama-cpp-python backend (CPU here; CUDA on the Jetson with n_gpu_layers=-1)."""

    def __init__(self, config: LlamaConfig):
        self.config = config
        self._llm = None
        self.chat_template = ChatTemplate.bundled()
        self.load_s = 0.0
        self.speculator = None
        self.speculation = None  # SpeculationInfo once loaded with a speculative mode
        self.swa_guard = None  # SwaGuard when the sliding-window cache is not full-size
        self._tokenizer = None  # PromptTokenizer once loaded
        self._stable = ""  # mark_stable's prefix, for the next session
        self.sessions = 0  # sessions started: a fixed seed is offset by it (see LlamaSession)
        self._scorer = None  # ChannelScorer, made on the first channel_scores

    def load(self) -> LlamaEngine:
        path = Path(self.config.model_path)
        if not path.is_file():
            raise EngineError(f"LLM model file not found: {path}")
        from llama_cpp import Llama

        t0 = time.monotonic()
        try:
            with model_params_overrides(self.model_params()):
                self._llm = Llama(**self.llama_kwargs())
        except (ValueError, RuntimeError) as exc:
            raise EngineError(f"cannot load {path}: {exc}") from exc
        self.load_s = time.monotonic() - t0
        from bolt_agent.core.llm.llama.prompt_tokens import PromptTokenizer
        from bolt_agent.core.llm.llama.swa_cache import SwaGuard

        try:
            self.swa_guard = SwaGuard.for_llama(self._llm, bool(self.llama_kwargs()["swa_full"]))
        except ValueError as exc:
            self.close()
            raise EngineError(f"cannot use {path}: {exc}") from exc
        self._tokenizer = PromptTokenizer(self._llm)
        self.chat_template = self._pick_template()
        if self.config.speculative != "none":
            from bolt_agent.core.llm.llama.speculative import SpecConfig, build_speculator

            spec = SpecConfig(
                mode=self.config.speculative,
                draft_model=self.config.draft_model,
                n_max=self.config.spec_n_max,
                p_min=self.config.spec_p_min,
                n_gpu_layers=self.config.n_gpu_layers,
            )
            self.speculator, self.speculation = build_speculator(self._llm, spec)
        return self

    def model_params(self) -> dict[str, int | bool]:
        """``llama_model_params`` fields that ``llama_cpp.Llama`` has no argument for."""
        from llama_cpp import llama_cpp as capi

        fields: dict[str, int | bool] = {}
        if any(name == "use_extra_bufts" for name, *_ in capi.llama_model_params._fields_):
            fields["use_extra_bufts"] = self.config.cpu_repack
        elif not self.config.cpu_repack:  # an older llama.cpp: it repacks, and says so
            log.warning("this llama-cpp-python has no use_extra_bufts: CPU weights are repacked")
        if self.config.embeddings == "auto":
            return fields
        if self.config.embeddings != "mmap":
            raise ValueError(f"embeddings must be auto or mmap, not {self.config.embeddings!r}")
        if not self.config.use_mmap:
            raise ValueError("embeddings=mmap needs use_mmap")
        # no_host: input tensors go to the plain CPU buffer, which llama.cpp maps from the file
        # instead of copying them into a pinned buffer; lazy ON: the per-layer table is a lazy
        # range, which also keeps MAP_POPULATE off for the whole file
        return {**fields, "no_host": True, "lazy_mode": capi.LLAMA_LAZY_MODE_ON}

    def llama_kwargs(self) -> dict:
        """Keyword arguments for ``llama_cpp.Llama`` (``extra`` overrides the named fields)."""
        c = self.config
        flash = _flash_attn(c.flash_attn, c.n_gpu_layers)
        type_k = ggml_type(_cache_type_k(c.cache_type_k, c.cache_type_v, flash))
        type_v = ggml_type(c.cache_type_v)
        if c.cache_type_v.lower() not in ("f16", "f32", "bf16") and not flash:
            raise ValueError(f"cache_type_v={c.cache_type_v} needs flash_attn (llama.cpp)")
        return {
            "model_path": c.model_path,
            "n_ctx": c.n_ctx,
            "n_gpu_layers": c.n_gpu_layers,
            "n_threads": c.n_threads,
            "n_threads_batch": c.n_threads_batch or c.n_threads,
            "n_batch": c.n_batch,
            "n_ubatch": c.n_ubatch,
            "swa_full": c.swa_full,
            "flash_attn": flash,
            "type_k": type_k,
            "type_v": type_v,
            "use_mmap": c.use_mmap,
            "verbose": False,
            **c.extra,
        }

    def _pick_template(self) -> ChatTemplate:
        return ChatTemplate.for_gguf(self.llm, self.config.chat_template)

    @property
    def llm(self):
        if self._llm is None:
            raise EngineError("engine not loaded: call load() first")
        return self._llm

    @property
    def n_ctx(self) -> int:
        return self.llm.n_ctx()

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self.llm.metadata)

    def tokenize(self, text: str) -> list[int]:
        """Tokens of a prompt (special tokens parsed). The previous prompt's tokens are reused up
        to where the new one departs from it (core/prompt_tokens: ~8 ms saved per 4K tokens)."""
        if self._tokenizer is None:
            raise EngineError("engine not loaded: call load() first")
        return self._tokenizer(text)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenize(text))

    def cached_tokens(self, prompt: str) -> int:
        """The live cache's common prefix with ``prompt`` (a rollback of a few tokens stays
        within the sliding window, so the guard's check is not needed to tell)."""
        return _common_prefix(self.llm._input_ids, self.tokenize(prompt))

    def mark_stable(self, prefix: str) -> None:
        self._stable = prefix

    def start(self, prompt: str) -> LlamaSession:
        stable, self._stable = self._stable, ""
        head = None
        if stable and self.swa_guard is not None and prompt.startswith(stable):
            head = self.tokenize(stable)  # (the prompt's tokenization then reuses these)
        tokens = self.tokenize(prompt)
        if len(tokens) >= self.n_ctx:
            raise EngineError(f"prompt of {len(tokens)} tokens does not fit n_ctx={self.n_ctx}")
        anchor = None
        if head is not None:  # where the token sequences part (a merge at the boundary)
            import numpy as np

            anchor = _common_prefix(np.asarray(head, dtype=np.intc), tokens)
        return LlamaSession(self, tokens, anchor)

    def prefill(self, prompt: str) -> int:
        stats = self.start(prompt).stats
        return stats.prompt_tokens - stats.reused_tokens

    def next_token_probability(self, prompt: str, continuations: list[str]) -> float | None:
        """Prefill ``prompt`` (cached prefix reused) and sum the softmax of the last position's
        logits over the first token of each continuation (each counted once)."""
        import numpy as np
        from llama_cpp import llama_cpp as capi

        llm = self.llm
        ids = set()
        for text in continuations:
            tokens = llm.tokenize(text.encode(), add_bos=False, special=True) if text else []
            if tokens:
                ids.add(tokens[0])
        if not ids:
            return None
        self.start(prompt)  # one decode of the new tokens; the logits of the last stay in ctx
        n_vocab = llm.n_vocab()
        logits = np.ctypeslib.as_array(capi.llama_get_logits_ith(llm._ctx.ctx, -1), (n_vocab,))
        z = logits.astype(np.float64)
        z = np.exp(z - z.max())
        return float(z[sorted(ids)].sum() / z.sum())

    def channel_scores(
        self, prefixes: list[str], text: str, only: Sequence[int] | None = None
    ) -> list[float] | None:
        """On a small context of its own (``llama/channel_scorer``): the conversation's cache
        stays as it is."""
        if self._scorer is None:
            from bolt_agent.core.llm.llama.channel_scorer import ChannelScorer

            llm = self.llm
            self._scorer = ChannelScorer(
                llm._model,
                lambda text, bos: llm.tokenize(text.encode(), add_bos=bos, special=False),
                self.config.n_threads_batch or self.config.n_threads,
            )
        return self._scorer.scores(prefixes, text, only)

    def close(self) -> None:
        if self._scorer is not None:
            self._scorer.close()
            self._scorer = None
        if self.speculator is not None:
            self.speculator.close()
            self.speculator = None
        if self._llm is not None:
            self._llm.close()
            self._llm = None
        self.swa_guard = None
        self._tokenizer = None


class LlamaSession(DecodeSession):
    def __init__(self, engine: LlamaEngine, prompt: list[int], anchor: int | None = None):
        self._engine = engine
        self._llm = engine.llm
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._samplers: dict[tuple, object] = {}
        from llama_cpp import llama_cpp as capi

        self._is_eog = capi.llama_vocab_is_eog
        self._checkpointed = False
        self._avoid: set[int] = set()  # token ids the next sample may not be (``avoid``)
        # the last sampled token, handed out before its forward pass: the pass runs when the
        # next token is asked for (or text is forced), so the caller gets each token one decode
        # step sooner (the first clause reaches the TTS ~25 ms earlier); never run when the
        # session ends there, as llama-cpp-python's own generate loop does
        self._pending: int | None = None
        # a fixed seed makes the engine's whole run reproducible; each session continues it
        # with its own draws (the same seed in every session would give every request and
        # every step the same random stream, so one seed would move all answers together)
        self._seed_offset = engine.sessions
        engine.sessions += 1
        self.stats = SessionStats(prompt_tokens=len(prompt))
        spec = engine.speculator
        self._spec = spec and spec.session(self._llm, self.stats, self._sampler, self._text)
        t0 = time.monotonic()
        self._prefill(prompt, anchor)
        self.stats.prefill_s = time.monotonic() - t0

    def _prefill(self, prompt: list[int], anchor: int | None = None) -> None:
        keep = _common_prefix(self._llm._input_ids, prompt)  # tokens whose K/V are in the cache
        keep = min(keep, len(prompt) - 1)  # at least one token to decode for fresh logits
        if self._spec:
            keep = self._spec.reusable(keep)  # (the drafter's own state may lag)
        guard = self._engine.swa_guard
        if guard is not None:  # a small sliding-window cache may have lost the window
            keep = guard.safe_keep(keep)
        self.stats.reused_tokens = keep
        # (safe_keep cut back every checkpoint past keep: one at the anchor means keep == anchor)
        if (
            guard is not None
            and anchor is not None
            and keep <= anchor < len(prompt)
            and guard.anchor_pos != anchor
        ):
            # the SWA checkpoint at the stable prefix: the next turn's prompt departs from this
            # one there (this turn's few-shot examples go), further back than the small
            # window can roll, so it restores this state instead of prefilling everything.
            # Also when the cache already ends at the anchor (the end-of-turn probe prefilled
            # the history and the words, and the examples go in before the words): without
            # it the checkpoint came at the second token, past the examples, where no later
            # prompt goes back to (one 10.9 s full prefill in a 20-turn bench run)
            self._decode(prompt[:anchor], keep)  # (nothing at the anchor: drops what follows)
            guard.checkpoint(anchor=True)
            keep = anchor
        self._decode(prompt, keep)

    def _decode(self, tokens: list[int], keep: int) -> None:
        """Decode ``tokens[keep:]`` after the first ``keep`` cached ones (checked by the guard;
        with a drafter, at most ``reusable``)."""
        if self._spec:
            self._spec.prefill(tokens, keep)
        else:
            self._llm.n_tokens = keep  # Llama.eval drops cache entries from n_tokens on
            self._llm.eval(tokens[keep:])

    def _checkpoint_once(self) -> None:
        """SWA checkpoint when the second token is asked for (off the time to first token)."""
        guard = self._engine.swa_guard
        if guard is not None and not self._checkpointed and self.stats.first_token_at is not None:
            guard.checkpoint()
            self._checkpointed = True

    @property
    def n_past(self) -> int:
        if self._spec:
            return self._spec.n_past
        return self._llm.n_tokens + (self._pending is not None)

    def close(self) -> None:
        """The step is over: the token handed out last needs no forward pass (counted)."""
        if self._pending is not None:
            self._pending = None
            self.stats.skipped_passes += 1

    def _flush(self) -> None:
        """Run the forward pass of the token handed out last (see ``_pending``)."""
        if self._pending is not None:
            token, self._pending = self._pending, None
            t0 = time.monotonic()
            self._llm.eval([token])
            self.stats.decode_s += time.monotonic() - t0

    def step(
        self, sampling: SamplingParams, grammar: str | None = None, limit: int = 1
    ) -> list[Token]:
        if self._spec:
            self._checkpoint_once()
            return self._spec.step(sampling, grammar, limit)
        return [self.sample(sampling, grammar)]

    def _sampler(self, sampling: SamplingParams, grammar: str | None):
        key = (sampling, grammar)
        sampler = self._samplers.get(key)
        if sampler is None:
            chain = _Chain(self._llm.n_vocab(), sampling, self._seed_offset)
            if grammar is None:
                sampler = chain
            else:
                from bolt_agent.core.llm.llama.grammar_sampler import FastGrammarSampler

                sampler = FastGrammarSampler(
                    self._llm._model.vocab, self._llm.n_vocab(), grammar, chain
                )
            self._samplers = {key: sampler}  # one phase at a time; a new grammar starts fresh
        return sampler

    def sample(self, sampling: SamplingParams, grammar: str | None = None) -> Token:
        self._flush()  # (before the checkpoint: it then holds what it held before the deferral)
        self._checkpoint_once()
        if self._spec:
            return self._spec.step(sampling, grammar, 1)[0]
        llm = self._llm
        if llm.n_tokens >= llm.n_ctx():
            return Token(id=-1, text="", is_eog=True)
        t0 = time.monotonic()
        if self._avoid:
            self._mask_avoided(llm._ctx.ctx)
        token = self._sampler(sampling, grammar).sample(llm._ctx.ctx)
        if self.stats.first_token_at is None:
            self.stats.first_token_at = time.monotonic()
        self.stats.decode_s += time.monotonic() - t0
        if self._is_eog(llm._model.vocab, token):
            return Token(id=token, text="", is_eog=True)
        self._pending = token
        self.stats.generated += 1
        return Token(id=token, text=self._text(token))

    def avoid(self, texts: Sequence[str]) -> None:
        """The first token of each text, with and without a leading space, is masked for the
        next sample only (a local session without a drafter: the drafter samples on its
        own)."""
        if self._spec:
            return
        for text in texts:
            for spelling in (text.strip(), " " + text.strip()):
                ids = self._llm.tokenize(spelling.encode(), add_bos=False, special=False)
                if ids:
                    self._avoid.add(ids[0])

    def _mask_avoided(self, ctx) -> None:
        """-inf into the context's logits row, which both samplers read (the plain chain
        through ``llama_sampler_sample``, the grammar's fallback directly)."""
        from llama_cpp import llama_cpp as capi

        logits = capi.llama_get_logits_ith(ctx, -1)
        for token in self._avoid:
            logits[token] = -math.inf
        self._avoid = set()

    def force(self, text: str) -> list[Token]:
        tokens = self._engine.tokenize(text)
        if self._spec:
            tokens = self._spec.force(tokens)
        else:
            self._flush()
            tokens = tokens[: self._llm.n_ctx() - self._llm.n_tokens]
            if tokens:
                self._llm.eval(tokens)
        self.stats.forced += len(tokens)
        return [Token(id=t, text=self._text(t)) for t in tokens]

    def _text(self, token: int) -> str:
        return self._decoder.decode(self._llm.detokenize([token], special=True))


def ggml_type(name: str) -> int:
    """ggml type id of a cache type name (``q8_0`` -> ``GGML_TYPE_Q8_0``)."""
    from llama_cpp import llama_cpp as capi

    value = getattr(capi, f"GGML_TYPE_{name.upper()}", None)
    if value is None:
        raise ValueError(f"unknown ggml type {name!r} (f16, bf16, q8_0, q4_0, ...)")
    return int(value)


_PARAMS_LOCK = threading.Lock()


@contextmanager
def model_params_overrides(fields: dict[str, int | bool]) -> Iterator[None]:
    """Set ``llama_model_params`` fields for a ``Llama(...)`` built inside the block.

    llama-cpp-python builds its model parameters from ``llama_model_default_params()`` and
    exposes no argument for ``no_host`` / ``lazy_mode``; the block wraps that one factory (under a
    lock, so two engines loading at once cannot see each other's settings)."""
    if not fields:
        yield
        return
    from llama_cpp import llama_cpp as capi

    with _PARAMS_LOCK:
        original = capi.llama_model_default_params

        def patched():
            params = original()
            for name, value in fields.items():
                setattr(params, name, value)
            return params

        capi.llama_model_default_params = patched
        try:
            yield
        finally:
            capi.llama_model_default_params = original


def _flash_attn(mode: str, n_gpu_layers: int) -> bool:
    if mode not in ("on", "off", "auto"):
        raise ValueError(f"flash_attn must be on, off or auto, not {mode!r}")
    return mode == "on" or (mode == "auto" and n_gpu_layers != 0)


def _cache_type_k(mode: str, type_v: str, flash: bool) -> str:
    """The K cache type for ``cache_type_k``. ``auto``: q8_0 without flash attention (the CPU
    path; on the bundled model 4.9 MiB less cache and 2.6 MiB less per SWA checkpoint, the same
    greedy text, decode speed unchanged, +5 ms to the first token), and V's type with it:
    llama.cpp's GPU flash-attention kernels are built for matching K/V types, and a mixed pair
    would run attention on the CPU."""
    if mode.lower() != "auto":
        return mode
    return type_v if flash else "q8_0"


def _common_prefix(cached, prompt: list[int]) -> int:
    """Length of the common prefix of the cached token ids (numpy) and ``prompt``."""
    import numpy as np

    n = min(len(cached), len(prompt))
    diff = np.flatnonzero(cached[:n] != np.asarray(prompt[:n], dtype=cached.dtype))
    return int(diff[0]) if len(diff) else n


class _Chain:
    """The plain sampler chain (seed defaults: top-k → top-p → [min-p] → temperature → dist)."""

    def __init__(self, n_vocab: int, sampling: SamplingParams, seed_offset: int = 0):
        from llama_cpp import _internals

        self._owner = _internals.LlamaSampler()
        if sampling.repeat_penalty != 1.0:
            self._owner.add_penalties(n_vocab, 64, sampling.repeat_penalty, 0.0, 0.0)
        if sampling.temperature <= 0:
            self._owner.add_greedy()
        else:
            self._owner.add_top_k(sampling.top_k)
            self._owner.add_top_p(sampling.top_p, 1)
            if sampling.min_p > 0:
                self._owner.add_min_p(sampling.min_p, 1)
            self._owner.add_temp(sampling.temperature)
            seed = (
                (sampling.seed + seed_offset) % 2**32
                if sampling.seed >= 0
                else int.from_bytes(os.urandom(4), "little")
            )
            self._owner.add_dist(seed)
        self.sampler = self._owner.sampler

    def close(self) -> None:
        """Free the native chain now. llama-cpp-python's ``LlamaSampler`` is a reference cycle
        (its ExitStack's callback closes over it), so without this the chain (≈ 3 MiB of
        candidates for a 262k vocabulary) waits for a gen-2 collection: the memory soak's
        +3 MiB per turn (docs/benchmarks.md, "Memory soak"). Idempotent."""
        self.sampler = None
        owner = getattr(self, "_owner", None)  # None: __init__ failed before making it
        if owner is not None:
            owner.close()

    def __del__(self) -> None:
        self.close()

    def sample_raw(self, ctx) -> int:
        from llama_cpp import llama_cpp as capi

        return capi.llama_sampler_sample(self.sampler, ctx, -1)

    sample = sample_raw

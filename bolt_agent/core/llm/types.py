"""What the dialogue layer and the decoders share about a language model: its errors, sampling
settings, tokens, session statistics and the two small ABCs (engine, session).

Kept apart from the llama.cpp backend so the speculative decoders (which need these types) and
the backend (which builds a decoder) do not import each other.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from bolt_agent.core.llm.chat_template import ChatTemplate


class EngineError(RuntimeError):
    """The model could not be loaded or decoding failed."""


@dataclass(frozen=True)
class SamplingParams:
    """Seed defaults for Bolt E4B: temperature 1.0, top_p 0.95, top_k 64."""

    temperature: float = 1.0
    top_p: float = 0.95
    top_k: int = 64
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    seed: int = -1  # -1: random


@dataclass(frozen=True)
class Token:
    id: int
    text: str  # decoded text this token completes (may be '' inside a UTF-8 sequence)
    is_eog: bool = False


@dataclass
class SessionStats:
    prompt_tokens: int = 0
    reused_tokens: int = 0  # prompt tokens served from the KV cache
    prefill_s: float = 0.0
    generated: int = 0
    # generated tokens whose forward pass never ran: a local session runs a token's pass when
    # the next one is asked for, so the last token of a step that ends without end-of-text has none
    skipped_passes: int = 0
    forced: int = 0
    decode_s: float = 0.0
    first_token_at: float | None = None  # time.monotonic() of the first sampled token
    drafted: int = 0
    accepted: int = 0
    draft_steps: int = 0  # speculative steps that verified at least one draft token
    remote: bool = False  # served over the network: prefill_s is the network time to first token

    @property
    def evaluated(self) -> int:
        """Generated tokens whose forward pass ran (what ``decode_s`` paid for)."""
        return self.generated - self.skipped_passes

    @property
    def decode_tok_s(self) -> float:
        return self.evaluated / self.decode_s if self.decode_s > 0 else 0.0


class DecodeSession(ABC):
    """One generation from one prompt. Not thread-safe; the engine serialises sessions."""

    stats: SessionStats

    @abstractmethod
    def sample(self, sampling: SamplingParams, grammar: str | None = None) -> Token:
        """Sample the next token (under `grammar`, if given); the model takes it in before the
        next token or forced text (a local session runs that forward pass then, not now)."""

    def step(
        self, sampling: SamplingParams, grammar: str | None = None, limit: int = 1
    ) -> list[Token]:
        """One decoding step: one token, or up to `limit` accepted at once by a speculative
        decoder. Cancellation is checked between steps."""
        return [self.sample(sampling, grammar)]

    @abstractmethod
    def force(self, text: str) -> list[Token]:
        """Feed `text` as if the model had generated it (e.g. an end-of-thinking marker)."""

    def avoid(self, texts: Sequence[str]) -> None:  # noqa: B027 (optional hook)
        """Steer the next sampled token away from the first token of each of ``texts`` (the
        reply guard's openers of recent turns). An engine that cannot (a server, a
        speculative decoder that samples inside its drafter) ignores it; the guard still
        catches a repeat after it is decoded."""

    @property
    @abstractmethod
    def n_past(self) -> int:
        """Tokens in context (prompt + generated)."""

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Stop generating (a remote session closes its stream, so the server stops too);
        called when the runner is done with a step. A local session holds nothing."""


class TextEngine(ABC):
    """What the dialogue layer needs from a language model."""

    chat_template: ChatTemplate

    @property
    @abstractmethod
    def n_ctx(self) -> int: ...

    @abstractmethod
    def count_tokens(self, text: str) -> int: ...

    @abstractmethod
    def start(self, prompt: str) -> DecodeSession:
        """Prefill `prompt` (reusing the cached prefix) and return a session positioned after it."""

    def prefill(self, prompt: str) -> int:
        """Bring `prompt` into the cache ahead of a ``start`` with the same prefix; returns the
        tokens newly evaluated. Engines without a cache do nothing."""
        return 0

    def cached_tokens(self, prompt: str) -> int:
        """How many of ``prompt``'s first tokens the cache holds now (what a ``start`` of it
        would not evaluate again). 0: the engine keeps no cache, or cannot tell."""
        return 0

    def mark_stable(self, prefix: str) -> None:  # noqa: B027 (optional hook)
        """The next ``start``/``prefill`` prompt begins with ``prefix``, and the prompt after it
        will too, but may differ right after it (per-turn few-shot examples go there): an
        engine whose cache cannot always roll back (a small sliding-window cache) saves its
        state at that point. Engines that can always reuse a prefix ignore it."""

    def channel_scores(
        self, prefixes: list[str], text: str, only: Sequence[int] | None = None
    ) -> list[float] | None:
        """log P(``text`` | each prefix), summed over ``text``'s tokens, without touching the
        conversation's cache (tool selection: ``core/llm/tool_selection``); ``only``: for the
        prefixes at these indexes alone, in that order (the set of prefixes, which an engine
        may keep cached, stays the same). None when the engine cannot tell (a server streams
        text, not logits)."""
        return None

    def next_token_probability(self, prompt: str, continuations: list[str]) -> float | None:
        """P(the token after ``prompt`` is the first token of one of ``continuations``), from one
        forward pass over what the cache does not hold yet (the prompt stays cached for the
        ``start`` that follows). None when the engine cannot tell (a server streams text, not
        logits)."""
        return None

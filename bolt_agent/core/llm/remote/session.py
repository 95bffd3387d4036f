"""Remote decode sessions: a chain of streamed requests over one growing text.

``StreamSession`` is what both APIs share (the text consumed so far, the open stream, stats,
cancel polling, one token per event); ``CompletionSession`` is ``/v1/completions`` with the raw
prompt. The engine is passed in untyped so this module and ``engine.py`` do not import each
other.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from bolt_agent.core.llm.remote.sse import SseStream
from bolt_agent.core.llm.types import DecodeSession, SamplingParams, SessionStats, Token

#: How often a waiting step looks at the cancel token (a cancel closes the stream within this).
POLL_S = 0.05


class StreamSession(DecodeSession):
    """What both APIs share: the text so far, the open stream, stats, cancel, one token per
    event. Subclasses say how to open a request and how an event becomes tokens."""

    endpoint = "completions"

    def __init__(self, engine: Any, prompt: str):
        self._engine = engine
        self.prompt = prompt  # as rendered by our template (the fallback continues from it)
        self.text = ""  # generated and forced text after the prompt
        self._stream: SseStream | None = None
        self._key: tuple | None = None  # (sampling, grammar) of the open request
        self._pending: deque[Token] = deque()
        self._finished = False
        self._last_at: float | None = None
        self._sent_at = time.monotonic()
        self._generation = engine.cancel_generation()
        self.stats = SessionStats(prompt_tokens=engine.count_tokens(prompt), remote=True)

    @property
    def n_past(self) -> int:
        return self.stats.prompt_tokens + self.stats.generated + self.stats.forced

    def sample(self, sampling: SamplingParams, grammar: str | None = None) -> Token:
        tokens = self.step(sampling, grammar, 1)
        return tokens[0] if tokens else Token(id=-1, text="", is_eog=True)

    def step(
        self, sampling: SamplingParams, grammar: str | None = None, limit: int = 1
    ) -> list[Token]:
        while True:
            if self._pending:
                return self._take(limit)
            if self._finished:
                return [Token(id=-1, text="", is_eog=True)]
            if self._engine.is_cancelled(self._generation):
                self.close()
                return []  # the runner sees the stale generation and ends the turn
            if self._stream is None or self._key != (sampling, grammar):
                self._reopen(sampling, grammar)
            assert self._stream is not None
            try:
                event = self._stream.next_event(POLL_S)
            except StopIteration:
                if self._engine.is_cancelled(self._generation):
                    return []
                self._pending.extend(self.finish())
                self._finished = True
                continue
            if event is not None:
                self._pending.extend(self.tokens(event))

    def _take(self, limit: int) -> list[Token]:
        now = time.monotonic()
        out: list[Token] = []
        while self._pending and len(out) < max(1, limit):
            token = self._pending.popleft()
            out.append(token)
            if token.is_eog:
                self._finished = True
                break
            self.text += token.text
            self.stats.generated += 1
        if self.stats.first_token_at is None:
            self.stats.first_token_at = now
            self.stats.prefill_s = now - self._sent_at  # network + server prefill: network TTFT
            self._engine.last_ttft_s = self.stats.prefill_s
        elif self._last_at is not None:
            self.stats.decode_s += now - self._last_at
        self._last_at = now
        return out

    def _reopen(self, sampling: SamplingParams, grammar: str | None) -> None:
        self.close_stream()
        self._key = (sampling, grammar)
        if self.stats.first_token_at is None:
            self._sent_at = time.monotonic()
        self._stream = self._engine.stream(self.endpoint, self.request(sampling, grammar))
        self._last_at = None  # the wait for a new request's first token is not decode time

    def close_stream(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def close(self) -> None:
        self.close_stream()
        self._pending.clear()

    # --- per API -----------------------------------------------------------------------------
    def request(self, sampling: SamplingParams, grammar: str | None) -> dict[str, Any]:
        raise NotImplementedError

    def tokens(self, event: dict[str, Any]) -> list[Token]:
        raise NotImplementedError

    def finish(self) -> list[Token]:
        """Tokens owed when the stream ends (``[DONE]`` without a finish reason)."""
        return [Token(id=-1, text="", is_eog=True)]


class CompletionSession(StreamSession):
    """``/v1/completions`` with the raw prompt and everything consumed so far."""

    def request(self, sampling: SamplingParams, grammar: str | None) -> dict[str, Any]:
        body = self._engine.body(sampling, grammar)
        body["prompt"] = self._engine.raw_prompt(self.prompt) + self.text
        return body

    def tokens(self, event: dict[str, Any]) -> list[Token]:
        choices = event.get("choices") or [{}]
        text = choices[0].get("text") or ""
        reason = choices[0].get("finish_reason")
        timings = event.get("timings") or {}
        if "cache_n" in timings:  # llama.cpp's server says how much of the prompt it reused
            self.stats.reused_tokens = int(timings["cache_n"])
        out = [Token(id=-1, text=text)] if text else []
        if reason == "length":  # our per-request cap, not the model's end: continue anew
            self.close_stream()
        elif reason is not None:
            out.append(Token(id=-1, text="", is_eog=True))
        return out

    def force(self, text: str) -> list[Token]:
        """Continue with a new request that carries ``text`` (e.g. the end-of-thinking marker)."""
        self.close_stream()
        self._pending.clear()
        self.text += text
        n = self._engine.count_tokens(text)
        self.stats.forced += n
        return [Token(id=-1, text=text)]

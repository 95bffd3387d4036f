"""Remote first, local when the server fails: a ``TextEngine`` over a remote and a local engine.

Every session starts on the server. If it refuses, drops the stream or stalls past its timeout,
the session carries on with the local engine from the rendered prompt plus exactly the text
already received: before the first token that is a plain retry of the step, and mid-answer
nothing already spoken is said twice (sentences are published as they complete). The switch is
reported (``on_fallback``: a log line and a diagnostics entry); the next session tries the
server again. The local engine is either loaded up front (warm: a fallback costs its prefill)
or on the first fallback (cold: plus its load time, and no memory until needed).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from bolt_agent.core.cancellation import CancelToken
from bolt_agent.core.llm.remote.engine import RemoteEngine
from bolt_agent.core.llm.remote.session import StreamSession
from bolt_agent.core.llm.remote.sse import RemoteError
from bolt_agent.core.llm.types import DecodeSession, SamplingParams, TextEngine, Token


class FallbackEngine(TextEngine):
    def __init__(
        self,
        remote: RemoteEngine,
        load_local: Callable[[], TextEngine],
        warm: bool = True,
        on_fallback: Callable[[str], None] = lambda reason: None,
    ):
        self.remote = remote
        self.config = remote.config
        self.chat_template = remote.chat_template
        self.speculation = None
        self._load_local = load_local
        self._local: TextEngine | None = None
        self._lock = threading.Lock()
        self.on_fallback = on_fallback
        self.fallbacks = 0
        self.last_fallback = ""
        self.load_s = 0.0
        if warm:
            self.local()

    def local(self) -> TextEngine:
        with self._lock:
            if self._local is None:
                self._local = self._load_local()
            return self._local

    @property
    def local_loaded(self) -> bool:
        return self._local is not None

    def describe(self) -> str:
        return self.remote.describe() + " (fallback: local)"

    def watch_cancel(self, source: Callable[[], CancelToken]) -> None:
        self.remote.watch_cancel(source)

    @property
    def last_ttft_s(self) -> float | None:
        return self.remote.last_ttft_s

    @property
    def n_ctx(self) -> int:
        return self.remote.n_ctx

    def count_tokens(self, text: str) -> int:
        return self.remote.count_tokens(text)

    def start(self, prompt: str) -> DecodeSession:
        return FallbackSession(self, prompt)

    def prefill(self, prompt: str) -> int:
        """Warm the server's cache; a failure here is not a turn's (the turn will retry)."""
        try:
            return self.remote.prefill(prompt)
        except RemoteError:
            return 0

    def switched(self, error: RemoteError) -> None:
        self.fallbacks += 1
        self.last_fallback = str(error)
        self.on_fallback(str(error))

    def close(self) -> None:
        self.remote.close()
        if self._local is not None and hasattr(self._local, "close"):
            self._local.close()
        self._local = None


class FallbackSession(DecodeSession):
    def __init__(self, engine: FallbackEngine, prompt: str):
        self._engine = engine
        self._prompt = prompt
        self._remote: StreamSession = engine.remote.start(prompt)  # type: ignore[assignment]
        self._local: DecodeSession | None = None
        self.stats = self._remote.stats  # the runner keeps this object: updated in place
        self._base = (0, 0.0)  # remote generated tokens and decode time at the switch
        self.fell_back = False

    @property
    def n_past(self) -> int:
        return (self._local or self._remote).n_past

    def sample(self, sampling: SamplingParams, grammar: str | None = None) -> Token:
        return self.step(sampling, grammar, 1)[0]

    def step(
        self, sampling: SamplingParams, grammar: str | None = None, limit: int = 1
    ) -> list[Token]:
        if self._local is None:
            try:
                return self._remote.step(sampling, grammar, limit)
            except RemoteError as exc:
                self._switch(exc)
        assert self._local is not None
        tokens = self._local.step(sampling, grammar, limit)
        self._sync()
        return tokens

    def _switch(self, error: RemoteError) -> None:
        self._remote.close()
        self._engine.switched(error)
        local = self._engine.local()
        self._base = (self.stats.generated, self.stats.decode_s)
        self._local = local.start(str(self._prompt) + self._remote.text)
        self.fell_back = True
        self.stats.reused_tokens = self._local.stats.reused_tokens

    def _sync(self) -> None:
        local = self._local.stats  # type: ignore[union-attr]
        self.stats.generated = self._base[0] + local.generated
        self.stats.decode_s = self._base[1] + local.decode_s
        self.stats.skipped_passes = local.skipped_passes
        if self.stats.first_token_at is None:
            self.stats.first_token_at = local.first_token_at

    def force(self, text: str) -> list[Token]:
        if self._local is not None:
            tokens = self._local.force(text)
            self.stats.forced += len(tokens)
            return tokens
        return self._remote.force(text)

    def close(self) -> None:
        self._remote.close()
        if self._local is not None:
            self._local.close()
            self._sync()  # (the local session counts a skipped last pass at close)

"""The LLM on an OpenAI-compatible server: a ``TextEngine`` whose sessions stream over HTTP.

``completions`` (llama.cpp's server, llama-cpp-python's, vLLM): the prompt is rendered here with
our own template and sent raw to ``/v1/completions``, so the knobs, the spoken-first parser, the
grammar (in the server's own field), thinking-budget forcing and cancellation work as with the
local engine. A session is a chain of streamed requests over one growing text: forcing text (the
end-of-thinking marker) or changing the grammar (thinking → answer in constrained mode) closes
the stream and continues with a new request from exactly what was consumed; the server's prompt
cache (``cache_prompt``, llama-cpp-python's own prefix reuse, vLLM's prefix caching) makes the
continuation cost only the new tokens. Sessions live in ``session.py`` and ``chat.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bolt_agent.core.cancellation import CancelToken
from bolt_agent.core.llm.chat_template import ChatTemplate
from bolt_agent.core.llm.remote.chat import ChatRequestTemplate, ChatSession
from bolt_agent.core.llm.remote.session import CompletionSession
from bolt_agent.core.llm.remote.sse import SseStream, request_json
from bolt_agent.core.llm.types import DecodeSession, SamplingParams, TextEngine

#: Grammar fields by server: llama.cpp / llama-cpp-python, vLLM (older and newer spelling).
GRAMMAR_FIELDS = ("grammar", "guided_grammar", "structured_outputs", "none")


@dataclass(frozen=True)
class RemoteConfig:
    base_url: str = "http://127.0.0.1:8080/v1"
    api_key: str = field(default="", repr=False)  # the value; never logged or stored in YAML
    model: str = ""  # the server's model name ('' = the server's only/default model)
    api: str = "completions"  # completions | chat
    timeout_s: float = 10.0  # refused / no byte for this long → RemoteError (stalled)
    grammar_field: str = "grammar"
    n_ctx: int = 4096  # what the history is budgeted against (the server's context ≥ this)
    max_tokens: int = 1024  # per request; the runner closes the stream when it has enough

    def url(self, endpoint: str) -> str:
        return self.base_url.rstrip("/") + "/" + endpoint.lstrip("/")

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


class RemoteEngine(TextEngine):
    """Streams from an OpenAI-compatible server. ``tokenize`` (a local vocabulary, see
    ``vocab.py``) counts prompt tokens exactly; without one a conservative estimate is used."""

    def __init__(
        self,
        config: RemoteConfig,
        template: ChatTemplate | None = None,
        tokenize: Callable[[str], list[int]] | None = None,
    ):
        if config.api not in ("completions", "chat"):
            raise ValueError(f"remote api must be completions or chat, not {config.api!r}")
        if config.grammar_field not in GRAMMAR_FIELDS:
            raise ValueError(f"grammar field must be one of {GRAMMAR_FIELDS}")
        self.config = config
        base = template or ChatTemplate.bundled()
        if config.api == "chat":
            base = ChatRequestTemplate(base)
        self.chat_template = base
        self._tokenize = tokenize
        self._cancel_source: Callable[[], CancelToken] | None = None
        self._open: DecodeSession | None = None
        self.last_ttft_s: float | None = None  # request sent → first token, last session
        self.speculation = None  # the server decides (e.g. DFlash in llama.cpp's server)
        self.load_s = 0.0

    def describe(self) -> str:
        c = self.config
        return f"{c.api} {c.base_url}" + (f" model={c.model}" if c.model else "")

    def watch_cancel(self, source: Callable[[], CancelToken]) -> None:
        """Where the runner's cancel token is read when a session starts: a cancel then closes
        the stream within ``POLL_S`` even while the server is silent."""
        self._cancel_source = source

    @property
    def n_ctx(self) -> int:
        return self.config.n_ctx

    def count_tokens(self, text: str) -> int:
        if self._tokenize is not None:
            return len(self._tokenize(text))
        return len(text.encode("utf-8")) // 3 + 1  # no vocabulary: rather too many than too few

    def start(self, prompt: str) -> DecodeSession:
        if self._open is not None:
            self._open.close()  # one generation at a time, as with the local engine
        if self.config.api == "chat":
            self._open = ChatSession(self, prompt)
        else:
            self._open = CompletionSession(self, prompt)
        return self._open

    def prefill(self, prompt: str) -> int:
        """Warm the server's prompt cache with one non-streamed token (completions only)."""
        if self.config.api != "completions":
            return 0
        body = self.body(SamplingParams(temperature=0.0), None)
        body.update(prompt=self.raw_prompt(prompt), stream=False, max_tokens=1)
        request_json(self.config.url("completions"), body, self.config.headers(), self.timeout)
        return self.count_tokens(prompt)

    @property
    def timeout(self) -> float:
        return self.config.timeout_s

    def raw_prompt(self, prompt: str) -> str:
        """The servers add BOS themselves: a rendered BOS would make two."""
        bos = self.chat_template.bos_token
        return prompt[len(bos) :] if bos and prompt.startswith(bos) else prompt

    def body(self, sampling: SamplingParams, grammar: str | None) -> dict[str, Any]:
        """The request body both APIs share: sampling, prompt cache, grammar."""
        c = self.config
        body: dict[str, Any] = {
            "stream": True,
            "max_tokens": c.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": sampling.top_k,
            "min_p": sampling.min_p,
            "repeat_penalty": sampling.repeat_penalty,
            "cache_prompt": True,  # llama.cpp's server: reuse the KV of the common prefix
        }
        if c.model:
            body["model"] = c.model
        if sampling.seed >= 0:
            body["seed"] = sampling.seed
        if grammar and c.grammar_field == "structured_outputs":
            body["structured_outputs"] = {"grammar": grammar}
        elif grammar and c.grammar_field != "none":
            body[c.grammar_field] = grammar
        return body

    def stream(self, endpoint: str, body: dict[str, Any]) -> SseStream:
        return SseStream(self.config.url(endpoint), body, self.config.headers(), self.timeout)

    def models(self) -> list[str]:
        """The server's model ids (``GET /models``): the doctor's reachability check."""
        answer = request_json(self.config.url("models"), None, self.config.headers(), self.timeout)
        return [str(m.get("id", "")) for m in answer.get("data", [])]

    def cancel_generation(self) -> int | None:
        token = self._cancel_source() if self._cancel_source is not None else None
        return None if token is None else token.current()

    def is_cancelled(self, generation: int | None) -> bool:
        if generation is None or self._cancel_source is None:
            return False
        return self._cancel_source().is_stale(generation)

    def close(self) -> None:
        if self._open is not None:
            self._open.close()
            self._open = None

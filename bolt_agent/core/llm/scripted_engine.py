"""A scripted TextEngine double: replays given outputs token by token.

For orchestration tests (dialogue budgeting, cancellation races, tool errors) and dry runs; it
uses a real tokenizer when one is given so token budgeting stays exact.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Sequence

from bolt_agent.core.llm.chat_template import ChatTemplate
from bolt_agent.core.llm.types import DecodeSession, SamplingParams, SessionStats, TextEngine, Token

_PIECE = re.compile(r"<[^<>]*>|\s*\S+?(?=\s|<|$)|\s+")
#: a script piece sampled as an end-of-generation token (the model stops here)
EOG_PIECE = "<|scripted_eog|>"


def whitespace_tokens(text: str) -> list[str]:
    return _PIECE.findall(text)


class ScriptedEngine(TextEngine):
    """Each ``start()`` replays the next script; pieces are markers, words and spaces."""

    def __init__(
        self,
        scripts: Iterable[str],
        n_ctx: int = 4096,
        count_tokens: Callable[[str], int] | None = None,
        on_token: Callable[[int], None] | None = None,
    ):
        self._scripts = list(scripts)
        self._n_ctx = n_ctx
        self._count = count_tokens or (lambda text: len(whitespace_tokens(text)))
        self.on_token = on_token  # test hook, called before each sampled token
        self.chat_template = ChatTemplate.bundled()
        self.prompts: list[str] = []
        #: test hook for ``next_token_probability``: (prompt, continuations) -> p (None: unknown)
        self.continuation_p: Callable[[str, list[str]], float | None] | None = None
        self.probes: list[tuple[str, list[str]]] = []
        #: test hook for ``channel_scores``: (prefixes, text) -> scores (None: the engine gives
        #: none); every call is kept in ``scored``
        self.channel: Callable[[list[str], str], list[float] | None] | None = None
        self.scored: list[tuple[list[str], str]] = []
        self.avoided: list[list[str]] = []  # each session's ``avoid`` call
        #: a prefix cache in text: the last prompt started, prefilled or probed
        self.cached = ""

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    def count_tokens(self, text: str) -> int:
        return self._count(text)

    def cached_tokens(self, prompt: str) -> int:
        # character by character is what is meant: these are texts, not paths
        return self.count_tokens(os.path.commonprefix([self.cached, prompt]))  # noqa: RUF071

    def prefill(self, prompt: str) -> int:
        self.cached = prompt
        return 0  # (nothing is computed: a prewarm reports no work)

    def next_token_probability(self, prompt: str, continuations: list[str]) -> float | None:
        self.probes.append((prompt, list(continuations)))
        self.cached = prompt
        return None if self.continuation_p is None else self.continuation_p(prompt, continuations)

    def channel_scores(
        self, prefixes: list[str], text: str, only: Sequence[int] | None = None
    ) -> list[float] | None:
        asked = list(prefixes) if only is None else [prefixes[i] for i in only]
        self.scored.append((asked, text))
        scores = None if self.channel is None else self.channel(prefixes, text)
        if scores is None or only is None:
            return scores
        return [scores[i] for i in only]

    def start(self, prompt: str) -> DecodeSession:
        self.prompts.append(prompt)
        self.cached = prompt
        script = self._scripts.pop(0) if self._scripts else ""
        return _ScriptedSession(whitespace_tokens(script), self.count_tokens(prompt), self)


class _ScriptedSession(DecodeSession):
    def __init__(self, pieces: list[str], prompt_tokens: int, engine: ScriptedEngine):
        self._pieces = pieces
        self._engine = engine
        self._n_past = prompt_tokens
        self.stats = SessionStats(prompt_tokens=prompt_tokens)

    @property
    def n_past(self) -> int:
        return self._n_past

    def sample(self, sampling: SamplingParams, grammar: str | None = None) -> Token:
        if self._engine.on_token is not None:
            self._engine.on_token(self.stats.generated)
        if not self._pieces:
            return Token(id=-1, text="", is_eog=True)
        if self._pieces[0] == EOG_PIECE:
            self._pieces.pop(0)
            return Token(id=-1, text="", is_eog=True)
        self.stats.generated += 1
        self._n_past += 1
        return Token(id=self.stats.generated, text=self._pieces.pop(0))

    def avoid(self, texts: Sequence[str]) -> None:
        """Recorded (``ScriptedEngine.avoided``): a script says what it says."""
        self._engine.avoided.append(list(texts))

    def force(self, text: str) -> list[Token]:
        """Take `text`; if the script contains it later, the model "continues" after it."""
        rest = "".join(self._pieces)
        if text and text in rest:
            self._pieces = whitespace_tokens(rest[rest.index(text) + len(text) :])
        pieces = whitespace_tokens(text)
        self.stats.forced += len(pieces)
        self._n_past += len(pieces)
        return [Token(id=0, text=p) for p in pieces]

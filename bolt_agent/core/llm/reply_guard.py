"""Sentences a reply should not say: the user's own words back, or a line said already.

A small base model continues the most recent text it saw, so "Thank you, that was lovely."
came back as "Thank you, that was lovely.", and the closing line it copied from one example
came after every tool result. The turn runner asks ``ReplyGuard.problem`` about each sentence
before it is spoken: a first sentence with a problem is sampled again, a later one is left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_WORD = re.compile(r"[a-z0-9']+")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower().replace("\u2019", "'"))


def copied_share(user: str, reply: str) -> float:
    """The share of the user's words the reply repeats in their order (longest common
    subsequence of words ÷ the user's words; 0 for an empty request)."""
    a, b = words(user), words(reply)
    if not a or not b:
        return 0.0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1] / len(a)


def sentence_key(text: str) -> str:
    """What makes two sentences the same line: their words, without case or punctuation."""
    return " ".join(words(text))


#: the most words an opener has ("Yes," "Oh well,"): a first piece this short is a habit of the
#: model, not something it means to say
OPENER_WORDS = 2


class ReplyGuard:
    """``copy_limit``: a sentence repeating this share of the user's words (of a request of at
    least ``min_user_words``) is a copy."""

    def __init__(self, copy_limit: float = 0.6, min_user_words: int = 3):
        self.copy_limit = copy_limit
        self.min_user_words = min_user_words

    def openers(self, first_pieces: Iterable[str]) -> list[str]:
        """The openers recent turns began with (their first pieces of at most
        ``OPENER_WORDS`` words), which the next turn's first token is steered away from.

        A greedy base model opens most answers the same way ("Yes," "Aye,"). Judged after it is
        decoded, that opener repeats, and the whole step is decoded again: in the voice loop
        the first sentence came 2.4-8.9x later than without the guard (docs/benchmarks.md,
        "The reply guard"). Steered before it is sampled, it costs nothing; a repeat that
        still comes is judged as before."""
        out: list[str] = []
        for piece in first_pieces:
            if 0 < len(words(piece)) <= OPENER_WORDS and piece not in out:
                out.append(piece)
        return out

    def problem(
        self, sentence: str, user_text: str, said: Iterable[str], reply: str = ""
    ) -> str | None:
        """Why ``sentence`` should not be said (None: it may be). ``said``: the sentences the
        conversation already holds (earlier turns and this one); ``reply``: what this turn said
        before it (a copy split into clauses is still a copy)."""
        key = sentence_key(sentence)
        if not key:
            return None
        if key in {sentence_key(s) for s in said}:
            return f"repeats {sentence!r}"
        if len(words(user_text)) >= self.min_user_words:
            share = copied_share(user_text, f"{reply} {sentence}")
            if share >= self.copy_limit:
                return f"copies {share:.0%} of the user's words"
        return None

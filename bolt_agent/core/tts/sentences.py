"""Incremental sentence splitting for streaming speech to TTS."""

from __future__ import annotations

import re

_ABBREVIATIONS = {
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "e.g", "i.e", "approx", "no",
}  # fmt: skip
_END = re.compile(r"[.!?…]+[\"')\]]*(?=\s)|\n+")
_CLAUSE = re.compile(r"[.!?…]+[\"')\]]*(?=\s)|[,;:—–]+(?=\s)|\n+")
#: a clause mark right after a letter, at the end of what has come so far ("Yes,")
_CLAUSE_AT_END = re.compile(r"(?<=[^\W\d_])[,;:]$")


class SentenceSplitter:
    """Push text fragments; get back each sentence as soon as it is complete.

    ``first_clause_chars`` > 0 lets the first piece end at a clause boundary (``, ; : —``)
    once it has that many characters: "Sure, let me look." gives "Sure," at once, so the voice
    can start while the rest of the sentence is still being generated (a comma, semicolon or
    colon right after a letter ends it as soon as it comes; other marks once a space follows)."""

    def __init__(self, first_clause_chars: int = 0) -> None:
        self._buf = ""
        self._first_clause_chars = first_clause_chars
        self._emitted = 0

    def push(self, text: str) -> list[str]:
        self._buf += text
        out: list[str] = []
        start = 0
        pattern = _CLAUSE if self._first_clause_chars > 0 and not self._emitted else _END
        for m in pattern.finditer(self._buf):
            candidate = self._buf[start : m.end()]
            if m.group().startswith(".") and self._is_abbreviation(candidate[:-1]):
                continue
            short = len(candidate.strip()) - len(m.group()) < self._first_clause_chars
            if m.group()[0] in ",;:—–" and (out or short):
                continue  # clauses only end the first piece, and only a long enough one
            if candidate.strip():
                out.append(candidate.strip())
            start = m.end()
        self._buf = self._buf[start:]
        if not out and not self._emitted and self._first_clause_chars > 0:
            # the first clause goes at its mark, not one token later when a space shows that
            # the mark ends it: after a letter a comma ends a clause ("Yes,"); after a digit it
            # may be inside a number ("1,000"), so that one waits
            piece = self._buf.strip()
            if _CLAUSE_AT_END.search(piece) and len(piece) - 1 >= self._first_clause_chars:
                out.append(piece)
                self._buf = ""
        self._emitted += len(out)
        return out

    def flush(self) -> str | None:
        """The incomplete rest (at end of speech), or None if there is nothing to say."""
        rest, self._buf = self._buf.strip(), ""
        return rest or None

    @staticmethod
    def _is_abbreviation(text: str) -> bool:
        words = text.rstrip(".").split()
        return bool(words) and words[-1].lower().rstrip(".") in _ABBREVIATIONS

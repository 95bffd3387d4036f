"""Incremental sentence splitting for streaming speech to TTS."""

from __future__ import annotations

import re

_ABBREVIATIONS = {
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "e.g", "i.e", "approx", "no",
}  # fmt: skip
_END = re.compile(r"[.!?…]+[\"')\]]*(?=\s)|\n+")


class SentenceSplitter:
    """Push text fragments; get back each sentence as soon as it is complete."""

    def __init__(self) -> None:
        self._buf = ""

    def push(self, text: str) -> list[str]:
        self._buf += text
        out: list[str] = []
        start = 0
        for m in _END.finditer(self._buf):
            candidate = self._buf[start : m.end()]
            if m.group().startswith(".") and self._is_abbreviation(candidate[:-1]):
                continue
            if candidate.strip():
                out.append(candidate.strip())
            start = m.end()
        self._buf = self._buf[start:]
        return out

    def flush(self) -> str | None:
        """The incomplete rest (at end of speech), or None if there is nothing to say."""
        rest, self._buf = self._buf.strip(), ""
        return rest or None

    @staticmethod
    def _is_abbreviation(text: str) -> bool:
        words = text.rstrip(".").split()
        return bool(words) and words[-1].lower().rstrip(".") in _ABBREVIATIONS

"""Short phrases said before are played from memory instead of being synthesised again.

A companion robot opens most answers the same few ways ("Yes,", "Sure!", "Hello!"), and that
first clause is what the user waits for: llm_node sends it on its own (``first_clause_chars``)
so that audio starts early, which puts Piper's synthesis of it (50-70 ms on one core here) right
on the voice-to-voice path. ``PhraseCache`` keeps the audio of texts of up to ``max_chars``
characters, by their exact text ("Yes," and "Yes." are said differently), the least recently
used going first beyond ``max_entries`` (a second of audio is 44 KB at 22 kHz). A repeated
phrase then sounds the same each time, where Piper would draw new noise; ``max_chars`` 0 turns
the cache off. The cached arrays are read-only: a consumer that wrote into one would change
every later use of the phrase.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np


class PhraseCache:
    """``synthesize`` (text → int16 audio) with the short phrases remembered; thread-safe."""

    def __init__(
        self,
        synthesize: Callable[[str], np.ndarray],
        max_chars: int = 24,
        max_entries: int = 32,
    ) -> None:
        if max_chars < 0 or max_entries < 1:
            raise ValueError(f"max_chars ({max_chars}) >= 0 and max_entries ({max_entries}) >= 1")
        self._synthesize = synthesize
        self.max_chars, self.max_entries = max_chars, max_entries
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, np.ndarray] = OrderedDict()
        self.hits = 0
        self.misses = 0  # short phrases synthesised (and kept); longer texts are not counted

    def __call__(self, text: str) -> np.ndarray:
        if not 0 < len(text) <= self.max_chars:
            return self._synthesize(text)
        with self._lock:
            audio = self._entries.get(text)
            if audio is not None:
                self._entries.move_to_end(text)
                self.hits += 1
                return audio
        audio = np.array(self._synthesize(text), dtype=np.int16)  # our own copy, then frozen
        if not len(audio):
            return audio  # nothing said: nothing worth keeping
        audio.setflags(write=False)
        with self._lock:
            self.misses += 1
            self._entries[text] = audio
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return audio

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def clear(self) -> None:
        """Forget every phrase (the voice or its settings changed)."""
        with self._lock:
            self._entries.clear()

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "phrase_hits": self.hits,
                "phrase_misses": self.misses,
                "phrases_kept": len(self._entries),
            }

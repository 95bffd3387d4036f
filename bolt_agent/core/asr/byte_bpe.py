"""GPT-2 byte-level BPE, read from a Hugging Face ``tokenizer.json`` without the ``tokenizers``
package: whisper's tokenizer for the ASR node, with less memory.

Whisper's node needs the tokenizer for two things: the text of the generated tokens (every
utterance) and the ids of a few dozen symbols to suppress (once, at load). Importing
``tokenizers`` and loading whisper's 50k-token BPE cost 5.5 + 18.7 MiB in a bare process; with
this module the whisper engine, loaded, warmed up and trimmed, holds 120.5 instead of 128.4 MiB.
Decoding keeps one bytes blob and an offset array (~0.6 MiB); the merges needed to encode live
only as long as the encoder that uses them (whisper's vocabulary builds its suppression list
with the load's parse, then drops it).

``test_whisper_ct2`` checks both directions against ``tokenizers`` on the whole vocabulary."""

from __future__ import annotations

import json
import re
from array import array
from functools import cache
from itertools import pairwise
from pathlib import Path

# GPT-2's pre-tokenizer ('s|'t|…| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+) with the
# standard library's classes: [^\W\d_] is a letter, \d a digit. They differ from \p{L} and
# \p{N} only on numerals that are not digits (½, Ⅻ), which join the letters here. "_" is a
# word character to ``re`` but punctuation to GPT-2.
_PRETOKEN = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+")


@cache
def byte_chars() -> tuple[str, ...]:
    """GPT-2's byte → printable character table (bytes that print stand for themselves)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return tuple(chars[b] for b in range(256))


def _read(path: str | Path) -> dict:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    model = data.get("model", {})
    if model.get("type") != "BPE" or (data.get("pre_tokenizer") or {}).get("type") != "ByteLevel":
        raise ValueError(f"{path}: not a byte-level BPE tokenizer")
    return data


class ByteLevelDecoder:
    """Token ids → text for the ordinary vocabulary (special tokens are not text)."""

    def __init__(self, vocab: dict[str, int]) -> None:
        to_byte = {c: b for b, c in enumerate(byte_chars())}
        size = max(vocab.values()) + 1
        pieces: list[bytes] = [b""] * size
        for token, index in vocab.items():
            pieces[index] = bytes(to_byte[c] for c in token)
        self._offsets = array("I", [0])
        for piece in pieces:
            self._offsets.append(self._offsets[-1] + len(piece))
        self._blob = b"".join(pieces)

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def decode(self, tokens: list[int]) -> str:
        """Join the tokens' bytes; an incomplete UTF-8 sequence becomes U+FFFD, as in
        ``tokenizers``. Ids outside the vocabulary are skipped."""
        off, blob, n = self._offsets, self._blob, len(self)
        raw = b"".join(blob[off[t] : off[t + 1]] for t in tokens if 0 <= t < n)
        return raw.decode("utf-8", errors="replace")


class ByteLevelEncoder:
    """Text → token ids, as ``Tokenizer.encode(text, add_special_tokens=False).ids``: added
    (special) tokens written in the text are matched first, the rest pre-tokenized and merged
    pair by pair in the merges' order."""

    def __init__(
        self, vocab: dict[str, int], merges: list, added: dict[str, int], ignore_merges: bool
    ) -> None:
        self._vocab = vocab
        self._ignore_merges = ignore_merges  # a pre-token in the vocabulary is one token
        self._ranks = {
            (tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1))): rank
            for rank, m in enumerate(merges)
        }
        self._added = added
        self._special = (
            re.compile("|".join(re.escape(t) for t in sorted(added, key=len, reverse=True)))
            if added
            else None
        )
        self._chars = byte_chars()

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        start = 0
        for match in self._special.finditer(text) if self._special else ():
            ids += self._encode_plain(text[start : match.start()])
            ids.append(self._added[match.group()])
            start = match.end()
        return ids + self._encode_plain(text[start:])

    def _encode_plain(self, text: str) -> list[int]:
        ids: list[int] = []
        for word in _PRETOKEN.findall(text):
            symbols = "".join(self._chars[b] for b in word.encode("utf-8"))
            if self._ignore_merges and symbols in self._vocab:
                ids.append(self._vocab[symbols])
                continue
            ids += (self._vocab[part] for part in self._merge(symbols))
        return ids

    def _merge(self, word: str) -> list[str]:
        parts = list(word)
        while len(parts) > 1:
            ranks = [self._ranks.get(pair) for pair in pairwise(parts)]
            known = [r for r in ranks if r is not None]
            if not known:
                break
            rank = min(known)
            merged: list[str] = []
            i = 0
            while i < len(parts):  # every occurrence of the best pair, left to right
                if i + 1 < len(parts) and self._ranks.get((parts[i], parts[i + 1])) == rank:
                    merged.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        return parts


class ByteLevelTokenizer:
    """A ``tokenizer.json`` kept small: special tokens and the decoder resident, the encoder
    built on demand (``encoder()``) for one-off work such as suppression lists.
    ``keep_encoder``: the first ``encoder()`` call reuses the parse made at load (one read of
    the file for a caller that encodes once, right after loading)."""

    def __init__(self, path: str | Path, keep_encoder: bool = False) -> None:
        self.path = Path(path)
        model = (data := _read(self.path))["model"]
        self.added: dict[str, int] = {t["content"]: t["id"] for t in data.get("added_tokens", [])}
        self.decoder = ByteLevelDecoder(model["vocab"])
        self._loaded = self._encoder(model) if keep_encoder else None

    def token_to_id(self, token: str) -> int | None:
        return self.added.get(token)

    def encoder(self) -> ByteLevelEncoder:
        loaded, self._loaded = self._loaded, None  # handed out once: not kept resident
        return loaded or self._encoder(_read(self.path)["model"])

    def _encoder(self, model: dict) -> ByteLevelEncoder:
        return ByteLevelEncoder(
            model["vocab"], model["merges"], self.added, bool(model.get("ignore_merges"))
        )

    def decode(self, tokens: list[int]) -> str:
        return self.decoder.decode(tokens)

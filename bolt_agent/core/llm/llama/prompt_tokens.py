"""Tokenizing a prompt that extends the previous one without re-tokenizing the shared part.

Every step of a conversation renders the whole history again; llama.cpp tokenizes a 4K-token
prompt in ~8 ms here (more on a Jetson, and 8x longer prompts there), which is most of what
reusing the KV cache saves. For SentencePiece vocabularies the work can be skipped exactly: the
tokenizer only ever merges adjacent symbols into vocabulary tokens, so between two characters
that appear side by side in no vocabulary token there is always a token boundary, and the text on
either side tokenizes independently. The previous prompt's tokens are kept up to such a position
before the point where the new prompt departs from it; only the rest is tokenized.

Applies to SPM vocabularies without a space prefix and without whitespace-stripping special
tokens; anything else (and any mismatch in the first few self-checks) tokenizes in full.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np
from llama_cpp import llama_cpp as capi

SCAN_CHARS = 512  # how far before the divergence a split position is looked for
SELF_CHECKS = 3  # incremental results compared with a full tokenization before trusting it
_STRIP = capi.LLAMA_TOKEN_ATTR_LSTRIP | capi.LLAMA_TOKEN_ATTR_RSTRIP


class PromptTokenizer:
    """``tokenize(text)`` with the special-token parsing the engine uses; one per llama model."""

    def __init__(self, llm) -> None:
        self._llm = llm
        self._lock = threading.Lock()
        self._text = ""
        self._tokens: list[int] = []
        self._ends = np.zeros(0, dtype=np.int64)  # byte offset after each token
        self._checks = SELF_CHECKS
        self._piece_len, self._pairs = _vocab_tables(llm)
        self.incremental = 0  # prompts tokenized from a shared prefix (for tests/benchmarks)

    @property
    def enabled(self) -> bool:
        return self._pairs is not None

    def _full(self, text: str) -> list[int]:
        return self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def __call__(self, text: str) -> list[int]:
        with self._lock:
            if text == self._text:
                return list(self._tokens)
            tokens = self._incremental(text) if self.enabled else None
            if tokens is None:
                tokens = self._full(text)
            self._remember(text, tokens)
            return list(tokens)

    def _incremental(self, text: str) -> list[int] | None:
        split = self._split(text, _common_prefix(self._text, text))
        if split <= 0:
            return None
        offset = len(text[:split].encode("utf-8"))
        j = int(np.searchsorted(self._ends, offset))
        if j >= len(self._ends) or self._ends[j] != offset:
            return None  # not a token boundary of the previous prompt (cannot happen for SPM)
        tokens = self._tokens[: j + 1] + self._full(text[split:])
        if self._checks > 0:  # trust, after checking it on this model
            self._checks -= 1
            if tokens != self._full(text):
                self._pairs = None
                return None
        self.incremental += 1
        return tokens

    def _split(self, text: str, common: int) -> int:
        """The last position inside the shared prefix (the characters on both sides shared, so
        the previous prompt has the same boundary) that no vocabulary token can span."""
        pairs = self._pairs
        assert pairs is not None
        low, high = max(0, common - SCAN_CHARS), min(common - 1, len(text) - 1)
        if high <= low:
            return 0
        codes = np.fromiter(map(ord, text[low : high + 1]), dtype=np.int64)
        keys = codes[:-1] << 32 | codes[1:]  # keys[i]: the pair on both sides of low + 1 + i
        at = np.minimum(np.searchsorted(pairs, keys), max(0, len(pairs) - 1))
        free = np.flatnonzero(pairs[at] != keys) if len(pairs) else np.arange(len(keys))
        return int(low + 1 + free[-1]) if len(free) else 0

    def _remember(self, text: str, tokens: list[int]) -> None:
        ends = np.cumsum(self._piece_len[np.asarray(tokens, dtype=np.int64)])
        if len(ends) and ends[-1] != len(text.encode("utf-8")):
            text, tokens, ends = "", [], np.zeros(0, dtype=np.int64)  # pieces do not add up
        self._text, self._tokens, self._ends = text, tokens, ends


def _common_prefix(a: str, b: str) -> int:
    """Length of the common prefix of two strings (binary search on C-speed comparisons)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _vocab_tables(llm) -> tuple[np.ndarray, np.ndarray | None]:
    """(byte length of every token's text, the character pairs inside some token as sorted
    ``first << 32 | second`` keys — None when the incremental path does not apply to this
    vocabulary). Arrays, not a set of ints: 1.3 MiB for Gemma's 262k tokens and 34k pairs where
    an int64 length array and a frozenset took 5 MiB for the life of the process."""
    vocab = llm._model.vocab
    n_vocab = capi.llama_vocab_n_tokens(vocab)
    joined = _joined_pieces(llm, n_vocab)
    if joined is None:
        pieces = _pieces_one_by_one(llm, n_vocab)
        lengths = np.fromiter((len(p) for p in pieces), dtype=np.int32, count=n_vocab)
        blob = b"\0".join(pieces)
        del pieces
    else:
        blob, lengths = joined
    attrs = (capi.llama_vocab_get_attr(vocab, i) for i in range(n_vocab))
    strip = any(a & _STRIP for a in attrs)
    space_prefix = str(llm.metadata.get("tokenizer.ggml.add_space_prefix", "")).lower() == "true"
    if capi.llama_vocab_type(vocab) != capi.LLAMA_VOCAB_TYPE_SPM or space_prefix or strip:
        return lengths, None
    text = blob.decode("utf-8", errors="replace")
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
    left, right = codes[:-1], codes[1:]
    keys = np.unique((left << 32 | right)[(left != 0) & (right != 0)])  # not across separators
    return lengths, keys


def _joined_pieces(llm, n_vocab: int) -> tuple[bytes, np.ndarray] | None:
    """Every token's text (special tokens as written) in one detokenize call, NUL after each,
    and each text's byte length; None when the vocabulary has no byte token for NUL to
    separate them. No per-token Python object is made: a list of 262k ``bytes`` (Gemma's
    vocabulary) left ~10 MiB of fragmented heap behind for the life of the process."""
    vocab = llm._model.vocab
    nul = llm.tokenize(b"\0", add_bos=False, special=False)
    if len(nul) != 1 or nul[0] >= n_vocab:
        return None
    ids = np.empty(2 * n_vocab, dtype=np.int32)
    ids[0::2], ids[1::2] = np.arange(n_vocab, dtype=np.int32), nul[0]
    size = 64 * n_vocab
    out = ctypes.create_string_buffer(size)
    tokens = ids.ctypes.data_as(ctypes.POINTER(capi.llama_token))
    n = capi.llama_detokenize(vocab, tokens, len(ids), out, size, False, True)
    if not 0 < n <= size:
        return None
    blob = out.raw[:n]
    del out
    ends = np.flatnonzero(np.frombuffer(blob, dtype=np.uint8) == 0)
    if len(ends) != n_vocab:
        return None
    lengths = (ends - np.concatenate(([-1], ends[:-1])) - 1).astype(np.int32)
    if lengths[nul[0]] != 0:
        return None
    lengths[nul[0]] = 1  # the separator's own text
    return blob, lengths


def _pieces_one_by_one(llm, n_vocab: int) -> list[bytes]:
    """Every token's text, one call per token (vocabularies without a NUL byte token)."""
    vocab = llm._model.vocab
    buf = ctypes.create_string_buffer(1024)
    pieces = []
    for i in range(n_vocab):
        n = capi.llama_token_to_piece(vocab, i, buf, len(buf), 0, True)
        pieces.append(buf.raw[: max(n, 0)])
    return pieces

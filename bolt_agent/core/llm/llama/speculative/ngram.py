"""Prompt-lookup drafting: no extra model, drafts are copied from earlier in the context.

The last ``k`` tokens (k from ``max_match`` down to ``min_match``) are looked up in the context;
the tokens that followed their most recent earlier occurrence are the draft. This pays off when
the answer repeats the prompt (names, tool arguments, quoted scene text, structured output) and
costs nothing measurable when it does not (no match: a plain one-token step).
"""

from __future__ import annotations

import numpy as np

from bolt_agent.core.llm.llama.speculative.decoder import Drafter


class NgramDrafter(Drafter):
    name = "ngram"

    def __init__(self, n_max: int = 7, min_match: int = 2, max_match: int = 4):
        if not 1 <= min_match <= max_match:
            raise ValueError(f"need 1 <= min_match <= max_match, got {min_match}, {max_match}")
        self.n_max = n_max
        self.min_match = min_match
        self.max_match = max_match

    def propose(self, history: np.ndarray, pending: int, n: int) -> list[int]:
        seq = np.append(np.asarray(history, dtype=np.int32), np.int32(pending))
        return lookup(seq, n, self.min_match, self.max_match)


def lookup(seq: np.ndarray, n: int, min_match: int, max_match: int) -> list[int]:
    """Tokens following the latest earlier occurrence of the longest matching suffix of `seq`."""
    seq = np.ascontiguousarray(seq, dtype=np.int32)
    hay = seq.tobytes()
    for size in range(min(max_match, len(seq) - 1), min_match - 1, -1):
        needle = seq[-size:].tobytes()
        # prefer the latest occurrence followed by `n` tokens, then any earlier than the suffix
        for last_end in (len(seq) - n, len(seq) - 1):
            pos = _rfind_aligned(hay, needle, last_end * 4)
            if pos >= 0:
                start = pos // 4 + size
                return seq[start : start + n].tolist()
    return []


def _rfind_aligned(hay: bytes, needle: bytes, end: int) -> int:
    """Byte offset of the last token-aligned occurrence of `needle` ending by `end`, or -1."""
    while end >= len(needle):
        pos = hay.rfind(needle, 0, end)
        if pos < 0 or pos % 4 == 0:
            return pos
        end = pos + len(needle) - 1
    return -1

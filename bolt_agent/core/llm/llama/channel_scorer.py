"""log P(text | prefix) for several prefixes at once, on a llama.cpp context of its own.

Tool selection scores a request against each option's description (the noisy-channel direction:
how well the option explains the request). The prefixes are the same every turn, so each stays
in the KV cache as its own sequence and a request costs one batched decode of its tokens per
prefix. A context of its own keeps the conversation's cached prompt where it is: scoring in the
main context would evict it and cost a full prefill on the next turn.
"""

from __future__ import annotations

import threading

import numpy as np

#: the request's tokens scored at most (the start of a long request says what it asks for)
MAX_TEXT_TOKENS = 48
#: logits rows per decode: each row is n_vocab floats (1 MB for a 262k vocabulary), so this
#: sizes the context's output buffer; the physical batch (``n_ubatch``) is kept as small, since
#: it sizes the compute buffer by the same n_vocab floats a row
MAX_ROWS_PER_DECODE = 16


class ChannelScorer:
    """Scores on ``model`` (a llama_cpp ``LlamaModel``) with ``tokenize(text, bos)``."""

    def __init__(self, model, tokenize, n_threads: int):
        from llama_cpp import llama_cpp as capi

        self._capi = capi
        self._model = model
        self._ctx = None  # made for the prefixes (``_load``): as many cells as they need
        self._n_vocab = capi.llama_vocab_n_tokens(model.vocab)
        self._tokenize = tokenize
        self._n_threads = max(1, n_threads)
        self._prefixes: list[list[int]] = []  # cached, one sequence each, in order
        self._key: tuple[str, ...] = ()
        self._lock = threading.Lock()

    def close(self) -> None:
        if self._ctx is not None:
            self._ctx.close()
            self._ctx = None

    def _context(self, n_ctx: int, n_seq: int):
        from llama_cpp._internals import LlamaContext

        self.close()
        params = self._capi.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_ctx
        params.n_ubatch = MAX_ROWS_PER_DECODE
        params.n_seq_max = n_seq
        params.n_threads = params.n_threads_batch = self._n_threads
        params.kv_unified = True  # one cache shared by the sequences, not n_ctx / n_seq_max each
        self._ctx = LlamaContext(model=self._model, params=params, verbose=False)

    def scores(self, prefixes: list[str], text: str) -> list[float]:
        """Summed log-probability of ``text``'s tokens after each prefix."""
        with self._lock:
            self._load(tuple(prefixes))
            tokens = self._tokenize(text, False)[:MAX_TEXT_TOKENS]
            if not tokens:
                return [0.0] * len(prefixes)
            items = []
            for seq, head in enumerate(self._prefixes):
                # the prefix's last token is decoded again with the text: its logits predict
                # the text's first token (the cache keeps everything before it)
                self._ctx.kv_cache_seq_rm(seq, len(head) - 1, -1)
                items.append((seq, len(head) - 1, [head[-1], *tokens]))
            rows = self._decode(items, with_logits=True)
            out = []
            for per_seq in rows:
                total = 0.0
                for j, token in enumerate(tokens):
                    row = per_seq[j].astype(np.float64)
                    top = row.max()
                    total += row[token] - top - np.log(np.exp(row - top).sum())
                out.append(float(total))
            return out

    def _load(self, key: tuple[str, ...]) -> None:
        if key == self._key:
            return
        self._key = ()
        self._prefixes = [self._tokenize(p, True) for p in key]
        need = sum(len(p) for p in self._prefixes) + len(key) * (MAX_TEXT_TOKENS + 1)
        self._context(-(-need // 256) * 256, max(1, len(key)))
        self._decode([(i, 0, p[:-1]) for i, p in enumerate(self._prefixes) if len(p) > 1])
        self._key = key

    def _decode(self, items, with_logits: bool = False) -> list[list[np.ndarray]]:
        """Decode ``(seq, first position, tokens)`` items, in batches of at most
        ``MAX_ROWS_PER_DECODE`` rows when logits are wanted; returns each item's logits rows."""
        from llama_cpp._internals import LlamaBatch

        out: list[list[np.ndarray]] = []
        batch_items: list = []

        def flush():
            n = sum(len(t) for _, _, t in batch_items)
            if n == 0:
                return
            holder = LlamaBatch(n_tokens=n, embd=0, n_seq_max=1, verbose=False)
            b, j, rows = holder.batch, 0, []
            b.n_tokens = n
            for seq, pos0, tokens in batch_items:
                mine = []
                for i, token in enumerate(tokens):
                    b.token[j], b.pos[j], b.n_seq_id[j] = token, pos0 + i, 1
                    b.seq_id[j][0] = seq
                    b.logits[j] = with_logits
                    if with_logits:
                        mine.append(j)
                    j += 1
                rows.append(mine)
            rc = self._capi.llama_decode(self._ctx.ctx, b)
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc} while scoring")
            for mine in rows:
                out.append(
                    [
                        np.ctypeslib.as_array(
                            self._capi.llama_get_logits_ith(self._ctx.ctx, r), (self._n_vocab,)
                        ).copy()
                        for r in mine
                    ]
                )
            holder.close()
            batch_items.clear()

        used = 0
        for item in items:
            size = len(item[2])
            if batch_items and (used + size > (MAX_ROWS_PER_DECODE if with_logits else 1024)):
                flush()
                used = 0
            batch_items.append(item)
            used += size
        flush()
        return out

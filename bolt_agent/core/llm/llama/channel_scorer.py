"""log P(text | prefix) for several prefixes at once, on a llama.cpp context of its own.

Tool selection scores a request against each option's description (the noisy-channel direction:
how well the option explains the request). The prefixes are the same every turn, so each stays
in the KV cache as its own sequence and a request costs one batched decode of its tokens per
prefix. A context of its own keeps the conversation's cached prompt where it is: scoring in the
main context would evict it and cost a full prefill on the next turn.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

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

    def scores(
        self, prefixes: list[str], text: str, only: Sequence[int] | None = None
    ) -> list[float]:
        """Summed log-probability of ``text``'s tokens after each prefix; ``only``: after
        the prefixes at these indexes alone, in that order (the others stay cached, so a
        selection can score its options first and an argument's values only when needed)."""
        with self._lock:
            self._load(tuple(prefixes))
            seqs = range(len(prefixes)) if only is None else list(only)
            tokens = self._tokenize(text, False)[:MAX_TEXT_TOKENS]
            if not tokens:
                return [0.0] * len(seqs)
            items = []
            for seq in seqs:
                head = self._prefixes[seq]
                # the prefix's last token is decoded again with the text: its logits predict
                # the text's first token (the cache keeps everything before it); the text's
                # last token predicts nothing, so it is not decoded
                self._ctx.kv_cache_seq_rm(seq, len(head) - 1, -1)
                items.append((seq, len(head) - 1, [head[-1], *tokens[:-1]], tokens))
            return [float(sum(rows)) for rows in self._decode(items)]

    def _load(self, key: tuple[str, ...]) -> None:
        if key == self._key:
            return
        self._key = ()
        self._prefixes = [self._tokenize(p, True) for p in key]
        need = sum(len(p) for p in self._prefixes) + len(key) * (MAX_TEXT_TOKENS + 1)
        self._context(-(-need // 256) * 256, max(1, len(key)))
        self._decode([(i, 0, p[:-1], []) for i, p in enumerate(self._prefixes) if len(p) > 1])
        self._key = key

    def _decode(self, items) -> list[list[float]]:
        """Decode ``(seq, first position, tokens, targets)`` items: row ``j`` of an item
        predicts ``targets[j]`` (no targets: a prefill). Batches hold at most
        ``MAX_ROWS_PER_DECODE`` tokens when scoring. Returns each item's log-probabilities of
        its targets, computed on the context's logits in place (one array op a batch: the
        log-softmax over the vocabulary is a third of the time when done row by row)."""
        from llama_cpp._internals import LlamaBatch

        out: list[list[float]] = []
        batch_items: list = []

        def flush():
            n = sum(len(t) for _, _, t, _ in batch_items)
            if n == 0:
                return
            holder = LlamaBatch(n_tokens=n, embd=0, n_seq_max=1, verbose=False)
            b, j, wanted = holder.batch, 0, []
            b.n_tokens = n
            for seq, pos0, tokens, targets in batch_items:
                for i, token in enumerate(tokens):
                    b.token[j], b.pos[j], b.n_seq_id[j] = token, pos0 + i, 1
                    b.seq_id[j][0] = seq
                    b.logits[j] = i < len(targets)
                    j += 1
                wanted += targets
            rc = self._capi.llama_decode(self._ctx.ctx, b)
            holder.close()
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc} while scoring")
            if wanted:
                # the rows asked for, in batch order (llama.cpp keeps them contiguous)
                ptr = self._capi.llama_get_logits(self._ctx.ctx)
                logits = np.ctypeslib.as_array(ptr, (len(wanted), self._n_vocab))
                top = logits.max(axis=1, keepdims=True)
                picked = logits[np.arange(len(wanted)), wanted] - top[:, 0]
                z = logits - top
                np.exp(z, out=z)
                norm = np.log(z.sum(axis=1, dtype=np.float64))
                logp = (picked.astype(np.float64) - norm).tolist()
            k = 0
            for _, _, _, targets in batch_items:
                out.append(logp[k : k + len(targets)] if targets else [])
                k += len(targets)
            batch_items.clear()

        used = 0
        for item in items:
            size, scoring = len(item[2]), bool(item[3])
            if batch_items and (used + size > (MAX_ROWS_PER_DECODE if scoring else 1024)):
                flush()
                used = 0
            batch_items.append(item)
            used += size
        flush()
        return out

"""Resident bytes of mmap'ed embedding tables after N distinct tokens (``/proc/self/smaps``).

    python -m bolt_agent.benchmarks.embedding_residency --model M.gguf --tokens 100 \
        [--embeddings mmap] [--n-ubatch 64]

Loads the model through ``LlamaEngine`` (CPU) after dropping the file's page cache, decodes N
distinct token ids and prints JSON: for the per-layer table and the token table, the resident
bytes of their mappings and a model of them (``jetson_plan`` bounds both for Bolt by tokens x
pages per row x 64 KiB):

- a lazy table (per-layer, ``embeddings: mmap``): llama.cpp maps it ``MADV_RANDOM`` and never
  pre-reads it, so a fault reads one page: resident = the pages the rows of the tokens span and
  the edge pages the table shares with its neighbours. Measured: within two pages of that for one
  micro-batch of up to ~90 rows; beyond ~96 rows it grows faster on this kernel (6.18, ext4,
  plausibly large page-cache folios), staying under the plan's bound;
- a table that llama.cpp pre-read (``MADV_WILLNEED``, the token table): its pages are in the page
  cache, and the kernel's fault-around maps the aligned 64 KiB window of a fault.
Run it in a fresh process: the measurement needs the mapping as the load left it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from bolt_agent.benchmarks.page_cache import evict

PAGE = os.sysconf("SC_PAGE_SIZE")
FAULT_AROUND = 64 * 1024  # Linux fault_around_bytes default (debugfs; not readable unprivileged)


def tensor_range(path: str | Path, name: str) -> tuple[int, int, int]:
    """(file offset, bytes, rows) of a 2-D GGUF tensor."""
    from gguf import GGUFReader

    for t in GGUFReader(str(path)).tensors:
        if t.name == name:
            return int(t.data_offset), int(t.n_bytes), int(t.shape[-1])
    raise KeyError(name)


def smaps(path: str | Path) -> list[dict[str, int]]:
    """This process's mappings of ``path``: start, end, file offset, Rss bytes."""
    real, out, cur = os.path.realpath(path), [], None
    with open("/proc/self/smaps") as f:
        for line in f:
            m = re.match(r"([0-9a-f]+)-([0-9a-f]+) \S+ ([0-9a-f]+) \S+ \d+\s+(.*)", line)
            if m:
                cur = None
                if m[4].strip() == real:
                    cur = {"start": int(m[1], 16), "end": int(m[2], 16), "off": int(m[3], 16)}
                    out.append(cur)
            elif cur is not None and line.startswith("Rss:"):
                cur["rss"] = int(line.split()[1]) * 1024
    return out


def resident(vmas: list[dict[str, int]], off: int, nbytes: int) -> int:
    """Rss of the mappings that hold [off, off + nbytes) and nothing else of the file beyond
    page rounding (the lazy table is its own mapping; so is the first tensor of a file)."""
    lo, hi = off // PAGE * PAGE, -(-(off + nbytes) // PAGE) * PAGE
    inside = [v for v in vmas if v["off"] >= lo and v["off"] + v["end"] - v["start"] <= hi]
    return sum(v["rss"] for v in inside)


def row_pages(off: int, row_bytes: int, ids: list[int]) -> set[int]:
    """File pages that the rows ``ids`` of a table at ``off`` span."""
    pages: set[int] = set()
    for i in ids:
        first, last = off + i * row_bytes, off + (i + 1) * row_bytes - 1
        pages.update(range(first // PAGE, last // PAGE + 1))
    return pages


def lazy_model(off: int, nbytes: int, row_bytes: int, ids: list[int]) -> int:
    """Pages of the rows ``ids`` plus the table's two edge pages, in bytes (module docstring)."""
    edges = {off // PAGE, (off + nbytes - 1) // PAGE}
    return len(row_pages(off, row_bytes, ids) | edges) * PAGE


def cached_model(vma: dict[str, int], off: int, row_bytes: int, ids: list[int]) -> int:
    """Resident bytes of a pre-read table: the aligned fault-around windows (virtual addresses)
    of the pages the rows span, clipped to the mapping."""
    per = FAULT_AROUND // PAGE
    vpages = {vma["start"] // PAGE + p - vma["off"] // PAGE for p in row_pages(off, row_bytes, ids)}
    lo, hi = vma["start"] // PAGE, vma["end"] // PAGE
    mapped: set[int] = set()
    for p in vpages:
        w = p // per * per
        mapped.update(range(max(w, lo), min(w + per, hi)))
    return len(mapped) * PAGE


def expected_pages_per_row(row_bytes: int) -> float:
    """Mean pages a row spans over all alignments (rows of a table start at i x row_bytes)."""
    import math

    g = math.gcd(row_bytes, PAGE)
    starts = range(0, PAGE, g)
    return sum((s + row_bytes - 1) // PAGE + 1 for s in starts) / len(starts)


def measure(
    model: str, n_tokens: int, embeddings: str, n_ubatch: int = 64, first_id: int = 300
) -> dict[str, Any]:
    import numpy as np

    from bolt_agent.core.llm.llama.engine import LlamaConfig, LlamaEngine

    evict([model])  # a cold file, as after a reboot
    engine = LlamaEngine(
        LlamaConfig(model, n_ctx=512, n_batch=n_ubatch, n_ubatch=n_ubatch, embeddings=embeddings)
    ).load()
    n_vocab = engine.llm.n_vocab()
    ids = np.random.default_rng(1).choice(np.arange(first_id, n_vocab), n_tokens, replace=False)
    ids = [int(i) for i in ids]
    before = smaps(model)
    engine.llm.eval(ids)
    after = smaps(model)
    out: dict[str, Any] = {
        "embeddings": embeddings,
        "n_tokens": n_tokens,
        "file_bytes": os.path.getsize(model),
        "file_resident": sum(v["rss"] for v in after),  # every mapping of the file
        "tables": {},
    }
    for name, kind in (("per_layer_token_embd.weight", "lazy"), ("token_embd.weight", "cached")):
        off, nbytes, rows = tensor_range(model, name)
        row = nbytes // rows
        entry = {
            "bytes": nbytes,
            "row_bytes": row,
            "resident_before": resident(before, off, nbytes),
            "resident_after": resident(after, off, nbytes),
        }
        vma = next(v for v in after if v["off"] <= off < v["off"] + v["end"] - v["start"])
        entry["windows_model"] = cached_model(vma, off, row, ids)
        if kind == "lazy":
            entry["model"] = lazy_model(off, nbytes, row, ids)
        else:
            entry["model"] = entry["windows_model"]
        out["tables"][name] = entry
    engine.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", type=int, default=100)
    ap.add_argument("--embeddings", choices=("auto", "mmap"), default="mmap")
    ap.add_argument("--n-ubatch", type=int, default=64)
    args = ap.parse_args(argv)
    print(json.dumps(measure(args.model, args.tokens, args.embeddings, args.n_ubatch)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

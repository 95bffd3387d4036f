"""Leave the oldest cells out of a copy of a whole KV cache (llama.cpp's state layout).

A checkpoint of the small sliding-window cache copies every cell in it (``swa_cache``), up to
``n_swa + n_ubatch`` positions back, though it only ever serves rollbacks to a few dozen
positions before its own end, which need ``n_swa`` positions of window. The rest is memory held
for nothing: 3 MB of a 9 MB checkpoint on the bundled model, two checkpoints.

The copy is ``llama_context::state_seq_get_data`` for the whole cache (``seq_id`` -1), which
writes ``u32`` magic ``0xaf143cd8`` and ``i32`` -1, then ``llama_kv_cache::state_write`` of
the sliding-window cache:

- ``u32`` streams (one here), then per stream ``u32`` cells and, if any:
- per cell: ``i32`` position, ``u32`` sequences, that many ``i32`` sequence ids;
- ``u32`` V transposed, ``u32`` layers; per layer the K rows: ``i32`` type, ``u64`` row size,
  a row per cell;
- per layer (none in a cache without V): ``i32`` type, then either ``u64`` row size and a row
  per cell, or (V transposed) ``u32`` element size, ``u32`` rows, and per row an element per cell.

Only that shape is handled (one stream, one sequence per cell, no per-cell extension: models
with M-RoPE positions add one, and a hybrid model's copy goes on with its recurrent state);
anything else, an empty block, or a copy that does not end where the layout does, is left
whole (the caller keeps the full copy: correct, 3 MB bigger). llama.cpp does not check that a
restore read the whole copy, so the layout is checked here.
"""

from __future__ import annotations

import numpy as np

_MAGIC = 0xAF143CD8  # llama-context.cpp's io_magic
_META = np.dtype([("pos", "<i4"), ("n_seq", "<u4"), ("seq", "<i4")])


class _Reader:
    def __init__(self, data: np.ndarray) -> None:
        self.data, self.at = data, 0

    def take(self, dtype: str) -> int:
        return int(self.block(np.dtype(dtype).itemsize).view(dtype)[0])

    def block(self, n_bytes: int) -> np.ndarray:
        if n_bytes < 0 or self.at + n_bytes > self.data.size:
            raise ValueError("past the end")
        out = self.data[self.at : self.at + n_bytes]
        self.at += n_bytes
        return out


def _positive(value) -> int:
    if int(value) <= 0:
        raise ValueError("an empty block")
    return int(value)


def drop_cells_before(state: np.ndarray, floor: int) -> tuple[np.ndarray, int] | None:
    """The copy ``state`` (uint8) without its cells at positions below ``floor``, and the oldest
    position it keeps; None when the copy is not of the handled shape or keeps every cell."""
    try:
        return _drop(_Reader(state), floor)
    except (ValueError, IndexError):
        return None


def _drop(r: _Reader, floor: int) -> tuple[np.ndarray, int] | None:
    if r.take("<u4") != _MAGIC or r.take("<i4") != -1 or r.take("<u4") != 1:
        return None
    count = r.take("<u4")
    if count == 0:
        return None
    meta = r.block(count * _META.itemsize).view(_META)
    if (meta["n_seq"] != 1).any() or (meta["seq"] != 0).any():  # the engine's one sequence
        return None
    keep = meta["pos"] >= floor
    kept = int(keep.sum())
    if kept == count or kept == 0:
        return None
    v_trans, n_layer = r.take("<u4"), r.take("<u4")
    head = [np.array([_MAGIC, 2**32 - 1, 1, kept], dtype="<u4").view(np.uint8)]
    head.append(meta[keep].view(np.uint8))
    parts = [r.data[r.at - 8 : r.at]]  # v_trans, n_layer
    for _ in range(n_layer):  # K: a row per cell
        parts.append(r.block(12))
        row = _positive(parts[-1][4:12].view("<u8")[0])
        parts.append(r.block(count * row).reshape(count, row)[keep].reshape(-1))
    # V: every layer, or none (a cache without V: MLA); then the copy must end
    for _ in range(n_layer if r.at < r.data.size else 0):
        parts.append(r.block(12))
        if v_trans:
            size, rows = (_positive(x) for x in parts[-1][4:12].view("<u4"))
            block = r.block(rows * count * size).reshape(rows, count, size)
            parts.append(block[:, keep, :].reshape(-1))
        else:
            row = _positive(parts[-1][4:12].view("<u8")[0])
            parts.append(r.block(count * row).reshape(count, row)[keep].reshape(-1))
    if r.at != r.data.size:  # something follows (another memory's state): not this layout
        return None
    out = np.empty(sum(p.size for p in head + parts), dtype=np.uint8)
    at = 0
    for p in head + parts:
        out[at : at + p.size] = p
        at += p.size
    return out, int(meta["pos"][keep].min())

"""``kv_state.drop_cells_before`` on hand-made copies in llama.cpp's whole-cache state layout:
the cells below the floor leave the metadata, every K row block and every V block (rows or,
transposed, elements), and anything not of the handled shape is left whole (None)."""

from __future__ import annotations

import numpy as np

from bolt_agent.core.llm.llama.kv_state import drop_cells_before

POS = [7, 3, 4, 5, 6]  # cell order is the cache's, not the positions'
KEEP = [7, 5, 6]  # at positions 5 and above
K_ROWS, V_ROWS = (3, 2), (4, 2)  # bytes per cell, layers 0 and 1


def _u32(*v: int) -> bytes:
    return np.array(v, dtype="<u4").tobytes()


def _head(kind: int, size: int, wide: bool) -> bytes:
    return np.array([kind], "<i4").tobytes() + np.array([size], "<u8" if wide else "<u4").tobytes()


def _blocks(cells: list[int], v: str, v_layers: int = 2) -> bytes:
    """K of both layers, then V ("rows", "trans" or "none"). Each byte says which cell it
    belongs to (its position), so what survives can be read back."""
    out = b""
    for layer, row in enumerate(K_ROWS):
        out += _head(layer, row, True) + bytes(p for p in cells for _ in range(row))
    for layer, row in list(enumerate(V_ROWS))[: v_layers if v != "none" else 0]:
        if v == "trans":  # `row` rows of 2-byte elements, a row holding every cell
            out += _head(layer, 2, False) + _u32(row)
            out += bytes(p for _ in range(row) for p in cells for _ in range(2))
        else:
            out += _head(layer, row, True) + bytes(p for p in cells for _ in range(row))
    return out


def _state(v: str, n_seq: int = 1, streams: int = 1, v_layers: int = 2) -> np.ndarray:
    out = _u32(0xAF143CD8, 2**32 - 1, streams, len(POS))  # magic, seq_id -1 (whole cache)
    for p in POS:
        out += np.array([p, n_seq] + [0] * n_seq, "<i4").tobytes()
    out += _u32(int(v == "trans"), 2) + _blocks(POS, v, v_layers)
    return np.frombuffer(out, np.uint8).copy()


def test_the_cells_below_the_floor_leave_every_block():
    for v in ("rows", "trans", "none"):
        state = _state(v)
        out, pos_min = drop_cells_before(state, 5)
        assert pos_min == 5
        assert out[:16].tobytes() == state[:12].tobytes() + _u32(3)  # 3 cells left
        meta = out[16 : 16 + 12 * 3].view("<i4").reshape(-1, 3)
        assert meta.tolist() == [[p, 1, 0] for p in KEEP]
        body = out[16 + 12 * 3 :].tobytes()
        assert body == _u32(int(v == "trans"), 2) + _blocks(KEEP, v), v


def test_copies_it_does_not_handle_are_left_whole():
    whole = _state("trans")
    assert drop_cells_before(whole, 3) is None  # nothing below the floor
    assert drop_cells_before(whole, 8) is None  # nothing above it
    assert drop_cells_before(whole[:-1], 5) is None  # does not end where the layout does
    for tail in (3, 12, 40):  # something follows the cache's state (a hybrid model's)
        assert drop_cells_before(np.concatenate([whole, np.zeros(tail, np.uint8)]), 5) is None
    assert drop_cells_before(_state("trans", v_layers=1), 5) is None  # V of one layer of two
    assert drop_cells_before(_state("rows", v_layers=1), 5) is None
    assert drop_cells_before(_state("trans", streams=2), 5) is None
    assert drop_cells_before(_state("trans", n_seq=2), 5) is None  # a cell of two sequences
    one_sequence = whole.copy()
    one_sequence[4:8] = np.frombuffer(_u32(0), np.uint8)  # a copy of sequence 0, not the cache
    assert drop_cells_before(one_sequence, 5) is None
    assert drop_cells_before(whole[4:], 5) is None  # no magic
    empty_rows = _state("rows")
    empty_rows[16 + 12 * 5 + 8 + 4 : 16 + 12 * 5 + 8 + 12] = 0  # layer 0's K rows of 0 bytes
    assert drop_cells_before(empty_rows, 5) is None

"""``kv_state.drop_cells_before`` on hand-made copies in llama.cpp's whole-cache state layout:
the cells below the floor leave the metadata, every K row block and every V block (rows or,
transposed, elements), and anything not of the handled shape is left whole (None)."""

from __future__ import annotations

import numpy as np

from bolt_agent.core.llm.llama.kv_state import drop_cells_before

POS = [7, 3, 4, 5, 6]  # cell order is the cache's, not the positions'


def _u32(*v: int) -> bytes:
    return np.array(v, dtype="<u4").tobytes()


def _state(v_trans: bool, n_seq: int = 1, streams: int = 1) -> bytes:
    """5 cells, 2 layers: K rows of 3 bytes (layer 0) and 2 (layer 1); V of layer 0 only
    (layer 1 has none), rows of 4 bytes or, transposed, 2 rows of 2-byte elements. Each byte
    says which cell it belongs to (its position), so what survives can be read back."""
    out = _u32(0xAF143CD8, 2**32 - 1, streams, len(POS))  # magic, seq_id -1 (whole cache)
    for p in POS:
        out += np.array([p, n_seq, 0][: 2 + n_seq] + [0] * max(0, n_seq - 1), "<i4").tobytes()
    out += _u32(int(v_trans), 2)
    for layer, row in enumerate((3, 2)):
        out += np.array([layer], "<i4").tobytes() + np.array([row], "<u8").tobytes()
        out += bytes(p for p in POS for _ in range(row))
    out += np.array([1], "<i4").tobytes()
    if v_trans:
        out += _u32(2, 2)  # element size, rows
        out += bytes(p for _ in range(2) for p in POS for _ in range(2))
    else:
        out += np.array([4], "<u8").tobytes() + bytes(p for p in POS for _ in range(4))
    return out


def _cells(out: np.ndarray) -> list[int]:
    meta = out[16 : 16 + 12 * int(out[12:16].view("<u4")[0])].view("<i4").reshape(-1, 3)
    return meta[:, 0].tolist()


def test_the_cells_below_the_floor_leave_every_block():
    for v_trans in (False, True):
        state = _state(v_trans)
        out, pos_min = drop_cells_before(np.frombuffer(state, np.uint8).copy(), 5)
        assert pos_min == 5 and _cells(out) == [7, 5, 6]
        keep = [7, 5, 6]
        assert out[:16].tobytes() == state[:12] + _u32(3)  # magic, seq_id, streams; 3 cells
        body = out[16 + 12 * 3 + 8 :].tobytes()  # after the metadata, v_trans and n_layer
        k0 = bytes(p for p in keep for _ in range(3))
        k1 = bytes(p for p in keep for _ in range(2))
        if v_trans:
            v = _u32(2, 2) + bytes(p for _ in range(2) for p in keep for _ in range(2))
        else:
            v = np.array([4], "<u8").tobytes() + bytes(p for p in keep for _ in range(4))
        expected = (
            np.array([0], "<i4").tobytes() + np.array([3], "<u8").tobytes() + k0
            + np.array([1], "<i4").tobytes() + np.array([2], "<u8").tobytes() + k1
            + np.array([1], "<i4").tobytes() + v
        )  # fmt: skip
        assert body == expected, v_trans
        assert out.size == len(state) - 2 * (12 + 3 + 2 + 4)


def test_copies_it_does_not_handle_are_left_whole():
    state = _state(v_trans=True)
    whole = np.frombuffer(state, np.uint8).copy()
    assert drop_cells_before(whole, 3) is None  # nothing below the floor
    assert drop_cells_before(whole, 8) is None  # nothing above it
    assert drop_cells_before(whole[:-1], 5) is None  # does not end where the layout does
    assert drop_cells_before(np.concatenate([whole, whole[:3]]), 5) is None  # nor here
    two_streams = np.frombuffer(_state(True, streams=2), np.uint8).copy()
    assert drop_cells_before(two_streams, 5) is None
    shared = np.frombuffer(_state(True, n_seq=2), np.uint8).copy()
    assert drop_cells_before(shared, 5) is None  # a cell of two sequences
    one_sequence = whole.copy()
    one_sequence[4:8] = np.frombuffer(_u32(0), np.uint8)  # a copy of sequence 0, not the cache
    assert drop_cells_before(one_sequence, 5) is None
    assert drop_cells_before(whole[4:], 5) is None  # no magic

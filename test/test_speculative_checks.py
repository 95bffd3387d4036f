"""Speculative decoding: drafter/target validation and prompt lookup (no decoding)."""

from __future__ import annotations

import numpy as np
import pytest

from bolt_agent.core.llm.llama.speculative import SpecConfig, build_speculator
from bolt_agent.core.llm.llama.speculative.gguf_check import (
    DrafterError,
    TargetInfo,
    check_pair,
    read_drafter,
)
from bolt_agent.core.llm.llama.speculative.ngram import lookup
from support.tiny_gguf import DrafterSpec, TargetSpec, truncate, write_drafter, write_target

LLAMA3 = TargetInfo(arch="llama", n_layer=3, n_embd=64, n_vocab=354)


@pytest.fixture(scope="module")
def drafter(tmp_path_factory):
    return write_drafter(tmp_path_factory.mktemp("d") / "drafter.gguf", DrafterSpec())


def test_a_valid_drafter_reads_back(drafter):
    info = read_drafter(drafter)
    assert info.arch == "dflash"
    assert info.target_layers == (0, 1, 2)
    assert info.n_embd == 64 and info.n_vocab == 354 and info.block_size == 8
    check_pair(info, LLAMA3)  # no exception


@pytest.mark.parametrize("keep", [0.01, 0.2, 0.5, 0.9, 0.999])
def test_a_truncated_drafter_is_a_clear_error(drafter, tmp_path, keep):
    bad = truncate(drafter, tmp_path / "cut.gguf", keep)
    with pytest.raises(DrafterError, match=r"truncated|not a readable GGUF") as err:
        read_drafter(bad)
    assert str(bad) in str(err.value)


def test_garbage_and_missing_files(tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf at all" * 100)
    with pytest.raises(DrafterError, match="not a readable GGUF"):
        read_drafter(junk)
    with pytest.raises(DrafterError, match="not found"):
        read_drafter(tmp_path / "nope.gguf")


def test_a_plain_model_is_not_a_drafter(tmp_path):
    target = write_target(tmp_path / "t.gguf", TargetSpec())
    with pytest.raises(DrafterError, match="architecture is 'llama'"):
        read_drafter(target)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (DrafterSpec(target_layers=()), "target_layers"),
        (DrafterSpec(mask=False), "mask token"),
        (DrafterSpec(block_size=1), "block_size"),
    ],
)
def test_incomplete_drafter_metadata(tmp_path, spec, message):
    path = write_drafter(tmp_path / "d.gguf", spec)
    with pytest.raises(DrafterError, match=message):
        read_drafter(path)


def test_pairs_that_would_abort_llama_cpp_are_refused(drafter):
    info = read_drafter(drafter)
    with pytest.raises(DrafterError, match="'gemma3' does not publish layer inputs"):
        check_pair(info, TargetInfo(arch="gemma3", n_layer=18, n_embd=64, n_vocab=354))
    with pytest.raises(DrafterError, match=r"layer ids \[2\] out of range for a 2-layer"):
        check_pair(info, TargetInfo(arch="llama", n_layer=2, n_embd=64, n_vocab=354))
    with pytest.raises(DrafterError, match="hidden size 64 != target hidden size 128"):
        check_pair(info, TargetInfo(arch="qwen3", n_layer=3, n_embd=128, n_vocab=354))
    with pytest.raises(DrafterError, match="vocabulary"):
        check_pair(info, TargetInfo(arch="llama", n_layer=3, n_embd=64, n_vocab=999))


def test_unknown_mode_is_a_config_error():
    with pytest.raises(ValueError, match="not one of"):
        build_speculator(None, SpecConfig(mode="medusa"))


def test_none_builds_nothing():
    speculator, info = build_speculator(None, SpecConfig(mode="none"))
    assert speculator is None and info.active == "none" and not info.reasons


@pytest.mark.parametrize(
    ("seq", "n", "expected"),
    [
        ([1, 2, 3, 4, 5, 6, 1, 2, 3], 4, [4, 5, 6, 1]),  # longest suffix [1 2 3]
        ([1, 2, 3, 4, 5, 6, 9, 2, 3], 3, [4, 5, 6]),  # suffix [2 3]
        ([1, 2, 3, 4, 5, 6, 9, 8, 3], 4, []),  # single-token match below min_match
        ([5, 5, 5, 5, 5, 5, 5, 5], 3, [5, 5, 5]),  # a run: the match with a full continuation
        ([256, 7, 1, 256, 7], 2, [1, 256]),  # token-aligned bytes only
    ],
)
def test_prompt_lookup(seq, n, expected):
    assert lookup(np.array(seq), n, min_match=2, max_match=4) == expected


def test_prompt_lookup_ignores_unaligned_byte_matches():
    # little endian: [0, 1, 0] is 00 00 00 00 01 00 00 00 00 00 00 00, which holds the bytes of
    # the suffix [256, 0] (00 01 00 00 00 00 00 00) at offset 3; only whole tokens may match
    seq = np.array([0, 1, 0, 9, 256, 0], dtype=np.int32)
    assert seq.tobytes().find(seq[-2:].tobytes()) == 3
    assert lookup(seq, 2, min_match=2, max_match=2) == []

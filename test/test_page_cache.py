"""The benchmark drops the page cache of the stack's files before it measures a stack's RSS.

The files are made in the virtual environment, where the libraries the benchmark evicts live (a
tmpfs would keep its pages whatever is asked).
"""

from __future__ import annotations

import mmap
import os
import sys
import tempfile
from pathlib import Path

from bolt_agent.benchmarks.page_cache import cached_bytes, evict, stack_files
from bolt_agent.core.models import resolve_model

SIZE = 4 * 1024 * 1024


def _written(path: Path) -> Path:
    with open(path, "wb") as f:
        f.write(os.urandom(SIZE))
        f.flush()
        os.fsync(f.fileno())  # clean pages: what DONTNEED may drop
    return path


def test_evict_drops_a_just_written_file_and_reports_what_a_mapping_keeps():
    with tempfile.TemporaryDirectory(dir=sys.prefix) as d:
        free, held = _written(Path(d, "free.bin")), _written(Path(d, "held.bin"))
        assert cached_bytes(free) == SIZE  # a fresh install's files sit in the cache
        with open(held, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
            for i in range(0, SIZE, mmap.PAGESIZE):  # fault every page in
                _ = m[i]
            report = evict([free, held, Path(d, "missing.bin")])
            assert cached_bytes(free) == 0
            assert cached_bytes(held) == SIZE  # mapped here: the kernel keeps it
        mib = SIZE / 2**20
        assert report == {
            "files": 2,
            "cached_mib_before": 2 * mib,
            "cached_mib_after": mib,
            "kept_mib": {str(held): mib},
        }


def test_the_stack_files_are_the_environment_s_libraries_and_the_bundled_models():
    files = {str(p) for p in stack_files()}
    assert str(resolve_model("", kind="llm")) in files  # the GGUF llama.cpp maps
    assert any(Path(p).name.startswith("libfastdds.so") for p in files), "DDS library"
    assert any("_multiarray_umath" in p for p in files), "numpy's extension"

"""Evict the stack's shared libraries and model files from the page cache before a memory run.

A file-backed page counts in a process's RSS once it is mapped, and on recent kernels a fault
maps the whole page-cache folio around it. Files that were just written (a fresh ``make setup``:
pip unpacking the wheels, the bundled models) sit in the cache as large folios, so the same stack
maps more of them than it does once they were read from disk: measured here, the stack process
after ``rclpy`` was 61.1 MiB right after a fresh set-up and 49.4 MiB after ``drop_caches``
(``libfastdds`` 11.6 against 5.8 MiB resident). On the robot the libraries are read from disk
after boot, so the benchmark comes close to that state: it asks the kernel to drop the clean
cached pages of these files (``posix_fadvise(DONTNEED)``, no root needed) before it starts any
process of a run. Pages a running process maps stay (the benchmark's own numpy, PulseAudio's
libraries): ``evict`` reports how much of the files is still cached, and which.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bolt_agent.core.models import ModelNotFoundError, resolve_model

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)
_MAP_FAILED = ctypes.c_void_p(-1).value


def cached_bytes(path: str | os.PathLike) -> int:
    """Bytes of ``path`` in the page cache (``mincore`` over a read-only mapping; nothing is
    read or faulted in)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, _MAP_FAILED):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
        try:
            pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
            vec = ctypes.create_string_buffer(pages)
            if _libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
            return sum(b & 1 for b in vec.raw) * mmap.PAGESIZE
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def evict(paths: Iterable[str | os.PathLike]) -> dict[str, Any]:
    """Drop the clean, unmapped page-cache pages of ``paths`` (each file once, links resolved);
    MiB cached before and after (what is left is mapped by a running process, or dirty), and
    the files that keep most. A file that cannot be measured is still evicted."""
    seen: set[Path] = set()
    files, before, after = 0, 0, 0
    kept: dict[str, int] = {}
    for path in paths:
        real = Path(path).resolve()
        if real in seen or not real.is_file():
            continue
        seen.add(real)
        try:
            fd = os.open(real, os.O_RDONLY)
        except OSError:  # unreadable: not part of the measurement
            continue
        try:
            with contextlib.suppress(OSError):
                before += cached_bytes(real)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            files += 1
            with contextlib.suppress(OSError):
                left = cached_bytes(real)
                after += left
                if left:
                    kept[str(real)] = left
        finally:
            os.close(fd)
    mib = 1024 * 1024
    top = sorted(kept.items(), key=lambda kv: -kv[1])[:8]
    return {
        "files": files,
        "cached_mib_before": before / mib,
        "cached_mib_after": after / mib,
        "kept_mib": {path: n / mib for path, n in top},
    }


SYSTEM_PREFIXES = {Path("/"), Path("/usr"), Path("/usr/local")}


def stack_files() -> list[Path]:
    """The files a stack process maps: the shared libraries (``*.so*``) of the virtual
    environment and of the ROS prefixes (``AMENT_PREFIX_PATH``), the interpreter and libpython,
    and the bundled models' files. A system-wide prefix (``/usr``) is never walked whole."""
    roots = {Path(p) for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p}
    if sys.prefix != sys.base_prefix:  # a virtual environment
        roots.add(Path(sys.prefix))
    files = [Path(sys.executable)]
    for root in sorted(roots - SYSTEM_PREFIXES):
        files += root.rglob("*.so*")
    libdir, library = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("LDLIBRARY")
    if libdir and library:
        files.append(Path(libdir, library))
    for kind in ("llm", "asr", "tts"):
        try:
            model = resolve_model("", kind=kind)
        except ModelNotFoundError:
            continue
        files += model.rglob("*") if model.is_dir() else [model]
    return files


def evict_stack_files(log=print) -> dict[str, Any]:
    """``evict(stack_files())``, logged: called before a stack process whose RSS is measured."""
    report = evict(stack_files())
    log(
        f"page cache: {report['files']} library and model files, "
        f"{report['cached_mib_before']:.0f} -> {report['cached_mib_after']:.0f} MiB cached"
    )
    return report

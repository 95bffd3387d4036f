"""bolt_agent: a ROS 2 conversational edge agent (perception, ASR, LLM, TTS, animation)."""

__version__ = "0.1.0"

import os as _os

# ggml's OpenMP threads must not spin-wait: three models share two cores here (and four to six
# on a Jetson), and a spinning pool slowed llama.cpp 5-10x under contention. libgomp reads this
# when llama_cpp is first loaded, so it is set before any bolt_agent module can import it.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _tune_malloc() -> None:
    """glibc malloc settings for one process running several models' threads (before any thread).

    - ``M_ARENA_MAX`` (``BOLT_MALLOC_ARENA_MAX``, default 2): glibc gives threads arenas of their
      own (up to 8 per core), and memory freed in one is reused by that arena only; with rclpy's
      executor threads, node workers, ggml, CTranslate2 and onnxruntime in one process each
      arena kept its own peak.
    - ``M_MMAP_THRESHOLD`` (``BOLT_MALLOC_MMAP_THRESHOLD`` bytes, default 4 MiB): glibc raises the
      threshold up to 32 MiB as big blocks are freed, after which multi-MiB temporaries (grammar
      passes over the 262k vocabulary, whisper features) stay in the heap once freed; a fixed
      threshold maps them and returns them on free (1 MiB slowed whisper by a third; 4 MiB did
      not). Numbers: ``python -m bolt_agent.benchmarks.memory_probe``, docs/benchmarks.md.

    ``0`` keeps glibc's default; glibc's own ``MALLOC_ARENA_MAX`` / ``MALLOC_MMAP_THRESHOLD_``
    win when set. Not glibc: nothing.
    """
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - glibc only
    except (OSError, AttributeError):
        return
    for ours, glibc, param, default in (
        ("BOLT_MALLOC_ARENA_MAX", "MALLOC_ARENA_MAX", -8, "2"),
        ("BOLT_MALLOC_MMAP_THRESHOLD", "MALLOC_MMAP_THRESHOLD_", -3, str(4 << 20)),
    ):
        value = _os.environ.get(ours, default)
        if glibc not in _os.environ and value.isdigit() and int(value) > 0:
            libc.mallopt(param, int(value))


_tune_malloc()

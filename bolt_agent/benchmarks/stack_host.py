"""The embedded stack in its own process, for the benchmark (``bolt-agent run --device`` without
the console, with parameter overrides and RSS reporting).

    python -m bolt_agent.benchmarks.stack_host '{"profile": "reachy_mini", "overrides": {...}}'

Prints one JSON line per event on stdout: ``{"event": "ready", "rss": {...}}`` once every node is
active (RSS after each node's configure+activate, i.e. per node) and its start-up work is done
(``StackSession.wait_ready``: llm_node's prefill of the system prompt, ``startup_work_s``; the
RSS is taken after it), then answers commands on stdin,
one JSON line each; ``quit`` (or EOF) shuts it down cleanly. Commands (the soak's probes,
``benchmarks/soak.py``):

- ``rss``: ``{"event": "rss", "rss": {VmRSS, VmHWM, RssAnon, RssFile}}`` (MiB)
- ``sample``: the same plus glibc's ``mallinfo2`` (``malloc_in_use``, ``malloc_free_held``, MiB),
  the thread count and, while tracing, tracemalloc's current/peak (MiB)
- ``smaps``: resident MiB by mapping (model files, shared libraries, anonymous memory; the
  biggest anonymous mappings one by one)
- ``pymalloc``: Python's small-object arenas, the blocks in use and the free ones they keep
- ``objects``: live Python objects counted by type (``gc.get_objects``; types with ≥ 10)
- ``containers``: ``len()`` of every dict/list/set/deque reachable from the nodes' attributes
  (three levels deep, ``node.attr.attr``): per-turn bookkeeping that is never pruned shows here
- ``trace start [frames]`` / ``trace snap``: tracemalloc; ``snap`` answers the top growth since the
  previous snapshot (or the start), by line and by file
- ``trim``: ``malloc_trim(0)`` now (RSS before/after: what of the growth is freed heap)
- ``gc``: ``gc.collect()``
- ``threads``: native threads by name (``/proc/self/task/*/comm``; llama.cpp's, onnxruntime's,
  CTranslate2's pools, DDS, PortAudio) with their stacks' resident KiB, and the Python threads
- ``modules``: how many modules are imported, by top-level package
- ``referrers <module.Type> [n]``: for the last ``n`` live objects of that type (0: all), what
  refers to them (an object's attribute as ``Owner.attr``, a dict's key, or the container type):
  who keeps them alive
- ``diagnostics``: each node's ``diagnostic_values()`` (what ``/diagnostics`` carries: device
  xruns, the phrase cache, how turns ended)
- ``cycles``: what the cyclic garbage collector would free now, by type (``gc.DEBUG_SAVEALL``
  for one collection): objects that only a gen-2 collection frees, with any native memory they own
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import functools
import gc
import itertools
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any


def rss_mb(pid: int | str = "self") -> dict[str, float]:
    """VmRSS / VmHWM / RssFile / RssAnon of a process in MB (from /proc)."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            out[key] = int(value.split()[0]) / 1024
    return out


def smaps_mb(pid: int | str = "self", top: int = 40) -> dict[str, Any]:
    """Resident MiB by mapping (``/proc/<pid>/smaps``): files by path (model files, shared
    libraries), anonymous mappings as ``[anon]`` (heap, mmapped blocks, thread stacks), plus the
    totals of shared-library code (``*.so*``) and of the model files."""
    by: collections.Counter[str] = collections.Counter()
    anon: list[tuple[float, float]] = []  # (size, resident) MiB of each anonymous mapping
    name, size = "[anon]", 0.0
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(None, 5)
        if len(head) >= 5 and "-" in head[0] and not head[0].endswith(":"):
            name = head[5].strip() if len(head) == 6 and head[5].strip() else "[anon]"
            low, high = (int(x, 16) for x in head[0].split("-"))
            size = (high - low) / 2**20
        elif line.startswith("Rss:"):
            rss = int(line.split()[1]) / 1024
            by[name] += rss
            if name == "[anon]" and rss >= 1.0:
                anon.append((round(size, 2), round(rss, 2)))
    libs = sum(v for k, v in by.items() if ".so" in Path(k).name)
    models = sum(v for k, v in by.items() if k.endswith((".gguf", ".onnx", ".bin")))
    return {
        "top": {k: round(v, 1) for k, v in by.most_common(top)},
        "shared_libraries": round(libs, 1),
        "model_files": round(models, 1),
        "anon": round(by["[anon]"] + by["[heap]"], 1),
        # the biggest anonymous mappings (ggml buffers, checkpoints, arenas' heaps, big blocks)
        "anon_mappings": sorted(anon, key=lambda m: -m[1])[:top],
        "total": round(sum(by.values()), 1),
    }


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_size_t)
        for n in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


@functools.cache
def _mallinfo2() -> Any:
    """glibc's ``mallinfo2``, looked up once: a new ``CDLL`` per sample is a class and a cycle
    each time, garbage the probe itself would leave in the process it measures."""
    try:
        fn = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    return fn


def malloc_mb() -> dict[str, float]:
    """glibc's bytes in use (heap + mmapped blocks) and held free, MiB; {} elsewhere."""
    fn = _mallinfo2()
    if fn is None:
        return {}
    info = fn()
    return {
        "malloc_in_use": (info.uordblks + info.hblkhd) / 2**20,
        "malloc_free_held": info.fordblks / 2**20,
    }


def object_counts(minimum: int = 10) -> dict[str, int]:
    """Live objects tracked by the garbage collector, by type (module.qualname)."""
    counts: collections.Counter[str] = collections.Counter()
    for obj in gc.get_objects():
        t = type(obj)
        counts[f"{t.__module__}.{t.__qualname__}"] += 1
    return {k: v for k, v in counts.items() if v >= minimum}


_SIZED = (dict, list, set, frozenset, collections.deque, collections.OrderedDict)


def _attrs(obj: Any) -> list[tuple[str, Any]]:
    try:
        d = vars(obj)
    except TypeError:
        return []
    try:
        return list(d.items())  # one C call: safe while other threads mutate the dict
    except RuntimeError:
        return []


def container_sizes(roots: dict[str, Any], depth: int = 3) -> dict[str, int]:
    """``len()`` of the containers reachable from ``roots`` through instance attributes (our own
    and rclpy's objects only), keyed ``root.attr.attr``."""
    out: dict[str, int] = {}
    seen: set[int] = set()

    def walk(path: str, obj: Any, level: int) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, _SIZED):
            with contextlib.suppress(Exception):  # a concurrently mutated container: skip it
                out[path] = len(obj)
            if isinstance(obj, dict) and level < depth:  # one level into dict values
                try:
                    values = list(obj.values())[:50]
                except RuntimeError:
                    values = []
                total = sum(len(v) for v in values if isinstance(v, _SIZED))
                if total:
                    out[path + "[*]"] = total
            return
        module = type(obj).__module__ or ""
        if level >= depth or not module.startswith(("bolt_agent", "rclpy")):
            return
        for name, value in _attrs(obj):
            walk(f"{path}.{name}", value, level + 1)

    for name, root in roots.items():
        walk(name, root, 0)
    return out


class _Tracer:
    def __init__(self) -> None:
        self.previous = None

    def command(self, args: list[str]) -> dict[str, Any]:
        import tracemalloc

        if args and args[0] == "start":
            tracemalloc.start(int(args[1]) if len(args) > 1 else 1)
            self.previous = tracemalloc.take_snapshot()
            return {"event": "trace", "started": True}
        if not tracemalloc.is_tracing():
            return {"event": "trace", "error": "not tracing (send 'trace start' first)"}
        snap = tracemalloc.take_snapshot().filter_traces(
            (tracemalloc.Filter(False, tracemalloc.__file__),)
        )
        out: dict[str, Any] = {"event": "trace"}
        for key in ("lineno", "filename"):
            stats = snap.compare_to(self.previous, key)
            stats.sort(key=lambda s: s.size_diff, reverse=True)
            out[f"by_{key}"] = [
                {
                    "where": str(s.traceback[0]) if key == "lineno" else s.traceback[0].filename,
                    "size_diff_kib": round(s.size_diff / 1024, 1),
                    "count_diff": s.count_diff,
                    "size_kib": round(s.size / 1024, 1),
                }
                for s in stats[:30]
            ]
        out["traced_mib"] = tracemalloc.get_traced_memory()[0] / 2**20
        self.previous = snap
        return out


def cyclic_garbage(top: int = 30) -> dict[str, int]:
    """Objects in unreachable reference cycles now, by type (they are freed afterwards)."""
    gc.collect()  # what was already unreachable before: not counted twice below
    flags = gc.get_debug()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        counts = collections.Counter(
            f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage
        )
    finally:
        gc.garbage.clear()
        gc.set_debug(flags)
    gc.collect()
    return dict(counts.most_common(top))


def _smaps_entries(pid: int | str = "self") -> list[dict[str, Any]]:
    """``/proc/<pid>/smaps`` as a list of mappings: start, end, perms, path, Size and Rss kB."""
    out: list[dict[str, Any]] = []
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(None, 5)
        if len(head) >= 5 and "-" in head[0] and not head[0].endswith(":"):
            a, b = (int(x, 16) for x in head[0].split("-"))
            path = head[5].strip() if len(head) == 6 else ""
            out.append({"start": a, "end": b, "perms": head[1], "path": path})
        elif out and line.startswith(("Size:", "Rss:")):
            key, value = line.split()[:2]
            out[-1][key.rstrip(":")] = int(value)
    return out


def thread_report() -> dict[str, Any]:
    """Native threads by name (``/proc/self/task/*/comm``) and what their stacks hold resident:
    a thread stack is an anonymous read-write mapping right above its guard page (``---p``)."""
    names: collections.Counter[str] = collections.Counter()
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            names[(task / "comm").read_text().strip()] += 1
    maps = _smaps_entries()
    stacks = [
        m
        for prev, m in itertools.pairwise(maps)
        if not m["path"]
        and m["perms"].startswith("rw")
        and prev["perms"] == "---p"
        and prev["end"] == m["start"]
        and prev.get("Size", 0) <= 64
        and m.get("Size", 0) >= 64
    ]
    return {
        "native": dict(names.most_common()),
        "count": sum(names.values()),
        "stacks": len(stacks),
        "stacks_rss_kib": sum(m.get("Rss", 0) for m in stacks),
        "stacks_size_kib": sum(m.get("Size", 0) for m in stacks),
        "python": sorted(t.name for t in threading.enumerate()),
    }


def _type_name(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _describe(ref: Any, target: Any, depth: int = 1) -> str:
    """A referrer by what it is: ``Owner.attr`` for an instance ``__dict__``, ``dict[key]``, the
    function a closure cell belongs to, and (``depth`` more levels) who holds a list or dict."""
    name = _type_name(ref)
    if type(ref).__name__ == "frame":
        return f"frame of {ref.f_code.co_filename.rsplit('/', 1)[-1]}:{ref.f_code.co_qualname}"
    if isinstance(ref, dict):
        keys = [k for k, v in list(ref.items()) if v is target][:1]
        key = repr(keys[0])[:40] if keys else "?"
        owners = [o for o in gc.get_referrers(ref) if getattr(o, "__dict__", None) is ref]
        if owners:
            return f"{_type_name(owners[0])}.{keys[0] if keys else '?'}"
        name = f"dict[{key}]"
    elif type(ref).__name__ == "cell":
        funcs = [f for f in gc.get_referrers(ref) if isinstance(f, tuple)]
        fns = [g for t in funcs for g in gc.get_referrers(t) if hasattr(g, "__code__")]
        if fns:
            return f"closure of {fns[0].__module__}.{fns[0].__qualname__}"
    elif not isinstance(ref, list | tuple | set):
        attrs = [k for k, v in _attrs(ref) if v is target][:1]
        if attrs:
            return f"{name}.{attrs[0]}"
    if depth > 0 and isinstance(ref, list | dict):
        holders = [h for h in gc.get_referrers(ref) if type(h).__name__ != "frame"][:2]
        inner = ", ".join(_describe(h, ref, depth - 1) for h in holders)
        return f"{name} in ({inner})"
    return name


def referrers(type_name: str, limit: int = 5) -> list[list[str]]:
    """What refers to the last ``limit`` live objects of ``type_name`` (0: all), two levels."""
    found = [o for o in gc.get_objects() if _type_name(o) == type_name]
    found = found[-limit:] if limit > 0 else found
    out = []
    for obj in found:
        here = sys._getframe()
        refs = [r for r in gc.get_referrers(obj) if r is not found and r is not here]
        names = [_describe(r, obj) for r in refs]
        out.append([n for n in names if f"{__name__}." not in n])  # this probe's own closures
    return out


def module_report() -> dict[str, Any]:
    tops = collections.Counter(name.split(".")[0] for name in list(sys.modules))
    return {"count": sum(tops.values()), "top": dict(tops.most_common(40))}


def pymalloc_mb() -> dict[str, float]:
    """Python's small-object allocator (``sys._debugmallocstats``, MiB): its arenas (1 MiB
    each, mapped), the blocks in use, and the free blocks and pools they keep (an arena is
    returned only once all of it is free)."""
    import re
    import tempfile

    with tempfile.TemporaryFile("w+") as out:  # it prints to the C stderr
        saved = os.dup(2)
        try:
            sys.stderr.flush()
            os.dup2(out.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read()

    def number(pattern: str) -> float:
        found = re.search(pattern, text, re.M)
        return int(found.group(1).replace(",", "")) / 2**20 if found else -1.0

    return {
        "arenas_mb": number(r"^Total\s*=\s*([\d,]+)"),  # the first Total: the arenas
        "in_use_mb": number(r"^# bytes in allocated blocks\s*=\s*([\d,]+)"),
        "free_blocks_mb": number(r"^# bytes in available blocks\s*=\s*([\d,]+)"),
        "free_pools_mb": number(r"unused pools \* \d+ bytes\s*=\s*([\d,]+)"),
    }


def sample() -> dict[str, Any]:
    import tracemalloc

    out: dict[str, Any] = {**rss_mb(), **malloc_mb(), "threads": threading.active_count()}
    if tracemalloc.is_tracing():
        current, peak = tracemalloc.get_traced_memory()
        out["traced_mib"], out["traced_peak_mib"] = current / 2**20, peak / 2**20
    return out


def node_diagnostics(nodes: dict[str, Any]) -> dict[str, Any]:
    """``diagnostic_values()`` by node name; a node whose values cannot be read says why."""
    out: dict[str, Any] = {}
    for name, node in nodes.items():
        try:
            out[name] = node.diagnostic_values()
        except Exception as exc:  # a node mid-teardown: the report says so, the rest go on
            out[name] = {"error": repr(exc)}
    return out


def answer(line: str, nodes: dict[str, Any], tracer: _Tracer) -> dict[str, Any] | None:
    """The reply to one stdin command (None: unknown command)."""
    words = line.split()
    if not words:
        return None
    cmd = words[0]
    if cmd == "rss":
        return {"event": "rss", "rss": rss_mb()}
    if cmd == "sample":
        return {"event": "sample", "sample": sample()}
    if cmd == "objects":
        return {"event": "objects", "objects": object_counts()}
    if cmd == "pymalloc":
        return {"event": "pymalloc", "pymalloc": pymalloc_mb()}
    if cmd == "smaps":
        return {"event": "smaps", "smaps": smaps_mb()}
    if cmd == "containers":
        return {"event": "containers", "containers": container_sizes(nodes)}
    if cmd == "trace":
        return tracer.command(words[1:])
    if cmd == "trim":
        from bolt_agent.core.memory import release_free_memory

        before = rss_mb()
        release_free_memory()
        return {"event": "trim", "before": before, "after": rss_mb()}
    if cmd == "gc":
        return {"event": "gc", "collected": gc.collect()}
    if cmd == "threads":
        return {"event": "threads", "threads": thread_report()}
    if cmd == "referrers" and len(words) >= 2:
        limit = int(words[2]) if len(words) > 2 else 5
        return {"event": "referrers", "referrers": referrers(words[1], limit)}
    if cmd == "modules":
        return {"event": "modules", "modules": module_report()}
    if cmd == "diagnostics":
        return {"event": "diagnostics", "diagnostics": node_diagnostics(nodes)}
    if cmd == "cycles":
        return {"event": "cycles", "cycles": cyclic_garbage()}
    return {"event": "error", "error": f"unknown command {cmd!r}"}


def main(argv: list[str]) -> int:
    from bolt_agent.stack.session import StackSession
    from bolt_agent.stack.spec import StackSpec

    cfg = json.loads(argv[0]) if argv else {}
    if cfg.get("switch_interval"):  # experiment: the GIL hand-over period (default 5 ms)
        sys.setswitchinterval(float(cfg["switch_interval"]))
    spec = StackSpec(
        profile=cfg.get("profile", "reachy_mini"),
        sim=False,
        overrides=cfg.get("overrides", {}),
        nodes=cfg.get("nodes", []),
    )
    with StackSession(spec) as session:  # rclpy up; torn down (lifecycle shutdown too) on exit
        base = rss_mb()
        session.build()
        built = rss_mb()
        per_node, prev = {}, built["VmRSS"]

        def measure(node) -> None:  # RSS growth during the node's configure + activate
            nonlocal prev
            now = rss_mb()["VmRSS"]
            per_node[node.get_name()] = now - prev
            prev = now

        failed = session.bring_up(after_each=measure)  # no progress lines: stdout is JSON
        session.start()  # after the bring-up (see StackSession.bring_up)
        t0 = time.monotonic()  # the first user turn waits for the start-up prefill, as a user would
        late = session.wait_ready() if not failed else []
        event = {
            "event": "ready" if not failed else "failed",
            "failed": failed,
            "startup_work_s": round(time.monotonic() - t0, 3),
            "not_ready": late,  # busy past session.READY_TIMEOUT_S: reported, the run goes on
            "rss": {
                "python_rclpy_mb": base["VmRSS"],
                "after_construct_mb": built["VmRSS"],
                "per_node_mb": per_node,
                "total": rss_mb(),
                **malloc_mb(),
            },
        }
        print(json.dumps(event), flush=True)
        nodes = {n.get_name(): n for n in session.nodes}
        tracer = _Tracer()
        for line in sys.stdin:
            if line.strip() == "quit":
                break
            reply = answer(line.strip(), nodes, tracer)
            if reply is not None:
                print(json.dumps(reply, default=str), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

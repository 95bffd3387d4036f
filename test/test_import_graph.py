"""The package's import graph: no cycles (lazy imports inside functions count), core stays core."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "bolt_agent"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    """A bolt_agent module or package in the source tree (found without importing anything)."""
    path = PKG.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def import_graph() -> dict[str, set[str]]:
    """module → the bolt_agent modules it imports anywhere in its body (top level or lazily).

    ``from pkg import name`` points at ``pkg.name`` when that is a module, else at ``pkg``.
    """
    graph: dict[str, set[str]] = {}
    for path in sorted(PKG.rglob("*.py")):
        module = _module_name(path)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    deps.add(sub if _is_module(sub) else base)
        graph[module] = {d for d in deps if d.split(".")[0] == "bolt_agent" and d != module}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle as a path of module names, or None (iterative DFS, white/grey/black)."""
    colour = dict.fromkeys(graph, 0)
    for root in graph:
        if colour[root]:
            continue
        stack = [(root, iter(sorted(graph[root])))]
        path = [root]
        colour[root] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                colour[node] = 2
                stack.pop()
                path.pop()
            elif colour.get(child, 2) == 1:
                return [*path[path.index(child) :], child]
            elif colour.get(child) == 0:
                colour[child] = 1
                path.append(child)
                stack.append((child, iter(sorted(graph[child]))))
    return None


def test_the_detector_finds_a_lazy_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_bolt_agent_has_no_import_cycles():
    graph = import_graph()
    assert "bolt_agent.core.llm.llama.engine" in graph
    # the engine builds a speculative decoder lazily; the decoders use the shared types only
    assert "bolt_agent.core.llm.llama.speculative" in graph["bolt_agent.core.llm.llama.engine"]
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


@pytest.mark.parametrize("layer", ["nodes", "cli", "stack", "benchmarks"])
def test_core_depends_on_no_outer_layer(layer):
    graph = import_graph()
    bad = {
        m: sorted(d for d in deps if d.startswith(f"bolt_agent.{layer}"))
        for m, deps in graph.items()
        if m.startswith("bolt_agent.core")
    }
    assert not {m: d for m, d in bad.items() if d}


@pytest.mark.parametrize("stage", ["asr", "tts", "audio"])
def test_speech_stages_do_not_import_each_other(stage):
    """The ASR stage, the TTS stage and the audio devices are separate folders because they
    never import each other: keep it so (the nodes join them)."""
    graph = import_graph()
    others = [f"bolt_agent.core.{s}." for s in ("asr", "tts", "audio") if s != stage]
    bad = {
        m: sorted(d for d in deps if d.startswith(tuple(others)))
        for m, deps in graph.items()
        if m.startswith(f"bolt_agent.core.{stage}")
    }
    assert not {m: d for m, d in bad.items() if d}


def test_node_files_stay_wiring():
    """A node module is parameters, wiring and lifecycle: over 400 lines means logic that
    belongs in core/ or a module beside it (``<node>_params.py``, ``<node>_outputs.py``)."""
    long = {
        p.name: n
        for p in sorted((PKG / "nodes").glob("*.py"))
        if (n := len(p.read_text().splitlines())) > 400
    }
    assert not long


def test_no_test_module_imports_another():
    """Shared helpers live in test/support/; a test module importing another would also pull
    its fixtures and tests along."""
    tests = PKG.parent / "test"
    names = {p.stem for p in tests.glob("test_*.py")}
    found = {}
    for path in sorted(tests.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                mods = [node.module]
            elif isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            else:
                continue
            hits = [m for m in mods if m.split(".")[-1] in names or m.split(".")[0] in names]
            if hits:
                found[str(path.relative_to(tests))] = hits
    assert not found

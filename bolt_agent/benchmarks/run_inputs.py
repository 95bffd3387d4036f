"""What a benchmark run starts from, shared by ``bolt-agent bench`` and the benchmark scripts
that also run alone (``soak``, ``memory_probe``): the bundled models' file sizes (the weights
that RSS is compared with) and ``--set node.param=value`` overrides."""

from __future__ import annotations

from typing import Any


def model_bytes() -> dict[str, int]:
    """Bytes on disk of the default llm, asr and tts models (a directory: all its files)."""
    from bolt_agent.core.models import resolve_model

    out = {}
    for kind in ("llm", "asr", "tts"):
        p = resolve_model("", kind=kind)
        files = [p] if p.is_file() else [f for f in p.rglob("*") if f.is_file()]
        out[kind] = sum(f.stat().st_size for f in files)
    return out


def parse_overrides(items: list[str]) -> dict[str, dict[str, Any]]:
    """``node.param=value`` (value parsed as YAML) → {node: {param: value}}."""
    import yaml

    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, _, value = item.partition("=")
        node, _, param = key.partition(".")
        if not param:
            raise SystemExit(f"--set expects node.param=value, got {item!r}")
        out.setdefault(node, {})[param] = yaml.safe_load(value)
    return out

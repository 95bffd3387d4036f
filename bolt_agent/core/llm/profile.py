"""Profiles (config/profiles/<name>.yaml): persona, tools and context options of one character."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from bolt_agent.core.paths import config_dir
from bolt_agent.core.tools.registry import ToolRegistry


@dataclass(frozen=True)
class Profile:
    name: str
    persona: str
    registry: ToolRegistry
    use_scene: bool = False


def profile_path(name: str) -> Path:
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.exists():
        return path
    return config_dir() / "profiles" / f"{name}.yaml"


def load_profile(name: str) -> Profile:
    path = profile_path(name)
    if not path.exists():
        available = sorted(p.stem for p in (config_dir() / "profiles").glob("*.yaml"))
        raise FileNotFoundError(f"profile {name!r} not found at {path} (available: {available})")
    data = yaml.safe_load(path.read_text()) or {}
    return Profile(
        name=data.get("name", path.stem),
        persona=str(data.get("persona", "")).strip(),
        registry=ToolRegistry.from_config(data.get("tools")),
        use_scene=bool(data.get("use_scene", False)),
    )

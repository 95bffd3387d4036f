"""Where the package's configuration and caches live (repo checkout or installed share/)."""

from __future__ import annotations

import os
from pathlib import Path

_PKG_ROOT = Path(__file__).resolve().parents[2]


def config_dir() -> Path:
    """The `config/` folder: $BOLT_AGENT_CONFIG, the source checkout, or the ament share dir."""
    env = os.environ.get("BOLT_AGENT_CONFIG")
    if env:
        return Path(env)
    if (_PKG_ROOT / "config" / "models.yaml").exists():
        return _PKG_ROOT / "config"
    try:
        from ament_index_python.packages import get_package_share_directory

        return Path(get_package_share_directory("bolt_agent")) / "config"
    except Exception as exc:  # PackageNotFoundError or ament_index missing
        raise FileNotFoundError(
            "bolt_agent config/ not found: set BOLT_AGENT_CONFIG or install the package"
        ) from exc


def model_cache_dir() -> Path:
    env = os.environ.get("BOLT_MODEL_CACHE")
    if env:
        return Path(env)
    if (_PKG_ROOT / ".venv").exists():
        return _PKG_ROOT / ".cache" / "models"
    return Path.home() / ".cache" / "bolt_agent" / "models"

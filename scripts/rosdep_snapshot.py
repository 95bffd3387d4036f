"""Write test/data/rosdep/: the part of a rosdistro checkout that rosdep needs to resolve this
repository's package.xml files, so test_rosdep can run the README's rosdep line offline.

    python scripts/rosdep_snapshot.py <rosdistro checkout> [--out test/data/rosdep]

Kept: every rosdep/base.yaml and rosdep/python.yaml entry whose key a package.xml names, and
for Humble and Jazzy the index entry plus the distribution.yaml repositories that release a
package a package.xml names, with the file's own header (release platforms, type, version).
Everything is copied, not edited, and the checkout's commit is recorded in PROVENANCE.
"""

from __future__ import annotations

import argparse
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DISTROS = ("humble", "jazzy")
DEPENDS = ("depend", "build_depend", "buildtool_depend", "exec_depend", "test_depend")


def package_keys() -> set[str]:
    keys: set[str] = set()
    for xml in (ROOT / "package.xml", ROOT / "bolt_agent_interfaces" / "package.xml"):
        root = ET.parse(xml).getroot()
        keys |= {e.text.strip() for tag in DEPENDS for e in root.iter(tag) if e.text}
    return keys


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rosdistro", type=Path)
    ap.add_argument("--out", type=Path, default=ROOT / "test" / "data" / "rosdep")
    args = ap.parse_args()
    src, out = args.rosdistro, args.out
    keys = package_keys()
    out.mkdir(parents=True, exist_ok=True)
    for name in ("base.yaml", "python.yaml"):
        rules = yaml.safe_load((src / "rosdep" / name).read_text())
        kept = {k: v for k, v in rules.items() if k in keys}
        (out / name).write_text(yaml.safe_dump(kept, sort_keys=True))
    index = yaml.safe_load((src / "index-v4.yaml").read_text())
    index["distributions"] = {d: index["distributions"][d] for d in DISTROS}
    for entry in index["distributions"].values():
        entry.pop("distribution_cache", None)  # rosdep reads the distribution files instead
    (out / "index-v4.yaml").write_text(yaml.safe_dump(index, sort_keys=True))
    for distro in DISTROS:
        data = yaml.safe_load((src / distro / "distribution.yaml").read_text())
        data["repositories"] = {
            name: repo
            for name, repo in data["repositories"].items()
            if set(repo.get("release", {}).get("packages", [name])) & keys
        }
        (out / distro).mkdir(exist_ok=True)
        (out / distro / "distribution.yaml").write_text(yaml.safe_dump(data, sort_keys=True))
    commit = subprocess.run(
        ["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    (out / "PROVENANCE").write_text(
        f"Excerpt of https://github.com/ros/rosdistro at {commit or '(unknown commit)'}, written "
        "by scripts/rosdep_snapshot.py: the rosdep rules and Humble/Jazzy release entries\n"
        "that this repository's package.xml files name. Regenerate after changing a package.xml.\n"
    )


if __name__ == "__main__":
    main()

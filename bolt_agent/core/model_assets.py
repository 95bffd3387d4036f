"""`python -m bolt_agent.core.model_assets`: assemble and verify the bundled models (set-up)."""

from __future__ import annotations

import argparse
import sys

from bolt_agent.core.models import BUNDLED


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    for name, asset in BUNDLED.items():
        try:
            path = asset.ensure()
        except (OSError, ValueError, ImportError) as exc:
            print(f"bundled model {name}: {exc}", file=sys.stderr)
            return 1
        if not args.quiet:
            print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

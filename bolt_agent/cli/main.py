"""`bolt-agent` command line. Each verb lives in its own module with an ``add_parser`` hook."""

from __future__ import annotations

import argparse
import importlib
import sys

from bolt_agent import __version__

#: verb modules, in help order; each defines add_parser(subparsers) that sets ``func``
VERB_MODULES = (
    "bolt_agent.cli.doctor",
    "bolt_agent.cli.run",
    "bolt_agent.cli.bags",
    "bolt_agent.cli.sim",
    "bolt_agent.cli.metrics",
    "bolt_agent.cli.bench",
    "bolt_agent.cli.eval",
    "bolt_agent.cli.jetson_plan",
    "bolt_agent.cli.reachy_sim",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bolt-agent", description="bolt_agent tools")
    parser.add_argument("--version", action="version", version=f"bolt_agent {__version__}")
    sub = parser.add_subparsers(dest="verb", required=True)
    for name in VERB_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:  # the verb exists but a dependency is missing: say so
                raise
            continue
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())

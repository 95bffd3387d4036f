"""`bolt-agent` command line: doctor (more verbs arrive with the runner, bags and benchmarks)."""

from __future__ import annotations

import argparse
import sys

from bolt_agent import __version__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bolt-agent", description="bolt_agent tools")
    parser.add_argument("--version", action="version", version=f"bolt_agent {__version__}")
    sub = parser.add_subparsers(dest="verb", required=True)
    doctor = sub.add_parser("doctor", help="check Python, ROS 2, models, audio, cameras, memory")
    doctor.add_argument("--profile", default="reachy_mini", help="profile whose needs are checked")
    doctor.add_argument("--llm", default="", help="LLM model name/path to check (default: config)")
    run = sub.add_parser("run", help="run the whole stack in one process")
    run.add_argument("--profile", default="reachy_mini")
    run.add_argument("--sim", action="store_true", help="simulated devices (default)")
    run.add_argument("--text", action="store_true", help="type to the robot (REPL)")
    args = parser.parse_args(argv)
    if args.verb == "doctor":
        from bolt_agent.doctor import run_doctor

        return run_doctor(profile=args.profile, llm=args.llm)
    if args.verb == "run":
        try:
            from bolt_agent.runner import run_stack
        except ImportError:
            print("the embedded runner is not available yet; running `doctor` instead")
            from bolt_agent.doctor import run_doctor

            return run_doctor(profile=args.profile, llm="")
        return run_stack(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())

"""`bolt-agent jetson-plan`: the robot's resident-memory plan on the Jetson Orin Nano 8 GB."""

from __future__ import annotations

import json
from pathlib import Path


def run_plan(args) -> int:
    import yaml

    from bolt_agent.benchmarks import jetson_memory as jm
    from bolt_agent.benchmarks.jetson_plan import build_plan

    profile = jm.load_profile(args.profile or None)
    plan = build_plan(profile, args.distinct_tokens)
    if args.params_file:  # the Jetson's llm_node parameters, for `params_file:=`
        doc = {"/**/llm_node": {"ros__parameters": dict(profile["llm_node"])}}
        Path(args.params_file).write_text(yaml.safe_dump(doc, sort_keys=False))
    if args.json:
        print(json.dumps(plan, indent=1))
        return 0
    print(f"Jetson Orin Nano plan ({plan['distinct_tokens']} distinct tokens seen)")
    for name, comp in plan["components"].items():
        print(f"  {name:28s} {comp['bytes'] / 1e9:6.3f} GB  {comp['derivation']}")
    for key in ("llm_side_gb_4k", "llm_side_gb_36k", "robot_total_gb_4k", "robot_total_gb_36k"):
        print(f"  {key:28s} {plan[key]:6.3f} GB")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("jetson-plan", help="resident-memory plan of the robot on the Jetson")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--distinct-tokens", type=int, default=0, help="0 = the profile's figure")
    p.add_argument(
        "--profile", default="", help="profile YAML (default config/jetson_profile.yaml)"
    )
    p.add_argument("--params-file", default="", help="also write the llm_node parameters here")
    p.set_defaults(func=run_plan)

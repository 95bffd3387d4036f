"""`bolt-agent eval`: the LLM's quality on a profile's own request set, through llm_node.

    bolt-agent eval [--profile reachy_mini] [--out eval_out/eval.json] [--limit N]

Without ``--profile`` every profile with a request set in ``config/eval/`` runs, one after the
other (never at the same time: 2 cores). Prints, per profile, tool-choice accuracy,
speakable-sentence rate, speech-before-goal rate and mean turn tokens; writes everything
(each turn's sentences and calls too) to the JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

from bolt_agent.core.paths import config_dir

FIGURES = (
    ("tool_choice_accuracy", "tool choice"),
    ("tool_name_accuracy", "right tool, any arguments"),
    ("speakable_sentence_rate", "speakable sentences"),
    ("speech_before_goal_rate", "speech before goal"),
)


def table(results: list[dict]) -> str:
    lines = [
        "| profile | requests | tool choice | right tool, any arguments | speakable sentences | "
        "speech before goal | mean turn tokens |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        cells = [f"{r[k] * 100:.0f} %" if r[k] is not None else "–" for k, _ in FIGURES]
        tokens = f"{r['mean_turn_tokens']:.0f}" if r["mean_turn_tokens"] is not None else "–"
        lines.append(f"| {r['profile']} | {r['requests']} | {' | '.join(cells)} | {tokens} |")
    return "\n".join(lines)


def run_eval(args) -> int:
    from bolt_agent.benchmarks.llm_eval import run_profile
    from bolt_agent.core.llm.evaluation import load_eval_set

    profiles = (
        [args.profile]
        if args.profile
        else sorted(p.stem for p in (config_dir() / "eval").glob("*.yaml"))
    )
    results = []
    for name in profiles:
        print(f"eval {name}: llm_node with the bundled model, requests on llm/converse")
        results.append(run_profile(load_eval_set(name), limit=args.limit))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"profiles": results, "table": table(results)}, indent=1))
    print(table(results))
    print(f"wrote {out}")
    return 1 if any(r["errors"] for r in results) else 0


def add_parser(sub) -> None:
    p = sub.add_parser("eval", help="LLM quality on a profile's request set (through llm_node)")
    p.add_argument("--profile", default="", help="reachy_mini | blacksmith_npc (default: all)")
    p.add_argument("--out", default="eval_out/eval.json", help="JSON output")
    p.add_argument("--limit", type=int, default=0, help="only the first N requests (smoke run)")
    p.set_defaults(func=run_eval)

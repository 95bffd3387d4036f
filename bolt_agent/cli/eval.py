"""`bolt-agent eval`: the LLM's quality on a profile's own request set, through llm_node.

    bolt-agent eval [--profile reachy_mini] [--split dev|test|all] [--out eval_out/eval.json]
                    [--limit N] [--seeds 7,8,9] [--param NAME=VALUE ...]

Without ``--profile`` every profile with request sets in ``config/eval/dev`` and
``config/eval/test`` runs, one after the other (never at the same time: 2 cores). The dev split
is what examples, descriptions and thresholds may be tuned on; the test split is held out and
reported on its own row. Prints, per profile and split, the right tool and argument on tool
requests, no tool on chit-chat and persona questions, persona facts named, replies copying the
user, distinct sentences per 12-turn conversation, replies opening with the most common first
word, speakable sentences, speech before goal and
mean turn tokens; writes everything (each turn's sentences and calls too) to the JSON.

``--param`` sets an llm_node parameter over the set's ``params:`` (``--param
model_sampling=false`` runs the bundled model at the seed's temperature 1.0). ``--seeds`` runs
each profile once per seed and adds the mean and range: with sampling, one seed is one draw.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path
from typing import Any

import yaml

FIGURES = (
    ("tool_request_accuracy", "right tool and argument"),
    ("no_tool_rate", "no tool for chit-chat"),
    ("tool_choice_accuracy", "all requests right"),
    ("persona_fact_rate", "persona facts"),
    ("copy_rate", "copies user"),
    ("distinct_sentence_rate", "distinct sentences"),
    ("same_opening_rate", "same opening word"),
    ("speakable_sentence_rate", "speakable"),
    ("speech_before_goal_rate", "speech before goal"),
)


def _cell(value: float | None) -> str:
    return f"{value * 100:.0f} %" if value is not None else "–"


def table(results: list[dict]) -> str:
    heads = " | ".join(label for _, label in FIGURES)
    lines = [
        f"| profile | split | seed | requests | {heads} | mean turn tokens |",
        "|---|---|---|---|" + "---|" * len(FIGURES) + "---|",
    ]
    for r in results:
        cells = [_cell(r[k]) for k, _ in FIGURES]
        tokens = f"{r['mean_turn_tokens']:.0f}" if r["mean_turn_tokens"] is not None else "–"
        seed = r["llm_node_params"].get("seed", "–")
        lines.append(
            f"| {r['profile']} | {r.get('split', '–')} | {seed} | {r['requests']} | "
            f"{' | '.join(cells)} | {tokens} |"
        )
    return "\n".join(lines)


def summary(results: list[dict]) -> dict[str, dict[str, Any]]:
    """Per profile, over its runs (seeds): mean, min and max of each figure."""
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(f"{r['profile']} {r.get('split', '')}".strip() for r in results):
        runs = [r for r in results if f"{r['profile']} {r.get('split', '')}".strip() == name]
        figures = {}
        for key, _ in (*FIGURES, ("mean_turn_tokens", "")):
            values = [r[key] for r in runs if r[key] is not None]
            if values:
                figures[key] = {
                    "mean": statistics.fmean(values),
                    "min": min(values),
                    "max": max(values),
                }
        out[name] = {"runs": len(runs), **figures}
    return out


def summary_table(results: list[dict]) -> str:
    lines = [
        "| profile and split | runs | " + " | ".join(label for _, label in FIGURES) + " |",
        "|---|---|" + "---|" * len(FIGURES),
    ]
    for name, s in summary(results).items():
        cells = []
        for key, _ in FIGURES:
            f = s.get(key)
            cells.append(
                f"{f['mean'] * 100:.0f} % ({f['min'] * 100:.0f}–{f['max'] * 100:.0f})" if f else "–"
            )
        lines.append(f"| {name} | {s['runs']} | {' | '.join(cells)} |")
    return "\n".join(lines)


def parse_params(items: list[str]) -> dict[str, Any]:
    """``NAME=VALUE`` pairs, each value read as YAML (``false``, ``0.2``, ``auto``), except that
    only true/false are booleans (``few_shot=on`` is the string the parameter takes)."""
    params = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--param takes NAME=VALUE, not {item!r}")
        value = yaml.safe_load(text)
        if isinstance(value, bool) and text.strip().lower() not in ("true", "false"):
            value = text.strip()
        params[name.strip()] = value
    return params


def parse_seeds(text: str) -> list[int]:
    seeds = [int(s) for s in text.split(",") if s.strip()]
    if any(s < 0 for s in seeds):
        raise ValueError("seeds must be >= 0 (reproducible runs)")
    return seeds


def _report(results: list[dict], seeds: bool) -> dict[str, Any]:
    report: dict[str, Any] = {"profiles": results, "table": table(results)}
    if seeds:
        report.update(summary=summary(results), summary_table=summary_table(results))
    return report


def run_eval(args) -> int:
    from bolt_agent.benchmarks.llm_eval import run_profile
    from bolt_agent.core.llm.evaluation import SPLITS, eval_profiles, load_eval_set

    profiles = [args.profile] if args.profile else eval_profiles()
    splits = SPLITS if args.split == "all" else (args.split,)
    overrides = parse_params(args.param)
    seeds = parse_seeds(args.seeds) if args.seeds else [None]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    results: list[dict] = []
    report = _report(results, len(seeds) > 1)
    for name in profiles:
        for split in splits:
            eval_set = load_eval_set(name, split)
            for seed in seeds:
                params = {**eval_set.params, **overrides}
                if seed is not None:
                    params["seed"] = seed
                print(f"eval {name} ({split}): llm_node with {params}, requests on llm/converse")
                run_set = dataclasses.replace(eval_set, params=params)
                results.append(run_profile(run_set, limit=args.limit))
                report = _report(results, len(seeds) > 1)
                out.write_text(json.dumps(report, indent=1))  # after each run: a crash keeps them
    print(report["table"])
    if len(seeds) > 1:
        print(report["summary_table"])
    print(f"wrote {out}")
    return 1 if any(r["errors"] for r in results) else 0


def add_parser(sub) -> None:
    p = sub.add_parser("eval", help="LLM quality on a profile's request set (through llm_node)")
    p.add_argument("--profile", default="", help="reachy_mini | blacksmith_npc (default: all)")
    p.add_argument("--out", default="eval_out/eval.json", help="JSON output")
    p.add_argument(
        "--split",
        default="all",
        choices=("dev", "test", "all"),
        help="dev (tuned on) | test (held out) | all: both, reported apart",
    )
    p.add_argument("--limit", type=int, default=0, help="only the first N requests (smoke run)")
    p.add_argument(
        "--seeds", default="", help="comma-separated seeds: one run each, with mean and range"
    )
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="llm_node parameter over the set's params (repeatable), e.g. model_sampling=false",
    )
    p.set_defaults(func=run_eval)

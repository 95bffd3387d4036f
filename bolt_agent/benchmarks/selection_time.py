"""What choosing a tool by scores costs before the first token, on the bundled model, three ways.

* **options**: the options' descriptions alone (what a profile without ``arguments:`` pays);
* **one batch**: the options and every argument value's descriptions in one batch;
* **two steps** (``ToolSelector``): the options, then the values of the arguments the winning
  option's tool takes ("no tool" and the tools without such arguments stop after the first).

The arms alternate request by request over the dev split (these machines are noisy, so only
ratios within one run carry), on one scoring context whose descriptions stay cached for all
three. The two-step arm should choose what the one-batch arm does: a description's score
depends on which others share its batch only through the arithmetic's order (llama.cpp's
kernels differ with the batch's shape; up to half a nat seen), which can flip only a near tie.

    python -m bolt_agent.benchmarks.selection_time [--requests N] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ARMS = ("options", "one batch", "two steps")


def _one_batch(scores: Callable[..., list[float] | None]) -> Callable[..., list[float] | None]:
    """A scorer that scores every description at the first call for a request and answers the
    next from what it got (the one-batch cost, through the two-step selector)."""
    memo: dict[str, list[float] | None] = {}

    def scorer(prefixes: list[str], text: str, only: Sequence[int] | None = None):
        if text not in memo:
            memo.clear()
            memo[text] = scores(prefixes, text, None)
        got = memo[text]
        return got if got is None or only is None else [got[i] for i in only]

    return scorer


def run_profile(engine: Any, profile_name: str, requests: int, log: Callable[[str], None]) -> dict:
    from bolt_agent.core.llm.evaluation import load_eval_set
    from bolt_agent.core.llm.profile import load_profile
    from bolt_agent.core.llm.tool_selection import ToolSelector

    spec = load_profile(profile_name).selection
    texts = [r.text for r in load_eval_set(profile_name, "dev").requests][:requests]
    options = sum(len(o.says) for o in spec.options)
    seconds: dict[str, list[float]] = {arm: [] for arm in ARMS}
    agree, second_step = 0, 0
    for i, text in enumerate(texts):
        # fresh selectors: nothing cached per request; the engine keeps the descriptions
        two = ToolSelector(spec, engine.channel_scores)
        one = ToolSelector(spec, _one_batch(engine.channel_scores))
        # the options alone: the first of the two steps, timed on its own
        prefixes = two.prefixes
        order = ARMS if i % 2 == 0 else ARMS[::-1]
        chosen = {}
        for arm in order:
            if arm == "options":
                t0 = time.monotonic()
                engine.channel_scores(prefixes, " " + " ".join(text.split()), range(options))
                seconds[arm].append(time.monotonic() - t0)
            else:
                chosen[arm] = (two if arm == "two steps" else one).select(text)
                seconds[arm].append(chosen[arm].seconds)
        agree += chosen["two steps"].call == chosen["one batch"].call
        second_step += any(a.open_in(chosen["two steps"].option) for a in spec.arguments)
        times = ", ".join(f"{arm} {seconds[arm][-1]:.2f} s" for arm in ARMS)
        log(f"{profile_name} {i + 1}/{len(texts)}: {times} -> {chosen['two steps'].call.label}")
    med = {arm: statistics.median(v) for arm, v in seconds.items()}
    return {
        "requests": len(texts),
        "descriptions": {"options": options, "all": len(prefixes)},
        "median_s": med,
        "mean_s": {arm: statistics.fmean(v) for arm, v in seconds.items()},
        "two_steps_over_one_batch": med["two steps"] / med["one batch"],
        "two_steps_over_options": med["two steps"] / med["options"],
        "one_batch_over_options": med["one batch"] / med["options"],
        "same_choice": agree,
        "scored_an_argument": second_step,
    }


def table(result: dict[str, Any]) -> str:
    rows = [
        "| profile | requests | options | one batch | two steps | two steps ÷ one batch | "
        "two steps ÷ options | same choice | needed step 2 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in result["profiles"].items():
        m = r["median_s"]
        rows.append(
            f"| {name} | {r['requests']} | {m['options']:.2f} s | {m['one batch']:.2f} s | "
            f"{m['two steps']:.2f} s | {r['two_steps_over_one_batch']:.2f} | "
            f"{r['two_steps_over_options']:.2f} | {r['same_choice']}/{r['requests']} | "
            f"{r['scored_an_argument']}/{r['requests']} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    from bolt_agent.benchmarks.report import write_table_report
    from bolt_agent.core.llm.llama.engine import LlamaConfig, LlamaEngine
    from bolt_agent.core.models import resolve_model

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=20, help="dev requests per profile")
    ap.add_argument("--profiles", nargs="+", default=["reachy_mini", "blacksmith_npc"])
    ap.add_argument("--out", default="bench_out/selection_time.json")
    args = ap.parse_args(argv)
    engine = LlamaEngine(LlamaConfig(str(resolve_model("", kind="llm")), n_ctx=1024)).load()
    try:
        result = {
            "profiles": {p: run_profile(engine, p, args.requests, print) for p in args.profiles}
        }
    finally:
        engine.close()
    write_table_report(Path(args.out), result, table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

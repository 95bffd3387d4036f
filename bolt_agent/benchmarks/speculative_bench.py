"""Speculative decoding benchmark: speed-up and acceptance per mode against plain decoding.

    python -m bolt_agent.benchmarks.speculative_bench                # bundled gemma: none vs ngram
    python -m bolt_agent.benchmarks.speculative_bench --synthetic /tmp/syn   # + llama/DFlash pair
    python -m bolt_agent.benchmarks.speculative_bench --target bolt-e4b-q4km \\
        --drafter bolt-e4b-dflash --n-gpu-layers -1 --threads 6 --out spec.json  # Jetson / CUDA

Every mode decodes the same prompts for ``--max-tokens`` tokens (greedy unless --temperature);
decode time excludes model loading and prefill. ``tok/step`` is the mean number of tokens one
target forward pass yields (the acceptance length: 1 + accepted drafts); ``acc/draft-step`` the
mean accepted drafts per step that had drafts; ``same`` how many outputs equal the plain ones.
With ``--synthetic`` the pair has random weights: it times the DFlash machinery, its acceptance
means nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

PROMPTS = [
    "The colors are red, green, blue and yellow. Again, the colors are red,",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "Robot: Hello! I am Bolt, a small robot. User: Who are you? Robot:",
    "Question: What is the capital of France? Answer:",
    "The robot waved. The robot nodded. The robot",
    "User: Please repeat after me: the quick brown fox jumps over the lazy dog.\nRobot:",
]


def run_mode(args, mode: str, target: str, draft: str) -> dict:
    from bolt_agent.core.llm.llama.engine import LlamaConfig, LlamaEngine
    from bolt_agent.core.llm.types import SamplingParams

    config = LlamaConfig(
        model_path=target,
        n_ctx=args.n_ctx,
        n_gpu_layers=args.n_gpu_layers,
        n_threads=args.threads,
        speculative=mode,
        draft_model=draft,
        spec_n_max=args.n_max,
        spec_p_min=args.p_min,
    )
    engine = LlamaEngine(config).load()
    sampling = SamplingParams(temperature=args.temperature, seed=1)
    info = engine.speculation
    row = {
        "mode": mode,
        "active": info.active if info else "none",
        "fallback": info.reasons if info else [],
        "memory": info.memory if info else {},
        "outputs": [],
    }
    totals = dict(generated=0, decode_s=0.0, steps=0, drafted=0, accepted=0, draft_steps=0)
    try:
        _generate(engine, PROMPTS[0], 8, sampling)  # warm-up
        for prompt in args.prompts:
            tokens, stats, steps = _generate(engine, prompt, args.max_tokens, sampling)
            row["outputs"].append(tokens)
            totals["steps"] += steps
            for key in ("generated", "decode_s", "drafted", "accepted", "draft_steps"):
                totals[key] += getattr(stats, key)
    finally:
        engine.close()
    row.update(totals)
    row["tok_s"] = totals["generated"] / totals["decode_s"] if totals["decode_s"] else 0.0
    row["tok_per_step"] = totals["generated"] / max(1, totals["steps"])
    row["acc_per_draft_step"] = totals["accepted"] / max(1, totals["draft_steps"])
    return row


def _generate(engine, prompt: str, n: int, sampling):
    session = engine.start(prompt)
    tokens: list[int] = []
    steps = 0
    while len(tokens) < n:
        got = session.step(sampling, None, n - len(tokens))
        steps += 1
        tokens += [t.id for t in got]
        if got[-1].is_eog:
            break
    return tokens, session.stats, steps


def synthetic_pair(folder: Path) -> tuple[str, str]:
    """A llama target (d=256, 8 layers, gemma-sized vocabulary not needed) and its drafter."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "test"))
    from support.tiny_gguf import DrafterSpec, TargetSpec, write_drafter, write_target

    folder.mkdir(parents=True, exist_ok=True)
    target = write_target(
        folder / "syn_target.gguf",
        TargetSpec(n_embd=256, n_layer=8, n_head=8, n_head_kv=4, n_ff=768, n_ctx=4096),
    )
    drafter = write_drafter(
        folder / "syn_dflash.gguf",
        DrafterSpec(
            n_embd=256, n_layer=2, n_head=8, n_head_kv=4, n_ff=768, n_ctx=4096,
            target_layers=(1, 3, 5, 7), block_size=16,
        ),
    )  # fmt: skip
    return str(target), str(drafter)


def main(argv: list[str] | None = None) -> int:
    from bolt_agent.core.models import resolve_model

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--target", default="", help="LLM name or path ('' = bundled gemma)")
    p.add_argument("--drafter", default="", help="DFlash drafter (name or path): adds 'dflash'")
    p.add_argument("--draft-model", default="", help="draft GGUF: adds 'draft_model'")
    p.add_argument("--synthetic", default="", help="folder: also bench a generated llama+DFlash")
    p.add_argument("--modes", default="", help="comma list (default: all that apply)")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--n-max", type=int, default=7)
    p.add_argument("--p-min", type=float, default=0.0)
    p.add_argument("--n-ctx", type=int, default=2048)
    p.add_argument("--n-gpu-layers", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--out", default="", help="write the results as JSON here")
    args = p.parse_args(argv)
    args.prompts = PROMPTS

    suites = []
    target = str(resolve_model(args.target, kind="llm"))
    drafter = str(resolve_model(args.drafter, kind="drafter")) if args.drafter else ""
    draft = str(resolve_model(args.draft_model, kind="llm")) if args.draft_model else ""
    modes = ["none", "ngram"] + ["dflash"] * bool(drafter) + ["draft_model"] * bool(draft)
    suites.append((Path(target).name, target, modes, drafter, draft))
    if args.synthetic:
        syn_target, syn_drafter = synthetic_pair(Path(args.synthetic))
        modes = ["none", "ngram", "dflash"]
        suites.append(("synthetic llama d=256", syn_target, modes, syn_drafter, ""))
    if args.modes:
        wanted = ["none", *[m for m in args.modes.split(",") if m != "none"]]
        suites = [(n, t, [m for m in wanted if m in ms], d, dm) for n, t, ms, d, dm in suites]

    results = []
    for name, tgt, modes, dft, dm in suites:
        rows = [run_mode(args, m, tgt, dft if m == "dflash" else dm) for m in modes]
        base = rows[0]
        for row in rows:
            row["suite"] = name
            row["speedup"] = row["tok_s"] / base["tok_s"] if base["tok_s"] else 0.0
            row["same_as_none"] = sum(a == b for a, b in zip(row["outputs"], base["outputs"]))
        results += rows
    _print(results, len(args.prompts))
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
    return 0


def _print(rows: list[dict], n_prompts: int) -> None:
    head = f"{'suite':24} {'mode':12} {'active':12} {'tok/s':>7} {'speedup':>7} "
    head += f"{'tok/step':>8} {'acc/draft-step':>14} {'drafted':>7} {'accepted':>8} {'same':>5}"
    print(head)
    for r in rows:
        print(
            f"{r['suite'][:24]:24} {r['mode']:12} {r['active']:12} {r['tok_s']:7.1f} "
            f"{r['speedup']:6.2f}x {r['tok_per_step']:8.2f} {r['acc_per_draft_step']:14.2f} "
            f"{r['drafted']:7d} {r['accepted']:8d} {r['same_as_none']:>2}/{n_prompts}"
        )
        for reason in r["fallback"]:
            print(f"    fallback: {reason[:140]}")


if __name__ == "__main__":
    sys.exit(main())

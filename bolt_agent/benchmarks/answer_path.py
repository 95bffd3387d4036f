"""The answer's critical path once the user's words are known, variants interleaved.

    python -m bolt_agent.benchmarks.answer_path [--rounds 12] [--out F.json]
        [--variant NAME:few_shot_nearest_short=0,first_clause_chars=4 ...]

After the early transcript, llm_node judges the words (the end-of-turn probe), then runs
the turn: prefill of the nearest few-shot exchange and the words, decoding to the first
sentence; tts_node synthesises that sentence. This measures exactly that chain without ROS or
audio — probe, first token, first sentence, Piper's audio of it — for several parameter sets
of llm_node, each with its own engine and dialogue, over the acoustic benchmark's lines in
interleaved order (A, B, …, then B, A, … in the next round), so machine load hits all of them
alike. Ratios against the first variant are the result (these 2-core machines are noisy).
Each turn is cancelled once its first sentence is out: the dialogue still grows by one turn per
line, as in a conversation.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bolt_agent.benchmarks.voice_loop import PAUSE_UTTERANCES, UTTERANCES

DEFAULT_VARIANTS = (
    "before:few_shot_nearest_short=0,few_shot_nearest_min_score=0,first_clause_chars=4",
    "short_nearest:few_shot_nearest_short=1,few_shot_nearest_min_score=0,first_clause_chars=4",
    "relevant_nearest:few_shot_nearest_short=1,few_shot_nearest_min_score=3,first_clause_chars=4",
    "now:few_shot_nearest_short=1,few_shot_nearest_min_score=3,first_clause_chars=3",
)


class _Sink:
    """Stamps the first token and the first sentence; cancels the turn after that sentence."""

    def __init__(self, runner) -> None:
        self.runner = runner
        self.first_token: float | None = None
        self.first_sentence: tuple[float, str] | None = None

    def on_first_token(self, turn_id: str) -> None:
        self.first_token = time.perf_counter()

    def on_sentence(self, turn_id: str, seq: int, text: str) -> None:
        if self.first_sentence is None:
            self.first_sentence = (time.perf_counter(), text)
            self.runner.cancel()

    def dispatch(self, turn_id, name, arguments):
        from concurrent.futures import Future

        from bolt_agent.core.llm.turn_runner import ToolResult

        done: Future = Future()
        done.set_result(ToolResult(True, {"status": "done"}))
        return done

    def __getattr__(self, _name: str):
        return lambda *a, **k: None


@dataclass
class Variant:
    name: str
    overrides: dict[str, Any]
    rows: list[dict[str, float | str]] = field(default_factory=list)
    runner: Any = None
    knobs: Any = None


def parse_variant(text: str) -> Variant:
    """``NAME:param=value,param=value`` (values as YAML scalars)."""
    import yaml

    from bolt_agent.nodes.llm_params import LlmParams

    name, _, rest = text.partition(":")
    overrides = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        if key.strip() not in vars(LlmParams()):
            raise ValueError(f"variant {name!r}: {key.strip()!r} is not an llm_node parameter")
        overrides[key.strip()] = yaml.safe_load(value)
    return Variant(name.strip(), overrides)


def build(variant: Variant) -> None:
    """Engine, dialogue and runner as llm_node builds them (``LlmParams``' own mapping) with
    the embedded stack's parameters (``stack.spec.effective_params``) and the variant's."""
    from bolt_agent.core.llm.llama.engine import LlamaEngine
    from bolt_agent.core.llm.profile import load_profile
    from bolt_agent.core.llm.turn_runner import TurnRunner
    from bolt_agent.core.models import resolve_model
    from bolt_agent.nodes.llm_params import LlmParams
    from bolt_agent.stack.spec import StackSpec, effective_params

    p = LlmParams.from_dict({**effective_params(StackSpec(), "llm_node"), **variant.overrides})
    profile = load_profile(p.profile)
    draft = str(resolve_model(p.draft_model, kind="drafter")) if p.draft_model else ""
    engine = LlamaEngine(p.llama_config(str(resolve_model(p.model, kind="llm")), draft)).load()
    constrained = p.constrained_mode(engine.chat_template.is_bundled)
    config = p.runner_config(constrained, profile)
    variant.runner = TurnRunner(engine, p.dialogue(profile, constrained), profile.registry, config)
    variant.knobs = p.knobs()


def one_turn(variant: Variant, index: int, text: str, tts) -> dict[str, float | str]:
    from bolt_agent.core.llm.turn_runner import TurnRequest

    runner = variant.runner
    runner.prewarm(TurnRequest(f"w{index}", "", variant.knobs))  # the user started speaking
    request = TurnRequest(f"t{index}", text, variant.knobs)
    sink = _Sink(runner)
    t0 = time.perf_counter()
    runner.end_of_turn_probability(request)
    t_probe = time.perf_counter()
    runner.run(request, sink)
    row: dict[str, float | str] = {
        "probe_s": t_probe - t0,
        "first_token_s": (sink.first_token or t_probe) - t_probe,
    }
    if sink.first_sentence is not None:
        t_sentence, sentence = sink.first_sentence
        row["first_sentence_s"] = t_sentence - t_probe
        row["sentence"] = sentence
        t_tts = time.perf_counter()
        tts.synthesize_sentence(sentence)
        row["tts_s"] = time.perf_counter() - t_tts
        row["words_to_audio_s"] = time.perf_counter() - t0
    return row


def run(variants: list[Variant], rounds: int, log=print) -> dict[str, Any]:
    from bolt_agent.core.models import resolve_model
    from bolt_agent.core.tts.tts_engine import PiperEngine

    for v in variants:
        build(v)
    tts = PiperEngine(resolve_model("", kind="tts"), cpu_threads=1)
    tts.load()
    lines = [*UTTERANCES, *(f"{head} {tail}" for head, tail, _pause in PAUSE_UTTERANCES)]
    for i in range(rounds):
        text = lines[i % len(lines)]
        order = variants if i % 2 == 0 else variants[::-1]
        for v in order:
            v.rows.append(one_turn(v, i, text, tts))
            tts.release_memory()  # as tts_node does once a turn is spoken
        log(f"round {i + 1}/{rounds}: {text!r}")
    return summarise(variants)


def summarise(variants: list[Variant]) -> dict[str, Any]:
    keys = ("probe_s", "first_token_s", "first_sentence_s", "tts_s", "words_to_audio_s")
    out: dict[str, Any] = {"variants": {}}
    for v in variants:
        medians = {}
        for key in keys:
            values = [float(r[key]) for r in v.rows if key in r]
            medians[key] = statistics.median(values) if values else None
        out["variants"][v.name] = {
            "overrides": v.overrides,
            "median": medians,
            "rows": v.rows,
        }
    base = out["variants"][variants[0].name]["median"]
    for v in variants:
        mine = out["variants"][v.name]["median"]
        out["variants"][v.name]["ratio_to_first"] = {
            key: (mine[key] / base[key]) if mine[key] and base[key] else None for key in keys
        }
    return out


def table(result: dict[str, Any]) -> str:
    keys = ("probe_s", "first_token_s", "first_sentence_s", "tts_s", "words_to_audio_s")
    lines = [
        "| variant | " + " | ".join(keys) + " | words→audio ÷ first |",
        "|---" * (len(keys) + 2) + "|",
    ]
    for name, v in result["variants"].items():
        cells = [f"{v['median'][k]:.3f}" if v["median"][k] is not None else "–" for k in keys]
        ratio = v["ratio_to_first"]["words_to_audio_s"]
        shown = "–" if ratio is None else f"{ratio:.2f}"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {shown} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--out", default="")
    ap.add_argument(
        "--variant",
        action="append",
        help="NAME:param=value,... (llm_node parameters; the first is the reference)",
    )
    args = ap.parse_args(argv)
    variants = [parse_variant(t) for t in (args.variant or DEFAULT_VARIANTS)]
    result = run(variants, args.rounds)
    print(table(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The stack's LLM turns without ROS or audio: where the LLM time goes, per step.

    python -m bolt_agent.benchmarks.turn_flow [TURNS] [OUT.json]

Runs ``TurnRunner`` exactly as llm_node configures it for voice (constrained grammar, thinking
budget 24, conversational mode, the reachy_mini profile and its tool), with tool results returned
at once, over consecutive turns of one dialogue. Per step: prompt tokens, tokens reused from the
KV cache, prefill seconds, grammar decode tok/s. Compared with the in-stack ``decode_tok_s`` it
separates the engine's own speed from what the other nodes in the process cost it.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from concurrent.futures import Future
from pathlib import Path

from bolt_agent.benchmarks.voice_loop import UTTERANCES

QUESTIONS = UTTERANCES[:6]  # the acoustic benchmark's first lines


class _Sink:
    def __init__(self):
        self.first_token = self.first_sentence = None

    def on_first_token(self, turn_id):
        self.first_token = time.perf_counter()

    def on_sentence(self, turn_id, seq, text):
        if self.first_sentence is None:
            self.first_sentence = time.perf_counter()

    def dispatch(self, turn_id, name, arguments):
        from bolt_agent.core.llm.turn_runner import ToolResult

        f: Future = Future()
        f.set_result(ToolResult(True, {"status": "done"}))
        return f

    def __getattr__(self, _name):
        return lambda *a, **k: None


def run(turns: int = 6) -> dict:
    from bolt_agent.core.llm.chat_template import Knobs
    from bolt_agent.core.llm.dialogue import Dialogue
    from bolt_agent.core.llm.llama.engine import LlamaConfig, LlamaEngine
    from bolt_agent.core.llm.profile import load_profile
    from bolt_agent.core.llm.turn_runner import RunnerConfig, TurnRequest, TurnRunner
    from bolt_agent.core.llm.types import SamplingParams
    from bolt_agent.core.models import resolve_model

    prof = load_profile("reachy_mini")
    engine = LlamaEngine(LlamaConfig(str(resolve_model("", kind="llm")), n_threads=2)).load()
    runner = TurnRunner(
        engine,
        Dialogue(prof.persona),
        prof.registry,
        RunnerConfig(sampling=SamplingParams(seed=7), constrained=True),
    )
    rows = []
    for i in range(turns):
        sink = _Sink()
        t0 = time.perf_counter()
        r = runner.run(
            TurnRequest(f"t{i}", QUESTIONS[i % len(QUESTIONS)], Knobs(True, 24, True)), sink
        )
        steps = [
            {
                "prompt_tokens": s.prompt_tokens,
                "reused_tokens": s.reused_tokens,
                "prefill_s": s.prefill_s,
                "generated": s.generated,
                "decode_tok_s": s.decode_tok_s,
            }
            for s in r.stats
        ]
        rows.append(
            {
                "ttft_s": (sink.first_token or t0) - t0,
                "first_sentence_s": (sink.first_sentence or t0) - t0,
                "turn_s": time.perf_counter() - t0,
                "steps": steps,
            }
        )
    engine.close()
    first = [s for r in rows for s in r["steps"][:1]]
    return {
        "turns": rows,
        "median_ttft_s": statistics.median(r["ttft_s"] for r in rows),
        "median_first_sentence_s": statistics.median(r["first_sentence_s"] for r in rows),
        "median_first_step_new_tokens": statistics.median(
            s["prompt_tokens"] - s["reused_tokens"] for s in first[1:] or first
        ),
        "median_decode_tok_s": statistics.median(
            s["decode_tok_s"] for r in rows for s in r["steps"] if s["generated"]
        ),
    }


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    result = run(n)
    text = json.dumps(result, indent=1)
    if len(sys.argv) > 2:
        Path(sys.argv[2]).write_text(text)
    print(text)

"""Remote LLM benchmark: the same model behind llama-cpp-python's OpenAI-compatible server
(loopback) against the local engine, and how long a turn takes to be answered after the server
dies.

    python -m bolt_agent.benchmarks.remote_bench --out remote.json [--rounds 6] [--threads 1]

Both engines run the same GGUF with the same threads and the same growing conversation (each
round adds a user line: the server's prefix reuse and ours both apply), greedy, ``--tokens``
tokens per round, interleaved round by round and never at the same time. TTFT is prompt sent → first
token (the remote one includes HTTP, JSON and SSE); tok/s counts tokens after the first. The
constrained rows decode under the registry's GBNF (the server uses llama-cpp-python's grammar;
the local engine its sample-then-check sampler). Fallback: a turn starts on the server, the
server is SIGKILLed at the first token and the time until the local engine's next token is
taken; then a turn with the server gone (connection refused) and one with a stalled server
(SIGSTOP, ``--stall-timeout``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

USER_LINES = [
    "Hello there! Who are you?",
    "What can you see on the table?",
    "Can you look around the room for me?",
    "Tell me something about robots.",
    "Do you like music?",
    "What is your favourite colour?",
    "Could you nod if you agree?",
    "Thanks, that is all for now.",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model: str, threads: int, n_ctx: int, log: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1"]
    cmd += ["--port", str(port), "--n_threads", str(threads), "--n_threads_batch", str(threads)]
    cmd += ["--n_ctx", str(n_ctx)]
    with open(log, "ab") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/models", timeout=2):
                return proc, url
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited; see {log}") from None
            time.sleep(0.2)
    raise RuntimeError("server did not start")


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        proc.wait(timeout=15)


def decode(engine, prompt: str, tokens: int, grammar: str | None, on_first=None) -> dict:
    """One generation: TTFT and tok/s after the first token."""
    from bolt_agent.core.llm.types import SamplingParams

    sampling = SamplingParams(temperature=0.0, seed=1)
    t0 = time.monotonic()
    session = engine.start(prompt)
    first = last = second = None
    n = 0
    while n < tokens:
        out = session.step(sampling, grammar, 1)
        if not out or out[0].is_eog:
            break
        n += 1
        last = time.monotonic()
        if n == 2:
            second = last
        if first is None:
            first = last
            if on_first is not None:
                on_first()
    session.close()
    return {
        "ttft_s": (first or time.monotonic()) - t0,
        "tokens": n,
        "tok_s": (n - 1) / (last - first) if first and last and last > first else 0.0,
        "end_s": (last or time.monotonic()) - t0,
        "second_at": second or 0.0,
    }


def conversation(engines: list, rounds: int, tokens: int, grammar: str | None) -> list[list[dict]]:
    """The same growing conversation on every engine, interleaved round by round (A/B), so a
    neighbour's load on the shared cores hits both alike."""
    from bolt_agent.core.llm.profile import load_profile

    profile = load_profile("reachy_mini")
    tools = profile.registry.as_openai() or None
    messages = [{"role": "system", "content": profile.persona}]
    rows: list[list[dict]] = [[] for _ in engines]
    for i in range(rounds):
        messages.append({"role": "user", "content": USER_LINES[i % len(USER_LINES)]})
        for engine, out in zip(engines, rows, strict=True):
            prompt = engine.chat_template.render(messages, tools)
            out.append(decode(engine, prompt, tokens, grammar))
        messages.append({"role": "assistant", "content": "All right."})  # same for both engines
    return rows


def _median(rows: list[dict], key: str, skip_first: bool = False) -> float:
    values = [r[key] for r in (rows[1:] if skip_first and len(rows) > 1 else rows)]
    return statistics.median(values) if values else 0.0


def run(args) -> dict:
    from bolt_agent.core.llm.llama.engine import LlamaConfig, LlamaEngine
    from bolt_agent.core.llm.profile import load_profile
    from bolt_agent.core.llm.remote import RemoteConfig, build_remote_engine
    from bolt_agent.core.llm.tool_grammar import build_grammar
    from bolt_agent.core.models import resolve_model

    model = str(resolve_model(args.model, kind="llm"))
    log = Path(args.out).with_suffix(".server.log")
    local = LlamaEngine(LlamaConfig(model_path=model, n_ctx=args.n_ctx, n_threads=args.threads))
    local.load()
    grammar = build_grammar(load_profile("reachy_mini").registry, "required", 60, 1)
    proc, url = start_server(model, args.threads, args.n_ctx, log)
    result: dict = {"model": Path(model).name, "threads": args.threads, "rounds": args.rounds}
    try:
        cfg = RemoteConfig(base_url=url, n_ctx=args.n_ctx, timeout_s=60.0)  # cold prefills
        remote = build_remote_engine(cfg, model, lambda: local, warm=True)
        for name, g, n in (("free", None, args.tokens), ("constrained", grammar, args.tokens)):
            loc, rem = conversation([local, remote.remote], args.rounds, n, g)
            for side, rows in (("local", loc), ("remote", rem)):
                result[f"{name}_{side}_ttft_cold_s"] = rows[0]["ttft_s"]
                result[f"{name}_{side}_ttft_s"] = _median(rows, "ttft_s", skip_first=True)
                result[f"{name}_{side}_tok_s"] = _median(rows, "tok_s")
            result[f"{name}_ttft_ratio"] = result[f"{name}_remote_ttft_s"] / max(
                result[f"{name}_local_ttft_s"], 1e-9
            )
            result[f"{name}_tok_s_ratio"] = result[f"{name}_remote_tok_s"] / max(
                result[f"{name}_local_tok_s"], 1e-9
            )

        def restart():
            proc2, url2 = start_server(model, args.threads, args.n_ctx, log)
            cfg2 = RemoteConfig(base_url=url2, n_ctx=args.n_ctx, timeout_s=args.stall_timeout)
            return build_remote_engine(cfg2, model, lambda: local, warm=True), proc2

        result.update(fallback(remote, proc, args, restart))
    finally:
        stop(proc, signal.SIGKILL)
        local.close()
    return result


def fallback(engine, proc: subprocess.Popen, args, restart) -> dict:
    """A turn on the server; the same turn with the server SIGKILLed at its first token (time
    from the kill to the local engine's next token); a turn with the server gone (refused); a
    turn with the server stopped (SIGSTOP: connected and silent until the timeout)."""
    messages = [{"role": "user", "content": "Tell me about your day."}]
    prompt = engine.chat_template.render(messages)
    decode(engine, prompt, 2, None)  # both caches hold the prompt, as in a conversation
    normal = decode(engine, prompt, args.tokens, None)
    killed_at: list[float] = []

    def kill() -> None:
        killed_at.append(time.monotonic())
        stop(proc, signal.SIGKILL)

    killed = decode(engine, prompt, args.tokens, None, on_first=kill)
    refused = decode(engine, prompt, args.tokens, None)
    stalled_engine, stalled_proc = restart()
    try:
        decode(stalled_engine, prompt, 2, None)
        os.killpg(stalled_proc.pid, signal.SIGSTOP)
        stalled = decode(stalled_engine, prompt, args.tokens, None)
        os.killpg(stalled_proc.pid, signal.SIGCONT)
    finally:
        stop(stalled_proc, signal.SIGKILL)
    return {
        "fallback_turn_normal_s": normal["end_s"],
        "fallback_turn_killed_s": killed["end_s"],
        "fallback_kill_to_next_token_s": killed["second_at"] - killed_at[0],
        "fallback_refused_ttft_s": refused["ttft_s"],
        "fallback_stalled_ttft_s": stalled["ttft_s"],
        "stall_timeout_s": args.stall_timeout,
        "fallbacks": engine.fallbacks + stalled_engine.fallbacks,
    }


def table(r: dict) -> str:
    lines = [
        "| | local | remote (loopback) | remote ÷ local |",
        "|---|---|---|---|",
    ]
    for name in ("free", "constrained"):
        lines.append(
            f"| {name}: TTFT, reused prefix (cold) | {r[f'{name}_local_ttft_s'] * 1e3:.0f} ms "
            f"({r[f'{name}_local_ttft_cold_s'] * 1e3:.0f}) | {r[f'{name}_remote_ttft_s'] * 1e3:.0f}"
            f" ms ({r[f'{name}_remote_ttft_cold_s'] * 1e3:.0f}) | {r[f'{name}_ttft_ratio']:.2f} |"
        )
        lines.append(
            f"| {name}: decode tok/s | {r[f'{name}_local_tok_s']:.1f} | "
            f"{r[f'{name}_remote_tok_s']:.1f} | {r[f'{name}_tok_s_ratio']:.2f} |"
        )
    lines += [
        "",
        f"fallback: turn {r['fallback_turn_normal_s']:.2f} s on the server, "
        f"{r['fallback_turn_killed_s']:.2f} s when SIGKILLed at its first token (kill → next "
        f"token {r['fallback_kill_to_next_token_s'] * 1e3:.0f} ms); server gone: first token "
        f"{r['fallback_refused_ttft_s'] * 1e3:.0f} ms; server stalled: first token "
        f"{r['fallback_stalled_ttft_s']:.2f} s (timeout {r['stall_timeout_s']:.1f} s)",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="", help="GGUF name or path (default: the bundled LLM)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--n-ctx", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--stall-timeout", type=float, default=2.0)
    ap.add_argument("--out", default="remote_bench.json")
    args = ap.parse_args(argv)
    result = run(args)
    print(table(result))
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmark report: the markdown table and the PNG plots (matplotlib, Agg)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_json(path: Path, result: dict[str, Any]) -> None:
    """A benchmark's JSON (folders made), and a line saying where it went."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1, ensure_ascii=False))
    print(f"wrote {path}")


def write_table_report(path: Path, result: dict[str, Any], table: str) -> None:
    """A benchmark's table printed, its JSON at ``path`` and the table beside it (.md)."""
    print(table)
    write_json(path, result)
    path.with_suffix(".md").write_text(table + "\n")


STAGE_LABELS = {
    "vad_end": "user end → VAD end-of-speech",
    "asr_final": "→ ASR final",
    "llm_first_token": "→ LLM first token",
    "first_speech": "→ first sentence",
    "first_audio": "→ TTS first audio (to device)",
    "audible": "→ audible (device/pulse)",
}

GOALS = (
    # key, label, comparison, target, unit
    ("voice_to_voice_p50_s", "end of speech → first audio p50", "<=", 0.8, "s"),
    ("voice_to_voice_p90_s", "end of speech → first audio p90", "<=", 1.0, "s"),
    ("false_endpoint_rate", "false endpoints (pause utterances split)", "<=", 0.05, ""),
    ("endpoint_delay_p50_s", "user's last word → final transcript p50", "<=", 0.40, "s"),
    ("overhead_ratio", "stack ÷ raw libraries", "<=", 1.10, ""),
    ("llm_tok_s_ratio", "node ÷ raw tok/s", ">=", 0.95, ""),
    ("prefix_reuse_ttft_ratio", "TTFT(4K history) ÷ TTFT(empty)", "<=", 1.2, ""),
    ("stack_rss_overhead_mb", "stack RSS beyond model weights", "<=", 250.0, "MB"),
)
#: shown when the run had the pipecat peer (not ``--no-peer``)
PEER_GOALS = (("voice_to_voice_vs_peer", "voice-to-voice p50 ours ÷ pipecat", "<=", 0.4, ""),)
#: shown when the run measured the end of turn across voices (``cli.bench.run_voices_part``)
VOICES_GOALS = (
    (
        "voices_paused_kept_whole",
        "paused sentences kept whole, across voices, held out",
        ">=",
        0.95,
        "",
    ),
    (
        "voices_end_of_turn_p50_s",
        "last voiced → final p50, median of voices, held out",
        "<=",
        0.40,
        "s",
    ),
    ("voices_wer_vs_raw_whisper", "WER across voices ÷ raw whisper's, held out", "<=", 1.0, ""),
)
#: the turn-taking table: (label, keys shown " / "-joined; "" for none), ours and the peer's
TURN_TAKING = (
    ("voice-to-voice p50 / p90 (s; turns not split)", "voice_to_voice_p50_s",
     "voice_to_voice_p90_s"),
    ("turns measured for voice-to-voice", "voice_to_voice_turns", ""),
    ("voice-to-voice p50 with split turns (robot not heard early)", "voice_to_voice_all_p50_s", ""),
    ("finished / pause utterances: voice-to-voice p50 (s)", "finished_voice_to_voice_p50_s",
     "pause_voice_to_voice_p50_s"),
    ("pause utterances split / judged", "pause_split_turns", "pause_turns"),
    ("false endpoint rate", "false_endpoint_rate", ""),
    ("finished utterances split", "finished_split_turns", ""),
    ("endpoint delay p50 (s): all / finished / pause", "endpoint_delay_p50_s",
     "endpoint_delay_finished_p50_s", "endpoint_delay_pause_p50_s"),
    ("preemptive starts / wasted", "preemptive_started", "preemptive_wasted"),
    ("user resumed after an early end", "user_resumed", ""),
)  # fmt: skip
#: shown when the run had a memory soak (``--soak-turns N``)
SOAK_GOALS = (
    ("soak_rss_growth_mb", "soak RSS growth, turn N/4 → N", "<=", 10.0, "MB"),
    ("soak_failed_turns", "soak turns that failed", "<=", 0.0, ""),
    ("soak_rss_end_beyond_weights_mb", "RSS beyond weights after the soak", "<=", 250.0, "MB"),
)


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.3g} {unit}".strip() if abs(v) < 100 else f"{v:.0f} {unit}".strip()
    return f"{v} {unit}".strip()


def goal_rows(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    rows = []
    goals = (
        GOALS
        + (PEER_GOALS if "peer" in result else ())
        + (SOAK_GOALS if "soak_turns" in result else ())
        + (VOICES_GOALS if "voices" in result else ())
    )
    for key, label, op, target, unit in goals:
        v = result.get(key)
        ok = None if v is None else (v <= target if op == "<=" else v >= target)
        verdict = "–" if ok is None else ("met" if ok else "MISSED")
        rows.append((label, _fmt(v, unit), f"{op} {target:g} {unit}".strip(), verdict))
    return rows


def markdown(result: dict[str, Any]) -> str:
    lines = ["| goal | measured | target | verdict |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in goal_rows(result)]
    lines += ["", "| metric | value |", "|---|---|"]
    for key in sorted(result):
        v = result[key]
        if isinstance(v, int | float) and not isinstance(v, bool):
            lines.append(f"| `{key}` | {_fmt(float(v))} |")
    stages = result.get("stage_median_s") or {}
    if stages:
        lines += ["", "| stage (median, s) | |", "|---|---|"]
        lines += [f"| {STAGE_LABELS.get(k, k)} | {_fmt(v)} |" for k, v in stages.items()]
    if "voice_to_voice_turns" in result:
        lines += ["", *turn_taking_lines(result)]
    if "soak_turns" in result:
        lines += ["", *soak_lines(result)]
    if result.get("voices_table"):  # (rendered by voices_bench.table)
        lines += ["", result["voices_table"]]
    return "\n".join(lines) + "\n"


def turn_taking_lines(result: dict[str, Any]) -> list[str]:
    """Ours next to the pipecat peer's (same utterances, same definitions), when it ran."""
    peer = result.get("peer")
    lines = ["| turn-taking | ours | pipecat |" if peer else "| turn-taking | ours |"]
    lines.append("|---|---|---|" if peer else "|---|---|")
    for label, *keys in TURN_TAKING:
        keys = [k for k in keys if k]
        ours = " / ".join(_fmt(result.get(k)) for k in keys)
        row = f"| {label} | {ours} |"
        if peer:
            row += " " + " / ".join(_fmt(peer.get(k)) for k in keys) + " |"
        lines.append(row)
    return lines


def soak_lines(result: dict[str, Any]) -> list[str]:
    """The memory soak's table: turns, growth, and RSS after every ~N/10th turn."""
    series = result.get("soak_rss_series_mb") or []
    first = result.get("soak_growth_from_turn", 1)
    lines = ["| memory soak | value |", "|---|---|"]
    lines.append(f"| turns / failed | {result['soak_turns']} / {result.get('soak_failed_turns')} |")
    lines.append(
        f"| RSS growth, turn {first} → {len(series)} (anonymous / malloc in use) | "
        f"{_fmt(result.get('soak_rss_growth_mb'), 'MB')} "
        f"({_fmt(result.get('soak_anon_growth_mb'), 'MB')} / "
        f"{_fmt(result.get('soak_malloc_in_use_growth_mb'), 'MB')}) |"
    )
    if series:
        step = max(1, len(series) // 10)
        picks = sorted({*range(step - 1, len(series), step), len(series) - 1})
        shown = ", ".join(f"{k + 1}: {_fmt(series[k])}" for k in picks)
        lines.append(f"| RSS after turn k (MB) | {shown} |")
    return lines


def plots(
    turns: list[dict[str, Any]], out_prefix: Path, peer_turns: list[dict[str, Any]] | None = None
) -> list[Path]:
    """Stage breakdown per turn (stacked bars) and the voice-to-voice latency CDF (with the
    pipecat peer's, when it ran; split turns left out of both, as in the figures)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    done = [t for t in turns if t.get("v2v_s") is not None]
    paths = []
    fig, ax = plt.subplots(figsize=(10, 4.5))
    bottom = np.zeros(len(done))
    x = np.arange(len(done))
    for stage, label in STAGE_LABELS.items():
        vals = np.array([max(0.0, t["stages_s"].get(stage, 0.0)) for t in done])
        ax.bar(x, vals, bottom=bottom, label=label)
        bottom += vals
    ax.plot(x, [t["v2v_s"] for t in done], "k_", markersize=14, label="acoustic voice-to-voice")
    ax.set_xlabel("turn")
    ax.set_ylabel("seconds after the user's last speech sample")
    ax.set_title("Stage breakdown per turn")
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    p = out_prefix.with_name(out_prefix.name + "_stages.png")
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, ts in (("ours", turns), ("pipecat", peer_turns)):
        v = np.sort(
            [t["v2v_s"] for t in ts or () if t.get("v2v_s") is not None and not t.get("split_by")]
        )
        if len(v):
            ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=name)
    ax.axvline(0.8, color="r", linestyle="--", label="goal p50 0.8 s")
    ax.set_xlabel("end of speech → first audio (s)")
    ax.set_ylabel("fraction of turns")
    ax.set_title("Voice-to-voice latency CDF")
    ax.legend()
    fig.tight_layout()
    p = out_prefix.with_name(out_prefix.name + "_cdf.png")
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)
    return paths


def write_report(result: dict[str, Any], out_json: Path) -> dict[str, Path]:
    """JSON next to a markdown table (.md) and the plots (_stages.png, _cdf.png)."""
    import json

    out_json.parent.mkdir(parents=True, exist_ok=True)
    prefix = out_json.with_suffix("")
    peer = (result.get("peer") or {}).get("turns")
    pngs = plots(result.get("turns", []), prefix, peer_turns=peer)
    md = out_json.with_suffix(".md")
    md.write_text(markdown(result))
    result = {**result, "files": {"markdown": str(md), "plots": [str(p) for p in pngs]}}
    out_json.write_text(json.dumps(result, indent=1, default=str, ensure_ascii=False))
    return {"json": out_json, "markdown": md, "stages": pngs[0], "cdf": pngs[1]}

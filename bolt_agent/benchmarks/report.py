"""Benchmark report: the markdown table and the PNG plots (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
    ("voice_to_voice_p50_s", "end of speech → first audio p50", "<=", 1.0, "s"),
    ("overhead_ratio", "stack ÷ raw libraries", "<=", 1.10, ""),
    ("llm_tok_s_ratio", "node ÷ raw tok/s", ">=", 0.95, ""),
    ("prefix_reuse_ttft_ratio", "TTFT(4K history) ÷ TTFT(empty)", "<=", 1.2, ""),
    ("stack_rss_overhead_mb", "stack RSS beyond model weights", "<=", 300.0, "MB"),
)


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.3g} {unit}".strip() if abs(v) < 100 else f"{v:.0f} {unit}".strip()
    return f"{v} {unit}".strip()


def goal_rows(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    rows = []
    for key, label, op, target, unit in GOALS:
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
    return "\n".join(lines) + "\n"


def plots(turns: list[dict[str, Any]], out_prefix: Path) -> list[Path]:
    """Stage breakdown per turn (stacked bars) and the voice-to-voice latency CDF."""
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
    v = np.sort([t["v2v_s"] for t in done])
    if len(v):
        ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post")
    ax.axvline(1.0, color="r", linestyle="--", label="goal 1.0 s")
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
    pngs = plots(result.get("turns", []), prefix)
    md = out_json.with_suffix(".md")
    md.write_text(markdown(result))
    result = {**result, "files": {"markdown": str(md), "plots": [str(p) for p in pngs]}}
    out_json.write_text(json.dumps(result, indent=1, default=str, ensure_ascii=False))
    return {"json": out_json, "markdown": md, "stages": pngs[0], "cdf": pngs[1]}

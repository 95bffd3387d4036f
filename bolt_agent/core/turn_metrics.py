"""Per-turn latency metrics merged from the partial stamps several nodes publish.

Each node publishes a ``TurnMetrics`` message with the stamps it knows (``source`` asr / llm / tts)
for a turn id. ``TurnTable`` merges them into one ``TurnRecord`` per turn, decides when a turn is
complete, and gives the stage latencies measured from the end of the user's speech. Used by
``bolt-agent metrics`` and by the benchmark.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

STAGES = (
    "speech_end",
    "asr_final",
    "llm_first_token",
    "first_speech",
    "first_audio",
    "first_tool_goal",
    "tool_done",
    "turn_end",
)
#: stages measured from the turn's origin (speech_end; asr_final for typed turns), in table order
LATENCY_STAGES = ("asr_final", "llm_first_token", "first_speech", "first_audio", "first_tool_goal")
COUNTERS = (
    "prompt_tokens",
    "completion_tokens",
    "thinking_tokens",
    "draft_tokens",
    "accepted_tokens",
    "decode_tok_s",
    "network_ttft_s",
)
_LATEST = {"tool_done", "turn_end"}  # stages where a later stamp wins; for the rest the earliest
DEFAULT_SOURCES = ("asr", "llm", "tts")


def turn_outcome(result: Any) -> str:
    """A finished LLM turn's ``TurnMetrics.outcome`` (``result``: a ``TurnResult``): failed with
    the reason, cancelled, or ok."""
    if result.failure:
        return f"failed: {result.failure}"[:200]
    return "cancelled" if result.cancelled else "ok"


@dataclass(frozen=True)
class PartialMetrics:
    """One message's content: stamps in ns since the epoch (0 = not stamped)."""

    turn_id: str
    source: str
    stamps: Mapping[str, int] = field(default_factory=dict)
    counters: Mapping[str, float] = field(default_factory=dict)
    outcome: str = ""


@dataclass
class TurnRecord:
    turn_id: str
    stamps: dict[str, int] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    outcome: str = ""  # ok | cancelled | failed: <reason> (from whichever source knows it)
    last_update: float = 0.0  # caller's clock (seconds), for the settle rule

    def merge(self, partial: PartialMetrics, now: float = 0.0) -> None:
        for stage, ns in partial.stamps.items():
            if stage not in STAGES:
                raise ValueError(f"unknown stage {stage!r}")
            if ns <= 0:
                continue
            old = self.stamps.get(stage)
            if old is None or (ns > old if stage in _LATEST else ns < old):
                self.stamps[stage] = ns
        for name, value in partial.counters.items():
            if value:
                self.counters[name] = max(self.counters.get(name, 0), value)
        if partial.outcome and (not self.outcome or self.outcome == "ok"):
            self.outcome = partial.outcome  # a failure reported by any source wins over ok
        if partial.source not in self.sources:
            self.sources.append(partial.source)
        self.last_update = now

    @property
    def origin(self) -> int | None:
        """Where latencies start: the end of speech (or the final transcript for typed turns)."""
        return self.stamps.get("speech_end") or self.stamps.get("asr_final")

    def latency_ms(self, stage: str) -> float | None:
        origin, stamp = self.origin, self.stamps.get(stage)
        if origin is None or stamp is None:
            return None
        return (stamp - origin) / 1e6

    def latencies_ms(self) -> dict[str, float | None]:
        return {stage: self.latency_ms(stage) for stage in LATENCY_STAGES}

    @property
    def tokens(self) -> int:
        return int(self.counters.get("completion_tokens", 0))

    @property
    def tok_s(self) -> float:
        return float(self.counters.get("decode_tok_s", 0.0))

    def to_dict(self) -> dict[str, Any]:
        return {
            "turn_id": self.turn_id,
            "sources": list(self.sources),
            "stamps_ns": dict(self.stamps),
            "latency_ms": self.latencies_ms(),
            "counters": dict(self.counters),
            "outcome": self.outcome,
        }


class TurnTable:
    """Merges partials by turn id. A turn is complete once the LLM's ``turn_end`` is in and either
    every expected source reported or ``settle_s`` passed without news (a node may stay silent:
    typed turns have no ASR, text-only runs no TTS)."""

    def __init__(self, expected_sources: Sequence[str] = DEFAULT_SOURCES, settle_s: float = 2.0):
        self.expected = tuple(expected_sources)
        self.settle_s = settle_s
        self.turns: dict[str, TurnRecord] = {}  # arrival order
        self.completed: list[str] = []

    def add(self, partial: PartialMetrics, now: float) -> TurnRecord:
        record = self.turns.setdefault(partial.turn_id, TurnRecord(partial.turn_id))
        record.merge(partial, now)
        return record

    def is_complete(self, record: TurnRecord, now: float) -> bool:
        if "turn_end" not in record.stamps:
            return False
        heard_all = all(s in record.sources for s in self.expected)
        return heard_all or now - record.last_update >= self.settle_s

    def update(self, now: float) -> list[TurnRecord]:
        """Turns that became complete since the last call (in arrival order)."""
        done = [r for r in self.turns.values()
                if r.turn_id not in self.completed and self.is_complete(r, now)]  # fmt: skip
        self.completed.extend(r.turn_id for r in done)
        return done

    def complete_turns(self) -> list[TurnRecord]:
        return [self.turns[t] for t in self.completed]


def summarize(turns: Iterable[TurnRecord]) -> dict[str, dict[str, float]]:
    """Per stage (and tok/s): count, mean, median and max over the turns that have it."""
    turns = list(turns)
    series: dict[str, list[float]] = {s: [] for s in LATENCY_STAGES}
    series["tok_s"] = [t.tok_s for t in turns if t.tok_s > 0]
    for turn in turns:
        for stage, value in turn.latencies_ms().items():
            if value is not None:
                series[stage].append(value)
    return {
        name: {
            "count": len(values),
            "mean": statistics.fmean(values),
            "median": statistics.median(values),
            "max": max(values),
        }
        for name, values in series.items()
        if values
    }

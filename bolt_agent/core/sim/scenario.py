"""Simulation scenarios: what the simulated user says, and what the robot must do.

A scenario (YAML) lists user turns (text that is synthesised and spoken through the real ASR
path), optional camera video, node parameter overrides, and expectations checked on the record
of the run: a tool called with given arguments, speech before every tool goal, phrases spoken or
not, transcripts, and latency bounds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

EXPECTATION_KINDS = (
    "tool_called",
    "no_tool_called",
    "speech_before_tools",
    "spoken",
    "not_spoken",
    "transcript",
    "max_latency_s",
    "turns_completed",
)


class ScenarioError(ValueError):
    """The scenario file is invalid; the message says where."""


@dataclass(frozen=True)
class Expectation:
    kind: str
    spec: Any
    turn: int | None = None  # 1-based; None = any turn / all turns

    def describe(self) -> str:
        where = f" (turn {self.turn})" if self.turn else ""
        return f"{self.kind}: {self.spec}{where}"


@dataclass(frozen=True)
class Scenario:
    name: str
    profile: str
    turns: list[str]
    expectations: list[Expectation]
    tool_choices: list[str | None] = field(default_factory=list)  # per turn (None: node's)
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    video: str = ""


def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ScenarioError(f"{path}: {exc}") from exc
    turns, tool_choices = [], []
    for i, turn in enumerate(data.get("turns") or [], 1):
        text = turn.get("say") if isinstance(turn, dict) else turn
        if not isinstance(text, str) or not text.strip():
            raise ScenarioError(f"{path}: turn {i} needs a non-empty 'say'")
        turns.append(text.strip())
        tool_choices.append(turn.get("tool_choice") if isinstance(turn, dict) else None)
    if not turns:
        raise ScenarioError(f"{path}: no turns")
    expectations = []
    for i, entry in enumerate(data.get("expect") or [], 1):
        if not isinstance(entry, dict):
            raise ScenarioError(f"{path}: expectation {i} must be a mapping")
        entry = dict(entry)
        turn = entry.pop("turn", None)
        if len(entry) != 1 or next(iter(entry)) not in EXPECTATION_KINDS:
            raise ScenarioError(
                f"{path}: expectation {i}: one of {', '.join(EXPECTATION_KINDS)} (plus 'turn')"
            )
        kind, spec = next(iter(entry.items()))
        if turn is not None and not (isinstance(turn, int) and 1 <= turn <= len(turns)):
            raise ScenarioError(f"{path}: expectation {i}: turn must be 1..{len(turns)}")
        expectations.append(Expectation(kind, spec, turn))
    video = data.get("video", "")
    if video and not Path(video).is_absolute():
        video = str((path.parent / video).resolve())
    return Scenario(
        name=data.get("name", path.stem),
        profile=data.get("profile", "reachy_mini"),
        turns=turns,
        expectations=expectations,
        tool_choices=tool_choices,
        overrides=dict(data.get("overrides") or {}),
        video=video,
    )


@dataclass
class TurnLog:
    """What happened in one turn of the run."""

    said: str  # what the simulated user said
    utterance_id: str = ""
    transcript: str = ""
    spoken: list[str] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)  # llm/tool_events entries
    stamps: dict[str, float] = field(default_factory=dict)  # TurnMetrics stages (s)
    completed: bool = False
    error: str = ""

    @property
    def spoken_text(self) -> str:
        return " ".join(self.spoken)

    def latency(self, stage: str) -> float | None:
        a, b = {
            "voice_to_voice": ("speech_end", "first_audio"),
            "asr": ("speech_end", "asr_final"),
            "first_token": ("asr_final", "llm_first_token"),
            "first_speech": ("asr_final", "first_speech"),
        }[stage]
        if a in self.stamps and b in self.stamps:
            return self.stamps[b] - self.stamps[a]
        return None


@dataclass(frozen=True)
class Verdict:
    expectation: Expectation
    passed: bool
    detail: str


def evaluate(scenario: Scenario, turns: list[TurnLog]) -> list[Verdict]:
    return [_check(e, turns) for e in scenario.expectations]


def _check(e: Expectation, turns: list[TurnLog]) -> Verdict:
    scope = [turns[e.turn - 1]] if e.turn and e.turn <= len(turns) else turns
    if e.kind == "turns_completed":
        done = sum(t.completed for t in turns)
        return Verdict(e, done >= int(e.spec), f"{done}/{len(turns)} turns completed")
    if e.kind in ("tool_called", "no_tool_called"):
        spec = e.spec if isinstance(e.spec, dict) else {"name": e.spec}
        calls = [c for t in scope for c in t.tools]
        hits = [c for c in calls if _call_matches(c, spec)]
        seen = ", ".join(f"{c['tool']}{c['arguments']}" for c in calls) or "none"
        ok = bool(hits) if e.kind == "tool_called" else not hits
        return Verdict(e, ok, f"calls: {seen}")
    if e.kind == "speech_before_tools":
        bad = [
            i
            for i, t in enumerate(turns, 1)
            if "first_tool_goal" in t.stamps
            and not t.stamps.get("first_speech", float("inf")) < t.stamps["first_tool_goal"]
        ]
        n = sum("first_tool_goal" in t.stamps for t in turns)
        return Verdict(e, not bad and bool(e.spec), f"{n} turns with tools; out of order: {bad}")
    if e.kind in ("spoken", "not_spoken"):
        text = " ".join(t.spoken_text for t in scope).lower()
        found = str(e.spec).lower() in text
        ok = found if e.kind == "spoken" else not found
        return Verdict(e, ok, f"spoken: {text[:120]!r}")
    if e.kind == "transcript":
        got = " ".join(t.transcript for t in scope)
        ok = _norm(str(e.spec)) in _norm(got)
        return Verdict(e, ok, f"transcript: {got!r}")
    if e.kind == "max_latency_s":
        stage, limit = (
            (e.spec.get("stage", "voice_to_voice"), float(e.spec["value"]))
            if isinstance(e.spec, dict)
            else ("voice_to_voice", float(e.spec))
        )
        values = [t.latency(stage) for t in scope]
        measured = [v for v in values if v is not None]
        ok = bool(measured) and max(measured) <= limit
        return Verdict(e, ok, f"{stage}: {', '.join(f'{v:.2f}s' for v in measured) or 'none'}")
    return Verdict(e, False, "unknown expectation")


def _call_matches(call: dict[str, Any], spec: dict[str, Any]) -> bool:
    if "name" in spec and call.get("tool") != spec["name"]:
        return False
    args = call.get("arguments") or {}
    return all(args.get(k) == v for k, v in (spec.get("arguments") or {}).items())


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9 ]", " ", text.lower()).split())

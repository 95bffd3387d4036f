"""Quality figures of the LLM turn: the request sets of ``config/eval/`` and their scoring.

Pure and rclpy-free: ``bolt_agent.benchmarks.llm_eval`` drives the real llm_node and fills one
``TurnRecord`` per request; this module says what the figures are. Kept apart so the scoring is
tested without a model and the same rules apply to any way of running the turns.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bolt_agent.core.llm.speakable import is_speakable
from bolt_agent.core.paths import config_dir

#: fewer requests than this per profile make the percentages meaningless
MIN_REQUESTS = 12


@dataclass(frozen=True)
class EvalRequest:
    text: str
    tool: str = ""  # '' = no tool should be called
    arguments: dict[str, Any] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class EvalSet:
    profile: str
    requests: tuple[EvalRequest, ...]
    params: dict[str, Any] = field(default_factory=dict, hash=False)  # llm_node overrides


@dataclass
class TurnRecord:
    """What one request caused, as observed outside the node."""

    request: str
    sentences: list[str] = field(default_factory=list)  # speech/say texts, in order
    calls: list[dict[str, Any]] = field(default_factory=list)  # {"name", "arguments"} in order
    speech_before_goal: bool | None = None  # None: no goal in this turn
    completion_tokens: int = 0
    error: str = ""


def eval_path(profile: str) -> Path:
    return config_dir() / "eval" / f"{profile}.yaml"


def load_eval_set(profile_or_path: str) -> EvalSet:
    path = Path(profile_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = eval_path(profile_or_path)
    data = yaml.safe_load(path.read_text()) or {}
    requests = []
    for entry in data.get("requests") or []:
        expect = entry.get("expect") or {}
        if expect == "none":
            expect = {}
        requests.append(
            EvalRequest(
                str(entry["text"]), str(expect.get("tool", "")), dict(expect.get("arguments") or {})
            )
        )
    if len(requests) < MIN_REQUESTS:
        raise ValueError(f"{path}: {len(requests)} requests, at least {MIN_REQUESTS} needed")
    return EvalSet(
        str(data.get("profile", path.stem)), tuple(requests), dict(data.get("params") or {})
    )


def _norm(value: Any) -> Any:
    """Items compare by their words, not by case, articles or spacing."""
    if isinstance(value, str):
        words = [w for w in value.lower().replace("-", " ").split() if w not in ("a", "an", "the")]
        return " ".join(words)
    return value


def call_matches(request: EvalRequest, calls: list[dict[str, Any]]) -> bool:
    """The turn's first call is the expected tool with the expected arguments (or, when none is
    expected, there is no call)."""
    if not request.tool:
        return not calls
    if not calls or calls[0]["name"] != request.tool:
        return False
    got = calls[0].get("arguments") or {}
    return all(_norm(got.get(k)) == _norm(v) for k, v in request.arguments.items())


def _words_only(request: EvalRequest) -> EvalRequest:
    """The request with only its string arguments: "sells/buys the item asked for" whatever
    price or quantity the model put beside it."""
    words = {k: v for k, v in request.arguments.items() if isinstance(v, str)}
    return EvalRequest(request.text, request.tool, words)


def score(requests: tuple[EvalRequest, ...], records: list[TurnRecord]) -> dict[str, Any]:
    """Tool-choice accuracy, speakable-sentence rate, speech-before-goal rate, mean turn tokens
    (rates in 0..1; None where there was nothing to count)."""
    right = [call_matches(q, r.calls) for q, r in zip(requests, records)]
    named = [  # the right tool, whatever its arguments: separates choosing from copying
        call_matches(EvalRequest(q.text, q.tool), r.calls) for q, r in zip(requests, records)
    ]
    item = [  # the right tool and the thing asked for (strings), numbers (prices) not compared
        call_matches(_words_only(q), r.calls) for q, r in zip(requests, records)
    ]
    sentences = [s for r in records for s in r.sentences]
    speakable = [s for s in sentences if is_speakable(s)]
    with_goal = [r for r in records if r.speech_before_goal is not None]
    tokens = [r.completion_tokens for r in records if not r.error]
    by_tool: dict[str, list[bool]] = {}
    for q, ok in zip(requests, right):
        by_tool.setdefault(q.tool or "none", []).append(ok)
    return {
        "requests": len(records),
        "errors": sum(bool(r.error) for r in records),
        "tool_choice_accuracy": sum(right) / len(right) if right else None,
        "tool_choice_by_tool": {k: sum(v) / len(v) for k, v in by_tool.items()},
        "tool_name_accuracy": sum(named) / len(named) if named else None,
        "tool_item_accuracy": sum(item) / len(item) if item else None,
        "sentences": len(sentences),
        "speakable_sentence_rate": len(speakable) / len(sentences) if sentences else None,
        "unspeakable_sentences": [s for s in sentences if not is_speakable(s)],
        "turns_with_goals": len(with_goal),
        "speech_before_goal_rate": (
            sum(bool(r.speech_before_goal) for r in with_goal) / len(with_goal)
            if with_goal
            else None
        ),
        "mean_turn_tokens": statistics.fmean(tokens) if tokens else None,
        "turns": [{**asdict(r), "right_tool": ok} for r, ok in zip(records, right)],
    }

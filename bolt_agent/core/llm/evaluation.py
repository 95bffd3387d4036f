"""Quality figures of the LLM turn: the request sets of ``config/eval/`` and their scoring.

Pure and rclpy-free: ``bolt_agent.benchmarks.llm_eval`` drives the real llm_node and fills one
``TurnRecord`` per request; this module says what the figures are. Kept apart so the scoring is
tested without a model and the same rules apply to any way of running the turns.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bolt_agent.core.llm.reply_guard import copied_share, sentence_key, words
from bolt_agent.core.llm.speakable import is_speakable
from bolt_agent.core.paths import config_dir

#: fewer requests than this per split make the percentages meaningless
MIN_REQUESTS = 12
#: dev: may be used while tuning examples, descriptions, prompts and thresholds; test: held out,
#: reported apart, never tuned on
SPLITS = ("dev", "test")
KINDS = ("tool", "chitchat", "persona")
#: turns of one conversation in the eval (the distinct-sentence figure is per conversation)
SESSION_TURNS = 12
#: a reply repeating this share of the user's words (3 words or more) copies them
COPY_SHARE = 0.6


@dataclass(frozen=True)
class EvalRequest:
    text: str
    tool: str = ""  # '' = no tool should be called
    arguments: dict[str, Any] = field(default_factory=dict, hash=False)
    kind: str = "tool"  # tool | chitchat | persona
    mentions: tuple[str, ...] = ()  # persona: a good reply has one of these words


@dataclass(frozen=True)
class EvalSet:
    profile: str
    requests: tuple[EvalRequest, ...]
    params: dict[str, Any] = field(default_factory=dict, hash=False)  # llm_node overrides
    split: str = "dev"


@dataclass
class TurnRecord:
    """What one request caused, as observed outside the node."""

    request: str
    sentences: list[str] = field(default_factory=list)  # speech/say texts, in order
    calls: list[dict[str, Any]] = field(default_factory=list)  # {"name", "arguments"} in order
    speech_before_goal: bool | None = None  # None: no goal in this turn
    completion_tokens: int = 0
    error: str = ""
    session: int = 0  # which conversation of the run (``SESSION_TURNS`` turns each)


def eval_path(profile: str, split: str = "dev") -> Path:
    return config_dir() / "eval" / split / f"{profile}.yaml"


def eval_profiles() -> list[str]:
    """The profiles with a request set (in both splits)."""
    found = [{p.stem for p in (config_dir() / "eval" / s).glob("*.yaml")} for s in SPLITS]
    return sorted(set.intersection(*found))


def load_eval_set(profile_or_path: str, split: str = "dev") -> EvalSet:
    path = Path(profile_or_path)
    if path.suffix not in (".yaml", ".yml"):
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
        path = eval_path(profile_or_path, split)
    data = yaml.safe_load(path.read_text()) or {}
    requests = []
    for entry in data.get("requests") or []:
        expect = entry.get("expect") or {}
        if expect == "none":
            expect = {}
        kind = str(entry.get("kind", "tool" if expect else "chitchat"))
        if kind not in KINDS or (kind == "tool") != bool(expect):
            raise ValueError(f"{path}: {entry.get('text')!r}: kind {kind!r} against {expect!r}")
        requests.append(
            EvalRequest(
                str(entry["text"]),
                str(expect.get("tool", "")),
                dict(expect.get("arguments") or {}),
                kind,
                tuple(str(w).lower() for w in entry.get("mentions") or ()),
            )
        )
    if len(requests) < MIN_REQUESTS:
        raise ValueError(f"{path}: {len(requests)} requests, at least {MIN_REQUESTS} needed")
    return EvalSet(
        str(data.get("profile", path.stem)),
        tuple(requests),
        dict(data.get("params") or {}),
        str(data.get("split", split)),
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


def _rate(flags: list[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def copies(request: str, sentences: list[str]) -> bool:
    """The reply repeats ``COPY_SHARE`` of the user's words (a request of 3 words or more)."""
    return len(request.split()) >= 3 and copied_share(request, " ".join(sentences)) >= COPY_SHARE


def distinct_sentence_rate(records: list[TurnRecord]) -> float | None:
    """Sentences said once within their conversation ÷ sentences (pooled over conversations;
    the same words without case or punctuation are the same sentence)."""
    total = distinct = 0
    for session in dict.fromkeys(r.session for r in records):
        keys = [sentence_key(s) for r in records if r.session == session for s in r.sentences]
        keys = [k for k in keys if k]
        total += len(keys)
        distinct += len(set(keys))
    return distinct / total if total else None


def same_opening(records: list[TurnRecord]) -> tuple[str, float] | None:
    """The first word replies open with most often, and the share of replies (with words) that
    open with it: "6 of 7 requests begin with 'Yes,'" is a reply that sounds canned, however
    distinct the sentences after it are."""
    firsts = [w[0] for r in records if not r.error and (w := words(" ".join(r.sentences)))]
    if not firsts:
        return None
    word, count = Counter(firsts).most_common(1)[0]
    return word, count / len(firsts)


def mentions(request: EvalRequest, sentences: list[str]) -> bool:
    said = set(sentence_key(" ".join(sentences)).split())
    return any(w in said or w.rstrip("s") in said for w in request.mentions)


def score(requests: tuple[EvalRequest, ...], records: list[TurnRecord]) -> dict[str, Any]:
    """Tool-choice accuracy (all requests; tool requests; no tool for chit-chat and persona),
    persona facts, copies, distinct sentences, replies opening with the same word, speakable
    sentences, speech before goals, mean
    turn tokens (rates in 0..1; None where there was nothing to count)."""
    right = [call_matches(q, r.calls) for q, r in zip(requests, records)]
    pairs = list(zip(requests, records, right))
    named = [  # the right tool, whatever its arguments: separates choosing from copying
        call_matches(EvalRequest(q.text, q.tool), r.calls) for q, r in zip(requests, records)
    ]
    item = [  # the right tool and the thing asked for (strings), numbers (prices) not compared
        call_matches(_words_only(q), r.calls) for q, r in zip(requests, records)
    ]
    sentences = [s for r in records for s in r.sentences]
    opening = same_opening(records)
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
        "tool_request_accuracy": _rate([ok for q, _, ok in pairs if q.kind == "tool"]),
        "no_tool_rate": _rate([ok for q, _, ok in pairs if q.kind != "tool"]),
        "persona_fact_rate": _rate(
            [mentions(q, r.sentences) for q, r, _ in pairs if q.kind == "persona" and q.mentions]
        ),
        "copy_rate": _rate([copies(q.text, r.sentences) for q, r, _ in pairs if not r.error]),
        "distinct_sentence_rate": distinct_sentence_rate([r for r in records if not r.error]),
        "same_opening_rate": opening[1] if opening else None,
        "same_opening_word": opening[0] if opening else None,
        "silent_turns": sum(not r.sentences and not r.error for r in records),
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

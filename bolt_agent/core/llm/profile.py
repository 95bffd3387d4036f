"""Profiles (config/profiles/<name>.yaml): persona, tools, few-shot examples and context options
of one character."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from bolt_agent.core.llm.dialogue import Step
from bolt_agent.core.llm.speakable import is_speakable
from bolt_agent.core.llm.tool_selection import Option, SelectionSpec
from bolt_agent.core.paths import config_dir
from bolt_agent.core.tools.registry import ToolRegistry

#: what the example's tool "returned" when the YAML does not say
DEFAULT_RESULT: dict[str, Any] = {"status": "done"}


#: IDF-weighted overlap at which an example is near enough without sharing a tool word: two
#: specific words ("look around": 4.4) pass, one general word ("your", "like": 2.2) does not
MIN_NEAREST_SCORE = 3.0


@dataclass(frozen=True)
class Example:
    """One few-shot exchange: the user's request, the robot's spoken reply, its calls (with
    their results) and what it says after them."""

    user: str
    say: str
    calls: tuple[dict[str, Any], ...] = ()
    then: str = ""

    def messages(self, short: bool = False) -> list[dict[str, Any]]:
        """The exchange as history messages (the same shape the turn runner stores).
        ``short``: the request, the reply and its calls only (no results, no closing words):
        all a copy right before the request needs to show, at ~70 % of the tokens (74 of 109
        for reachy_mini's "look around" exchange)."""
        first = Step(content=self.say)
        for call in self.calls:
            first.tool_calls.append({"name": call["name"], "arguments": call["arguments"]})
            if not short:
                first.tool_responses.append(
                    {"name": call["name"], "response": call.get("result", DEFAULT_RESULT)}
                )
        out = [{"role": "user", "content": self.user}, first.message()]
        if self.calls and self.then and not short:
            out.append(Step(content=self.then).message())
        return out


@dataclass(frozen=True)
class Profile:
    name: str
    persona: str
    registry: ToolRegistry
    use_scene: bool = False
    examples: tuple[Example, ...] = ()
    #: said before a tool goal when the model said nothing first (spoken-first for every model)
    filler: str = "Sure."
    demo: tuple[str, ...] = field(default=(), compare=False)
    #: tool selection by scoring (``selection:``; None: the profile has no options)
    selection: SelectionSpec | None = field(default=None, compare=False)

    def example_messages(self) -> list[dict[str, Any]]:
        return [m for ex in self.examples for m in ex.messages()]

    def nearest_examples(
        self, text: str, n: int, min_score: float = MIN_NEAREST_SCORE, option: Option | None = None
    ) -> list[Example]:
        """The `n` examples most like `text` (IDF-weighted stem overlap, no model), least similar
        first: the closest ends up right before the user's turn, where a base model copies best.
        Examples without calls are skipped (they teach no call), and none share no word.

        A value that several tools take for the same argument (a shop item: sold or bought) is
        matched as its slot (``<item>``), not by its words: it says nothing about which tool
        fits, and matching it brought the other trade's example that named the same item. A
        request that names such a value gets no nearest example at all: the model copies the
        value it saw last, so the example's item would replace the one asked for (measured:
        the right item fell from 9 to 6 of 12 requests with two nearest examples).

        An example shares words with most requests ("your", "like", "me"), which says nothing
        about a call: it is taken only when the overlap is strong (``min_score``) or a
        shared word names what a tool does (a tool's name or enum value: "wave").
        Chit-chat ("What is your favourite colour?") gets none: no call example primes it,
        and its turn skips the exchange's prefill (0.15-0.3 s before the first word here)."""
        if n <= 0:
            return []
        if option is not None:
            return self._nearest_for_option(text, n, min_score, option)
        slots, docs, df, tool_words = self._retrieval_index
        query, named = _stems(text, slots)
        if named:
            return []
        return _closest(
            docs,
            df,
            query,
            n,
            lambda ex, shared, score: (
                bool(shared) and (score >= min_score or bool(shared & tool_words))
            ),
        )

    def _nearest_for_option(
        self, text: str, n: int, min_score: float, option: Option
    ) -> list[Example]:
        """With a selected option, the nearest examples are those that show it: a call
        example of that tool and pinned values, taken even when it shares no word with the
        request (its reply is what the reply should be like: "Yes, here is a happy nod."), or,
        for no tool, a reply without calls that is near enough (the name for "what is your
        name"). The named-value rule of ``nearest_examples`` holds."""
        slots, docs, df, _ = self._option_index
        query, named = _stems(text, slots)
        if named:
            return []

        def keep(ex: Example, shared: set[str], score: float) -> bool:
            if not option.tool:
                return not ex.calls and score >= min_score
            first = ex.calls[0] if ex.calls else None
            return first is not None and option.matches(first["name"], first["arguments"])

        return _closest(docs, df, query, n, keep)

    @cached_property
    def _option_index(self):
        """``_retrieval_index`` over every example, those without calls too."""
        return self._index(self.examples)

    @cached_property
    def _retrieval_index(self):
        """What ``nearest_examples`` matches against, built once per profile (it runs on every
        prewarm, probe and turn): the shared-value slots, each call example's stems, their
        document frequencies and the tool words."""
        return self._index([ex for ex in self.examples if ex.calls])

    def _index(self, examples):
        slots = _shared_values(self.registry)
        docs = [(ex, _stems(_example_text(ex), slots)[0]) for ex in examples]
        df: dict[str, int] = {}
        for _, stems in docs:
            for st in stems:
                df[st] = df.get(st, 0) + 1
        return slots, docs, df, _tool_words(self.registry)

    def nearest(
        self, n: int, short: bool = False, min_score: float = MIN_NEAREST_SCORE
    ) -> Callable[[str], list[dict[str, Any]]] | None:
        """For ``Dialogue(nearest=…)``: the nearest examples as messages (None when n is 0);
        ``short``: each as ``Example.messages(short=True)``; ``min_score``: as in
        ``nearest_examples`` (0: any shared word)."""
        if n <= 0 or not self.examples:
            return None
        return lambda text, option=None: [
            m
            for ex in self.nearest_examples(text, n, min_score, option)
            for m in ex.messages(short)
        ]


def _closest(docs, df, query: set[str], n: int, keep) -> list[Example]:
    """The ``n`` examples of ``docs`` with the most IDF-weighted overlap with ``query`` that
    ``keep(example, shared stems, score)`` accepts, least similar first (ties: the earlier
    example in the YAML wins)."""
    scored = []
    for i, (ex, stems) in enumerate(docs):
        shared = query & stems
        score = sum(math.log(1 + len(docs) / df[st]) for st in shared)
        if keep(ex, shared, score):
            scored.append((score, -i, ex))
    best = sorted(scored, key=lambda t: (t[0], t[1]), reverse=True)[:n]
    return [ex for _, _, ex in reversed(best)]


#: words that say nothing about which example fits ("my" and "me" stay: who owns the item
#: tells selling from buying)
_STOP = frozenset(
    (
        "a",
        "an",
        "the",
        "i",
        "you",
        "it",
        "is",
        "are",
        "am",
        "to",
        "of",
        "and",
        "or",
        "in",
        "on",
        "at",
        "for",
        "with",
        "be",
        "do",
        "can",
        "could",
        "would",
        "will",
        "please",
        "that",
        "this",
        "what",
        "there",
        "here",
    )
)


def _stem(word: str) -> str:
    """Crude English stemming: nods/nodding/nodded -> nod, antennas -> antenna."""
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            word = word[: -len(suffix)]
            if suffix in ("ing", "ed") and len(word) > 2 and word[-1] == word[-2]:
                word = word[:-1]
            break
    return word


def _tool_words(registry: ToolRegistry) -> set[str]:
    """Stems that name what the tools do: tool names and string enum values (``wave_antenna``
    -> wave, antenna). Descriptions are left out: their general words ("all", "name", "one")
    would match anything."""
    words: set[str] = set()
    for tool in registry:
        words.update(_words(tool.name))
        for schema in (tool.parameters.get("properties") or {}).values():
            words.update(
                w for v in schema.get("enum") or () if isinstance(v, str) for w in _words(v)
            )
    return words


#: (argument name, the value's stems) for values that several tools share
Slots = tuple[tuple[str, tuple[str, ...]], ...]


def _shared_values(registry: ToolRegistry) -> Slots:
    """String enum values that two or more tools accept for the same argument, longest first
    (``war hammer`` before ``hammer``)."""
    tools: dict[tuple[str, str], set[str]] = {}
    for tool in registry:
        for arg, schema in (tool.parameters.get("properties") or {}).items():
            for value in schema.get("enum") or ():
                if isinstance(value, str):
                    tools.setdefault((arg, value), set()).add(tool.name)
    shared = {(arg, tuple(_words(v))) for (arg, v), names in tools.items() if len(names) > 1}
    return tuple(sorted(shared, key=lambda s: -len(s[1])))


def _words(text: str) -> list[str]:
    words = re.findall(r"[a-z]+|[0-9]+", text.lower().replace("_", " "))
    return ["<n>" if w.isdigit() else _stem(w) for w in words if w not in _STOP]


def _stems(text: str, slots: Slots = ()) -> tuple[set[str], set[tuple[str, ...]]]:
    """The text's stems, each shared value replaced by its slot (``<item>``), and the shared
    values it names."""
    words, named = _words(text), set()
    for arg, value in slots:
        k, i = len(value), 0
        while i + k <= len(words):
            if tuple(words[i : i + k]) == value:
                words[i : i + k] = [f"<{arg}>"]
                named.add(value)
            i += 1
    return set(words), named


def _example_text(ex: Example) -> str:
    """An example is found by its request, its spoken reply (which names the action: "I tilt
    my head") and its calls' string values (``scan_room`` -> scan, room)."""
    values = [v for c in ex.calls for v in c["arguments"].values() if isinstance(v, str)]
    return " ".join([ex.user, ex.say, *values])


def profile_path(name: str) -> Path:
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.exists():
        return path
    return config_dir() / "profiles" / f"{name}.yaml"


def load_profile(name: str) -> Profile:
    path = profile_path(name)
    if not path.exists():
        available = sorted(p.stem for p in (config_dir() / "profiles").glob("*.yaml"))
        raise FileNotFoundError(f"profile {name!r} not found at {path} (available: {available})")
    data = yaml.safe_load(path.read_text()) or {}
    registry = ToolRegistry.from_config(data.get("tools"))
    filler = str(data.get("filler", "Sure.")).strip()
    if not is_speakable(filler):
        raise ValueError(f"profile {path.name}: filler {filler!r} is not speakable")
    persona = str(data.get("persona", "")).strip()
    facts = [str(f).strip() for f in data.get("facts") or []]
    if facts:  # in the system prompt, one per line: what "what is your name" needs
        persona = "\n".join([persona, "Facts about you:", *(f"- {f}" for f in facts)]).strip()
    selection = None
    if data.get("selection"):
        selection = SelectionSpec.from_config(data["selection"], registry)
    return Profile(
        name=data.get("name", path.stem),
        persona=persona,
        selection=selection,
        registry=registry,
        use_scene=bool(data.get("use_scene", False)),
        examples=tuple(_example(e, registry, path.name) for e in data.get("examples") or []),
        filler=filler,
        demo=tuple(data.get("demo") or ()),
    )


def _example(entry: dict[str, Any], registry: ToolRegistry, where: str) -> Example:
    """An example must be what the model is allowed to produce: speakable words, valid calls."""
    say, then = str(entry.get("say", "")).strip(), str(entry.get("then", "")).strip()
    for text in (say, then):
        if text and not is_speakable(text):
            raise ValueError(f"profile {where}: example speech {text!r} is not speakable")
    if not say:
        raise ValueError(f"profile {where}: example {entry.get('user')!r} says nothing first")
    calls = []
    for call in entry.get("calls") or []:
        args = dict(call.get("arguments") or {})
        problem = registry.validate(call.get("name", ""), args)
        if problem:
            raise ValueError(f"profile {where}: example {entry.get('user')!r}: {problem}")
        calls.append({"name": call["name"], "arguments": args, **_result(call)})
    return Example(str(entry["user"]).strip(), say, tuple(calls), then)


def _result(call: dict[str, Any]) -> dict[str, Any]:
    return {"result": call["result"]} if "result" in call else {}

"""Argument values a request names, copied rather than decoded: a catalog item by its words, a
number in digits (or, where it has none, in words).

A small model decoding an argument under a grammar writes what its examples primed, not what
it was told: on the bundled 270M model "I'm asking 7 gold" became a price of 70 (the grammar
admits another digit after the 7, and the examples' prices have two), and "an old iron sword"
became the steel longsword. A tool lists the arguments it copies (``from_request``); where the
request names exactly one value the argument admits, the turn's grammar admits only that value
(``narrowed_to``). Whatever is ambiguous (two items, two numbers, "hammer" with two hammers in
the catalog) or absent is left to the model, as before.

Pure: words and numbers, no model.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from bolt_agent.core.tools.registry import ToolRegistry

_WORD = re.compile(r"[a-z]+|\d+")

_UNITS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen "
    "fourteen fifteen sixteen seventeen eighteen nineteen"
)
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety"
NUMBER_WORDS = dict(zip(_UNITS.split(), range(20), strict=True)) | dict(
    zip(_TENS.split(), range(20, 100, 10), strict=True)
)


def _stem(word: str) -> str:
    """A plural's singular, roughly ("helmets" → "helmet"): enough to match a catalog's names,
    which are singular."""
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def _words(text: str) -> list[str]:
    return [_stem(w) for w in _WORD.findall(text.lower().replace("'", ""))]


def named_choice(text: str, values: Sequence[str]) -> str | None:
    """The one value of ``values`` that ``text`` names, or None.

    A value is named by all its words ("iron sword"); of two named so, the longer wins only
    where it contains the other. Failing that, by a word no other value has ("dagger" for
    "hunting dagger", "longsword"). Two values named equally well are ambiguous: None.
    """
    said = set(_words(text))
    split = {v: set(_words(v)) for v in values}
    full = named_in_full(text, values)
    if full:
        return full[0] if len(full) == 1 else None
    partial = [
        v
        for v, ws in split.items()
        if any(w in said and not any(w in split[o] for o in split if o != v) for w in ws)
    ]
    return partial[0] if len(partial) == 1 else None


def named_in_full(text: str, values: Sequence[str]) -> list[str]:
    """The values ``text`` names by all their words (a plural counts), less those contained in
    another one named ("hammer" is not named where "war hammer" is)."""
    said = set(_words(text))
    split = {v: set(_words(v)) for v in values}
    full = [v for v, ws in split.items() if ws and ws <= said]
    return [v for v in full if not any(split[v] < split[o] for o in full)]


def numbers_in(text: str) -> list[int]:
    """The numbers ``text`` names: its digits, or, where it has none, its number words
    ("twenty five" → 25; words count only without digits, which is how speech comes from
    whisper)."""
    tokens = _WORD.findall(text.lower())
    digits = [int(t) for t in tokens if t.isdigit()]
    if digits:
        return digits
    return _spelled(tokens)


def _spelled(tokens: list[str]) -> list[int]:
    """Numbers written in words: "twenty five", "a hundred and fifty", "one hundred twenty".
    "one" alone is not one: it is a pronoun as often ("one of your helmets", "I'll buy one")."""
    out: list[int] = []
    run: int | None = None
    words: list[str] = []  # the run's words
    prev = ""
    for token in [*tokens, ""]:
        value = NUMBER_WORDS.get(token)
        if token == "hundred" and (run is not None or prev == "a"):
            run = (1 if run is None else run) * 100
        elif token == "and" and run is not None and run >= 100 and run % 100 == 0:
            pass  # "a hundred and fifty"
        elif value is not None and run is None:
            run = value
        elif value is not None and run >= 100 and run % 100 == 0 and value < 100:
            run += value
        elif value is not None and run % 10 == 0 and run % 100 >= 20 and value < 10:
            run += value  # "twenty" "five"
        else:
            if run is not None and words != ["one"]:
                out.append(run)
            run, words = value, []
        if run is not None:
            words.append(token)
        prev = token
    return out


def named_number(text: str, minimum: float | None, maximum: float | None) -> int | None:
    """The one number ``text`` names within the bounds, or None (none, or several)."""
    found = {
        n
        for n in numbers_in(text)
        if (minimum is None or n >= minimum) and (maximum is None or n <= maximum)
    }
    return found.pop() if len(found) == 1 else None


def named_value(text: str, schema: dict[str, Any]) -> Any:
    """What ``text`` names for an argument with this JSON schema: a string enum's value, or an
    integer; None when it names none, or more than one."""
    enum = schema.get("enum")
    if enum and all(isinstance(v, str) for v in enum):
        return named_choice(text, enum)
    if schema.get("type") == "integer":
        return named_number(text, schema.get("minimum"), schema.get("maximum"))
    return None


def narrowed_to(registry: ToolRegistry, text: str) -> ToolRegistry:
    """``registry`` with each ``from_request`` argument that ``text`` names fixed to that value
    (the grammar built from it admits only that value); ``registry`` itself when none is.
    Validation and the grammar use it; rate limits stay with the original."""
    tools, changed = [], False
    for tool in registry:
        props = tool.parameters.get("properties", {})
        named = {a: named_value(text, props.get(a, {})) for a in tool.from_request}
        named = {a: v for a, v in named.items() if v is not None}
        if named:
            params = copy.deepcopy(tool.parameters)
            for name, value in named.items():
                params["properties"][name]["enum"] = [value]
            tool = dataclasses.replace(tool, parameters=params)
            changed = True
        tools.append(tool)
    return ToolRegistry(tools) if changed else registry

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
from collections.abc import Iterable, Sequence
from typing import Any

import jsonschema

from bolt_agent.core.tools.registry import ToolRegistry, string_enum

_WORD = re.compile(r"[^\W\d_]+|\d+")
#: a number as written (signed, with thousands commas, an ordinal's suffix) or a word
_TOKEN = re.compile(r"-?\d[\d,]*(?:st|nd|rd|th)?|[^\W\d_]+")
_GROUPED = re.compile(r"\d{1,3}(?:,\d{3})+")
_ORDINAL = re.compile(r"-?\d+(?:st|nd|rd|th)")
MAX_DIGITS = 12  # longer runs of digits are not a price or a count

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
    return [_stem(w) for w in _WORD.findall(text.lower().replace("'", "").replace("\u2019", ""))]


def catalog_words(values: Iterable[str]) -> frozenset[str]:
    """The words of a catalog's names: a number right before one counts the item ("two iron
    helmets"), it is not a price."""
    return frozenset(w for v in values for w in _words(v))


def named_choice(text: str, values: Sequence[str]) -> str | None:
    """The one value of ``values`` that ``text`` names, or None.

    A value is named by all its words ("iron sword"); of two named so, the longer wins only
    where it contains the other. Failing that, by a word no other value has ("dagger" for
    "hunting dagger", "longsword"). Two values named, in full or by such a word ("not the
    iron sword, the longsword"), are ambiguous: None.
    """
    said = set(_words(text))
    split = {v: set(_words(v)) for v in values}
    full = named_in_full(text, values)
    partial = [
        v
        for v, ws in split.items()
        if any(w in said and not any(w in split[o] for o in split if o != v) for w in ws)
    ]
    if full:
        others = [v for v in partial if v not in full and not split[v] < split[full[0]]]
        return full[0] if len(full) == 1 and not others else None
    return partial[0] if len(partial) == 1 else None


def named_in_full(text: str, values: Sequence[str]) -> list[str]:
    """The values ``text`` names by all their words (a plural counts), less those contained in
    another one named ("hammer" is not named where "war hammer" is)."""
    said = set(_words(text))
    split = {v: set(_words(v)) for v in values}
    full = [v for v, ws in split.items() if ws and ws <= said]
    return [v for v in full if not any(split[v] < split[o] for o in full)]


def _digits(token: str, before: str) -> int | None:
    """A number written in digits: "1,000" is a thousand; "-5" is negative only where the sign
    opens a word ("20-30" is two numbers); an ordinal ("3rd") or a run too long is none."""
    token = token.rstrip(",")
    if _ORDINAL.fullmatch(token):
        return None
    sign = -1 if token.startswith("-") and (not before or before.isspace()) else 1
    body = token.lstrip("-")
    if _GROUPED.fullmatch(body):
        body = body.replace(",", "")
    if not body.isdigit() or len(body) > MAX_DIGITS:
        return None
    return sign * int(body)


def numbers_in(text: str, counted: frozenset[str] = frozenset()) -> list[int]:
    """The numbers ``text`` names: its digits, or, where it has none, its number words
    ("twenty five" → 25; words count only without digits, which is how speech comes from
    whisper). A number right before a word of ``counted`` counts things ("two iron
    helmets"): it is left out."""
    lowered = text.lower().replace("'", "")
    found = [(m.group(), m.start()) for m in _TOKEN.finditer(lowered)]
    tokens = [t for t, _ in found]
    after = [_stem(t) for t in tokens[1:]] + [""]
    if any(t[0].isdigit() or t[0] == "-" for t in tokens):
        out = []
        for (token, start), following in zip(found, after):
            if token[0].isdigit() or token[0] == "-":
                value = _digits(token, lowered[start - 1 : start] if start else "")
                if value is not None and following not in counted:
                    out.append(value)
        return out
    return _spelled(tokens, counted)


def _spelled(tokens: list[str], counted: frozenset[str] = frozenset()) -> list[int]:
    """Numbers written in words: "twenty five", "a hundred and fifty", "two thousand".
    "one" alone is not one: it is a pronoun as often ("one of your helmets", "I'll buy one")."""
    out: list[int] = []
    run: int | None = None
    words: list[str] = []  # the run's words
    prev = ""
    for token in [*tokens, ""]:
        value = NUMBER_WORDS.get(token)
        if token == "thousand" and (run is not None or prev == "a"):
            run = (1 if run is None else run) * 1000
        elif token == "hundred" and (run is not None or prev == "a"):
            low = 1 if run is None else run % 1000 or 1
            run = (0 if run is None else run - run % 1000) + low * 100
        elif token == "and" and run is not None and run >= 100 and run % 100 == 0:
            pass  # "a hundred and fifty"
        elif value is not None and run is None:
            run = value
        elif value is not None and run >= 100 and run % 100 == 0 and value < 100:
            run += value
        elif value is not None and run % 10 == 0 and run % 100 >= 20 and value < 10:
            run += value  # "twenty" "five"
        else:
            if run is not None and words != ["one"] and _stem(token) not in counted:
                out.append(run)
            run, words = value, []
        if run is not None:
            words.append(token)
        prev = token
    return out


def named_number(
    text: str,
    minimum: float | None,
    maximum: float | None,
    counted: frozenset[str] = frozenset(),
) -> int | None:
    """The one number ``text`` names within the bounds, or None (none, or several)."""
    found = {
        n
        for n in numbers_in(text, counted)
        if (minimum is None or n >= minimum) and (maximum is None or n <= maximum)
    }
    return found.pop() if len(found) == 1 else None


def named_value(text: str, schema: dict[str, Any], counted: frozenset[str] = frozenset()) -> Any:
    """What ``text`` names for an argument with this JSON schema: a string enum's value, or an
    integer the schema admits (its bounds, enum, multipleOf...); None when it names none, or
    more than one. ``counted``: words after which a number is a count (``catalog_words``)."""
    enum = string_enum(schema)
    if enum is not None:
        return named_choice(text, enum)
    if schema.get("type") == "integer":
        value = named_number(text, schema.get("minimum"), schema.get("maximum"), counted)
        admitted = jsonschema.validators.validator_for(schema)(schema).is_valid
        return value if value is not None and admitted(value) else None
    return None


def copied_catalog(tool) -> frozenset[str]:
    """The words of the string values ``tool`` copies (``catalog_words``)."""
    props = tool.parameters.get("properties", {})
    enums = (string_enum(props[name]) or [] for name in tool.from_request)
    return catalog_words(v for enum in enums for v in enum)


def narrowed_to(registry: ToolRegistry, text: str) -> ToolRegistry:
    """``registry`` with each ``from_request`` argument that ``text`` names fixed to that value
    (the grammar built from it admits only that value); ``registry`` itself when none is.
    Validation and the grammar use it; rate limits stay with the original."""
    tools, changed = [], False
    for tool in registry:
        props = tool.parameters.get("properties", {})
        counted = copied_catalog(tool)
        named = {a: named_value(text, props.get(a, {}), counted) for a in tool.from_request}
        named = {a: v for a, v in named.items() if v is not None}
        if named:
            params = copy.deepcopy(tool.parameters)
            for name, value in named.items():
                params["properties"][name]["enum"] = [value]
            tool = dataclasses.replace(tool, parameters=params)
            changed = True
        tools.append(tool)
    return ToolRegistry(tools) if changed else registry

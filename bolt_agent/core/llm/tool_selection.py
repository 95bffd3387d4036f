"""Which tool a request asks for (or none), chosen by scoring rather than by greedy decoding.

A small base model decoding a call greedily picks whatever its few-shot examples primed most (on
the bundled 270M model every new phrasing became ``scan_room``), and it cannot say "no tool"
once its grammar admits a call. Here each option (a tool with its decisive arguments pinned, or
no tool) is described by what the character would say when taking it, and the option that best
explains the request wins: log P(request | description), the noisy-channel direction. The
request's own tokens are scored under every option, so options need no length normalisation
and no calibration against each other, and a label the model likes in general gains nothing.
"No tool" has several descriptions (thanks, a greeting, a question about the character); an
option scores its best description.

An open argument with a known set of values (``arguments:``, an animation's ``speed``) is
chosen the same way, once its option has won (a second, smaller batch over the same cached
descriptions; "no tool" and the tools that do not take it cost nothing more): each value is
described by what the character says when doing it so, its first value is the default, and
another value wins only by ``margin``. Arguments left open otherwise (a shop item, a price)
are decoded under the grammar, narrowed to the chosen tool with the pinned values
(``pinned_registry``), and to the values the request names where the tool copies them
(``request_values.narrowed_to``; a pinned value stands over a copied one).

A value the request names that a tool copies from it (``from_request``: a catalog item named in
full, one price) is evidence for that tool, which the descriptions alone do not weigh: "I'll
take a war hammer, please." was explained by "no tool" about as well as by a sale, since neither
says "war hammer", and "I'll let it go for 20 gold" by a sale as well as by a purchase, since
both descriptions speak of gold. A tool gains ``named_bonus`` for each value it copies that the
request names (an item in full), and loses it for each required one the request does not name
at all (the model would have to make it up: "sell me a horseshoe" bought one for 1000 gold); an
item named only in part ("the longsword") is copied but weighs nothing either way. A purchase
from the player (item and price) then outweighs a sale to the player (item) when a price is
named, and loses to it when none is.

Pure and rclpy-free: the scores come from ``TextEngine.channel_scores``.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bolt_agent.core.tools.registry import ToolRegistry, string_enum
from bolt_agent.core.tools.request_values import (
    copied_catalog,
    named_choice,
    named_in_full,
    named_value,
)

#: how the descriptions are put before the request; ``{says}``: one description
DEFAULT_TEMPLATE = 'The answer was: "{says}"\nWhat had been said just before it:'
NO_TOOL = "none"

#: (every description, the request, the indexes of the descriptions to score: None for all)
#: -> their scores in that order, or None (``TextEngine.channel_scores``)
Scorer = Callable[[list[str], str, "Sequence[int] | None"], "list[float] | None"]


@dataclass(frozen=True)
class Option:
    """A tool with some arguments pinned, or no tool (``tool`` ''), and what the character
    says when taking it."""

    tool: str
    arguments: dict[str, Any] = field(default_factory=dict, hash=False)
    says: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        if not self.tool:
            return NO_TOOL
        pinned = ",".join(f"{k}={v}" for k, v in sorted(self.arguments.items()))
        return f"{self.tool}({pinned})" if pinned else self.tool

    def matches(self, name: str, arguments: dict[str, Any]) -> bool:
        """A call (an example's) is this option: the same tool and the pinned values."""
        return name == self.tool and all(arguments.get(k) == v for k, v in self.arguments.items())


@dataclass(frozen=True)
class ArgumentChoice:
    """An enum argument chosen by scores where an option leaves it open: each value with what
    the character says when doing it so; ``values[0]`` is the default."""

    name: str
    values: tuple[tuple[str, tuple[str, ...]], ...]
    #: how much better (log-probability) a value must explain the request than the default
    margin: float = 0.0
    tools: frozenset[str] = frozenset()  # the options' tools that take it
    #: the default pinned too (the tool needs the value said); false: left to the grammar
    pin_default: bool = False

    def label(self, value: Any) -> str:
        return f"{self.name}={value}"

    def open_in(self, option: Option) -> bool:
        return option.tool in self.tools and self.name not in option.arguments


@dataclass(frozen=True)
class Selection:
    option: Option
    #: each label's best description for these words: every option's, and the argument
    #: values' where they were scored (for this option, or an earlier one with the same words)
    scores: dict[str, float]
    margin: float  # the winner's lead over the runner-up (log-probability)
    seconds: float  # scoring time (0 when cached)
    arguments: dict[str, Any] = field(default_factory=dict)  # open ones chosen by scores

    @property
    def call(self) -> Option:
        """The option with the arguments chosen by scores pinned too: what the grammar
        admits (``option`` alone is what the examples are matched on)."""
        if not self.arguments:
            return self.option
        pinned = {**self.option.arguments, **self.arguments}
        return dataclasses.replace(self.option, arguments=pinned)


class SelectionConfigError(ValueError):
    """The profile's ``selection:`` block is invalid."""


@dataclass(frozen=True)
class SelectionSpec:
    """A profile's ``selection:`` block, validated against its tools."""

    options: tuple[Option, ...]
    template: str = DEFAULT_TEMPLATE
    #: how much better (log-probability) a tool must explain the request than "no tool" does:
    #: a question or small talk is explained a little by every description
    tool_margin: float = 0.0
    #: true: the winning option is the call (tool and pinned arguments); false: the scores only
    #: decide tool or no tool, and the grammar's decoding picks the call (where the examples
    #: teach the tools apart better than descriptions do: buying and selling use the same words)
    pin: bool = True
    #: open enum arguments chosen by scores for the options that leave them open
    arguments: tuple[ArgumentChoice, ...] = ()
    #: how much more (log-probability) a tool explains a request for each value the tool
    #: copies from it (``from_request``) that the request names (an item in full, a number),
    #: and less for each required one it does not name
    named_bonus: float = 0.0
    #: per tool, the JSON schemas of the arguments it copies from the request, each with
    #: whether it is required, and the words of its catalog (a number before one is a count)
    copied: tuple[tuple[str, tuple[tuple[dict[str, Any], bool], ...], frozenset[str]], ...] = ()

    @classmethod
    def from_config(cls, data: dict[str, Any] | None, registry: ToolRegistry) -> SelectionSpec:
        data = data or {}
        template = str(data.get("template", DEFAULT_TEMPLATE))
        if "{says}" not in template:
            raise SelectionConfigError("selection.template must contain {says}")
        options = []
        no_tool = tuple(str(s).strip() for s in data.get("no_tool") or [])
        if no_tool:
            options.append(Option("", {}, no_tool))
        for entry in data.get("options") or []:
            tool, args = str(entry.get("tool", "")), dict(entry.get("arguments") or {})
            says = entry.get("says") or []
            says = (says,) if isinstance(says, str) else tuple(str(s).strip() for s in says)
            if tool not in registry:
                raise SelectionConfigError(f"selection option names unknown tool {tool!r}")
            props = registry.get(tool).parameters.get("properties", {})
            for name, value in args.items():
                allowed = props.get(name, {}).get("enum")
                if name not in props or (allowed is not None and value not in allowed):
                    raise SelectionConfigError(f"selection option {tool}: bad {name}={value!r}")
            if not says or not all(says):
                raise SelectionConfigError(f"selection option {tool} {args}: no 'says'")
            options.append(Option(tool, args, says))
        labels = [o.label for o in options]
        if len(set(labels)) != len(labels):
            raise SelectionConfigError(f"selection options repeat: {labels}")
        return cls(
            tuple(options),
            template,
            float(data.get("tool_margin", 0.0)),
            bool(data.get("pin", True)),
            _argument_choices(data.get("arguments") or {}, options, registry),
            float(data.get("named_bonus", 0.0)),
            _copied_values({o.tool for o in options if o.tool}, registry),
        )


def _copied_values(tools: set[str], registry: ToolRegistry):
    """Per option tool, the schemas of the arguments it copies from the request, each with
    whether the tool requires it."""
    out = []
    for name in sorted(tools):
        tool = registry.get(name)
        props = tool.parameters.get("properties", {})
        required = set(tool.parameters.get("required") or [])
        if tool.from_request:
            schemas = tuple((props[a], a in required) for a in tool.from_request)
            out.append((name, schemas, copied_catalog(tool)))
    return tuple(out)


def _weight(words: str, schema: dict[str, Any], required: bool, counted: frozenset[str]) -> int:
    """+1 where ``words`` name a value of this argument: a string enum's value by all its
    words, or one integer it admits (not a count: "two iron helmets"); 0 for a value named only
    in part (copied, but "smithing" alone is too weak a sign of a trade), or for an optional
    argument not named; -1 for a required one not named at all (it would be made up)."""
    enum = string_enum(schema)
    if enum is not None:
        if named_in_full(words, enum):
            return 1
        named = named_choice(words, enum) is not None
    else:
        named = named_value(words, schema, counted) is not None
        if named:
            return 1
    return 0 if named or not required else -1


def _argument_choices(
    data: dict[str, Any], options: list[Option], registry: ToolRegistry
) -> tuple[ArgumentChoice, ...]:
    """``arguments:`` ``{name: {margin: M, pin_default: B, values: {value: [says, ...],
    ...}}}``, checked against the enum of every option's tool that takes the argument."""
    out = []
    for name, entry in data.items():
        entry = entry or {}
        values = []
        for value, says in (entry.get("values") or {}).items():
            says = (says,) if isinstance(says, str) else tuple(str(x).strip() for x in says or [])
            if not says or not all(says):
                raise SelectionConfigError(f"selection argument {name}={value}: no 'says'")
            values.append((value, says))
        if len(values) < 2:
            raise SelectionConfigError(f"selection argument {name}: needs two values or more")
        tools = set()
        for tool in {o.tool for o in options if o.tool}:
            prop = registry.get(tool).parameters.get("properties", {}).get(name)
            if prop is None:
                continue
            bad = [v for v, _ in values if "enum" in prop and v not in prop["enum"]]
            if bad:
                raise SelectionConfigError(f"selection argument {name} of {tool}: bad {bad}")
            tools.add(tool)
        if not tools:
            raise SelectionConfigError(f"selection argument {name}: no option's tool takes it")
        margin = float(entry.get("margin", 0.0))
        pin_default = bool(entry.get("pin_default", False))
        out.append(ArgumentChoice(str(name), tuple(values), margin, frozenset(tools), pin_default))
    return tuple(out)


class ToolSelector:
    """Scores a request against a profile's options; the last few requests are remembered
    (a preemptive turn and its confirmation ask about the same words)."""

    def __init__(self, spec: SelectionSpec, scorer: Scorer, cache_size: int = 8):
        self.spec = spec
        self._scorer = scorer
        #: per request: each label's best score so far, and the descriptions already scored
        self._cache: OrderedDict[str, tuple[dict[str, float], set[int]]] = OrderedDict()
        self._cache_size = cache_size
        # every description, labelled: the options', then each argument's values'; the engine
        # keeps them all cached and is asked for the options', then one argument's
        self._flat = [(o.label, s) for o in spec.options for s in o.says]
        self._options = range(len(self._flat))
        self._values: dict[str, range] = {}
        for arg in spec.arguments:
            start = len(self._flat)
            self._flat += [(arg.label(value), s) for value, says in arg.values for s in says]
            self._values[arg.name] = range(start, len(self._flat))
        self.prefixes = [spec.template.format(says=s) for _, s in self._flat]

    def select(self, text: str, allow_none: bool = True, only: str = "") -> Selection | None:
        """The best option for ``text``; ``allow_none`` False: a tool must be called (tool
        choice ``required``); ``only``: that tool's options only. None when nothing can be
        scored (the engine gives no scores, or no option is allowed)."""
        words = " ".join(text.split())
        if not words:
            return None
        scores, seconds = self._scores(words, self._options)
        if scores is None:
            return None
        named = self._naming(words)
        ranked = sorted(
            (
                (score + (self.spec.tool_margin if not o.tool else named.get(o.tool, 0.0)), o)
                for o in self.spec.options
                if (score := scores.get(o.label)) is not None
                and (allow_none or o.tool)
                and (not only or o.tool == only)
            ),
            key=lambda t: t[0],
            reverse=True,
        )
        if not ranked:
            return None
        margin = ranked[0][0] - ranked[1][0] if len(ranked) > 1 else float("inf")
        option = ranked[0][1]
        chosen = {}
        for arg in self.spec.arguments:
            if not arg.open_in(option):
                continue
            values, more = self._scores(words, self._values[arg.name])
            seconds += more
            if values is None:  # (left to the grammar)
                continue
            value = self._argument(arg, values)
            if arg.pin_default or value != arg.values[0][0]:
                chosen[arg.name] = value
        return Selection(option, dict(scores), margin, seconds, chosen)

    def _naming(self, words: str) -> dict[str, float]:
        """What each tool gains: ``named_bonus`` per value it copies that ``words`` name, less
        as much per required one they do not name at all (``_weight``)."""
        if not self.spec.named_bonus:
            return {}

        bonus = self.spec.named_bonus
        return {
            tool: bonus * sum(_weight(words, s, r, counted) for s, r in copied)
            for tool, copied, counted in self.spec.copied
        }

    @staticmethod
    def _argument(arg: ArgumentChoice, scores: dict[str, float]) -> Any:
        """The default value unless another explains the request by ``arg.margin`` more."""
        default = arg.values[0][0]
        best, top = default, scores[arg.label(default)] + arg.margin
        for value, _ in arg.values[1:]:
            if scores[arg.label(value)] > top:
                best, top = value, scores[arg.label(value)]
        return best

    def _scores(self, words: str, wanted: range) -> tuple[dict[str, float] | None, float]:
        """Each label's best score for ``words``, the descriptions at ``wanted`` scored now
        unless an earlier call did (seconds: what scoring them took now)."""
        best, done = self._cache.setdefault(words, ({}, set()))
        self._cache.move_to_end(words)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        missing = [i for i in wanted if i not in done]
        if not missing:
            return best, 0.0
        t0 = time.monotonic()
        raw = self._scorer(self.prefixes, " " + words, missing)
        if raw is None:
            return None, 0.0
        for i, value in zip(missing, raw, strict=True):
            label = self._flat[i][0]
            best[label] = max(best.get(label, float("-inf")), value)
        done.update(missing)
        return best, time.monotonic() - t0


def pinned_registry(registry: ToolRegistry, option: Option) -> ToolRegistry:
    """A registry of ``option``'s tool alone, its pinned arguments required and fixed: the
    grammar a step decodes under then admits only that call."""
    tool = registry.get(option.tool)
    params = copy.deepcopy(tool.parameters)
    props = params.setdefault("properties", {})
    for name, value in option.arguments.items():
        props[name] = {**props.get(name, {}), "enum": [value]}
    required = list(params.get("required") or [])
    params["required"] = required + [n for n in option.arguments if n not in required]
    return ToolRegistry([dataclasses.replace(tool, parameters=params)])

"""Dialogue state: persona, multi-turn history, scene context, token budgeting, interruptions.

History is a list of turns; a turn is the user's message plus one assistant message per step
(spoken text, the step's tool calls and their results). Messages use the OpenAI/Gemma-native
shape templates expect: ``{"role": "assistant", "content": ..., "tool_calls": [...],
"tool_responses": [...]}``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

INTERRUPTED_MARKER = "[interrupted by the user]"


@dataclass
class Step:
    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    tool_responses: list[dict[str, Any]] = field(default_factory=list)
    #: the sentences as they went to the speaker (not rendered: ``content`` holds the words)
    spoken: list[str] = field(default_factory=list)

    def message(self) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = [
                {"type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in self.tool_calls
            ]
        if self.tool_responses:
            msg["tool_responses"] = self.tool_responses
        return msg


@dataclass
class Turn:
    turn_id: str
    user_text: str
    steps: list[Step] = field(default_factory=list)
    interrupted: bool = False

    def messages(self) -> list[dict[str, Any]]:
        return [{"role": "user", "content": self.user_text}] + [s.message() for s in self.steps]


class Dialogue:
    """History that always fits the context window and never loses the system prompt.

    ``examples`` (few-shot turns from the profile) are rendered right after the system prompt,
    as earlier turns in the model's own format, so a base model has a pattern to continue. They
    are not history: never stored in ``turns``, never dropped by ``fit``, never interrupted, and
    being part of the fixed prefix they stay in the reusable KV cache.

    ``nearest`` (optional) maps the user's text to the exchanges most like it (retrieval
    few-shot): they are rendered right before the *current* user turn only, because a base model
    copies the most recent example best. Never stored in ``turns``: the next turn's prompt no
    longer holds them, and the static examples before the history keep their cached prefix."""

    def __init__(
        self,
        system_prompt: str,
        examples: list[dict[str, Any]] | None = None,
        nearest: Callable[[str], list[dict[str, Any]]] | None = None,
    ):
        self.system_prompt = system_prompt
        self.examples: list[dict[str, Any]] = list(examples or [])
        self.nearest = nearest
        self.turns: list[Turn] = []
        self.dropped_turns = 0
        self.dropped_examples = 0  # few-shot examples given up because the context is too small
        self._nearest_turn = ""  # the turn the nearest exchanges were picked for
        self._nearest_messages: list[dict[str, Any]] = []

    # --- building ------------------------------------------------------------------------------
    def begin_turn(
        self,
        turn_id: str,
        user_text: str,
        scene: str | None = None,
        nearest: bool = True,
        option: Any = None,
    ) -> Turn:
        """`nearest`: False for a turn that may call no tool (the examples teach calls);
        `option`: the tool selection's choice, which the nearest exchanges show
        (``core/llm/tool_selection``)."""
        turn = Turn(turn_id=turn_id, user_text=self._user_content(user_text, scene))
        self.turns.append(turn)
        self._nearest_turn = turn_id
        self._nearest_messages = self._nearest_for(user_text, option) if nearest else []
        return turn

    def recent_sentences(self, turns: int = 12) -> list[str]:
        """The sentences spoken in the last ``turns`` turns (the current one's steps so far)."""
        return [s for turn in self.turns[-turns:] for step in turn.steps for s in step.spoken]

    def recent_first_pieces(self, turns: int = 12) -> list[str]:
        """What each of the last ``turns`` turns said first (turns that said something)."""
        return [
            turn.steps[0].spoken[0]
            for turn in self.turns[-turns:]
            if turn.steps and turn.steps[0].spoken
        ]

    def preview(
        self, user_text: str, scene: str | None = None, nearest: bool = True
    ) -> list[dict[str, Any]]:
        """The messages ``begin_turn(…, user_text, scene, nearest)`` would give, history
        unchanged."""
        return [
            *self._history(current_nearest=False),
            *(self._nearest_for(user_text) if nearest else []),
            {"role": "user", "content": self._user_content(user_text, scene)},
        ]

    def stable_messages(self, preview: bool = False) -> list[dict[str, Any]]:
        """What the next turn's prompt will begin with as well: the system prompt, the examples
        and the turns before the current one ([] when this prompt has no nearest exchanges:
        then it departs from the next one only at its end). The current turn's nearest
        exchanges come right after, so the next prompt departs from this one there (the
        engine keeps a checkpoint at that point: ``TextEngine.mark_stable``).
        ``preview``: for ``preview()``'s prompt (its turn is not in the history yet)."""
        if preview:
            return [] if self.nearest is None else self._history(current_nearest=False)
        turn = self.current
        if turn is None or turn.turn_id != self._nearest_turn or not self._nearest_messages:
            return []
        out = [{"role": "system", "content": self.system_prompt}, *self.examples]
        for earlier in self.turns[:-1]:
            out.extend(earlier.messages())
        return out

    def _nearest_for(self, user_text: str, option: Any = None) -> list[dict[str, Any]]:
        if not self.nearest:
            return []
        if option is None:
            return list(self.nearest(user_text.strip()))
        return list(self.nearest(user_text.strip(), option))

    @staticmethod
    def _user_content(user_text: str, scene: str | None) -> str:
        text = user_text.strip()
        if scene:
            text = f"(What you see: {scene.strip()})\n{text}"
        return text

    @property
    def current(self) -> Turn | None:
        return self.turns[-1] if self.turns else None

    def messages(self) -> list[dict[str, Any]]:
        return self._history(current_nearest=True)

    def _history(self, current_nearest: bool) -> list[dict[str, Any]]:
        out = [{"role": "system", "content": self.system_prompt}, *self.examples]
        for turn in self.turns:
            if current_nearest and turn is self.turns[-1] and turn.turn_id == self._nearest_turn:
                out.extend(self._nearest_messages)
            out.extend(turn.messages())
        return out

    def clear(self) -> int:
        """Forget the conversation (a new user, a new eval request); the system prompt and the
        examples stay, so the cached prefix does too. Returns the turns forgotten."""
        n = len(self.turns)
        self.turns.clear()
        self._nearest_turn, self._nearest_messages = "", []
        return n

    def forget(self, turn_id: str) -> bool:
        """Remove the latest turn if it is ``turn_id``: a preemptive answer the user never heard
        (they went on talking), so the history stays as if it had never started."""
        if not self.turns or self.turns[-1].turn_id != turn_id:
            return False
        self.turns.pop()
        if self._nearest_turn == turn_id:
            self._nearest_turn, self._nearest_messages = "", []
        return True

    # --- interruptions -------------------------------------------------------------------------
    def mark_interrupted(self, turn_id: str, spoken_text: str) -> bool:
        """Keep only what was actually said in that turn, followed by an interruption marker."""
        turn = next((t for t in reversed(self.turns) if t.turn_id == turn_id), None)
        if turn is None:
            return False
        remaining = spoken_text.strip()
        for step in turn.steps:
            said = _take_prefix(step.content, remaining)
            remaining = remaining[len(said) :].strip()
            step.content = said
        kept = [s for s in turn.steps if s.content or s.tool_responses]
        if not kept:
            kept = [Step()]
        last = kept[-1]
        last.content = (last.content + " " + INTERRUPTED_MARKER).strip()
        last.tool_responses = last.tool_responses if last.tool_calls else []
        turn.steps = kept
        turn.interrupted = True
        return True

    # --- budgeting -----------------------------------------------------------------------------
    def fit(self, prompt_tokens: Callable[[list[dict[str, Any]]], int], limit: int) -> int:
        """Drop the oldest turns (never the system prompt or the current turn) until the rendered
        prompt takes at most `limit` tokens. When dropping, go down to 60 % of the limit so the
        cached prefix stays valid for several turns. Examples are help, not content: when the
        system prompt, the examples and the current turn alone take more than that 60 %, this
        turn's nearest exchanges go, then the static examples from the last one (for good: a
        context this small cannot hold them and the history too; the prefix stays stable
        afterwards). Returns the prompt's token count."""
        count = prompt_tokens(self.messages())
        if count <= limit:
            return count
        target = limit * 3 // 5
        if self._nearest_messages and prompt_tokens(self._core()) > target:
            self._nearest_messages = []
        while self.examples and prompt_tokens(self._core()) > target:
            self.examples.pop()
            self.dropped_examples += 1
        count = prompt_tokens(self.messages())
        while count > target and len(self.turns) > 1:
            self.turns.pop(0)
            self.dropped_turns += 1
            count = prompt_tokens(self.messages())
        return count

    def _core(self) -> list[dict[str, Any]]:
        """What every prompt of this turn holds: system prompt, examples, the current turn."""
        out = [{"role": "system", "content": self.system_prompt}, *self.examples]
        turn = self.current
        if turn is not None:
            if turn.turn_id == self._nearest_turn:
                out.extend(self._nearest_messages)
            out.extend(turn.messages())
        return out


def _take_prefix(text: str, spoken: str) -> str:
    """The part of `text` that `spoken` covers (whitespace-insensitive prefix match)."""
    if not spoken:
        return ""
    if spoken.startswith(text.strip()):
        return text.strip()
    words, said = text.split(), []
    spoken_words = spoken.split()
    for w, s in zip(words, spoken_words):
        if w != s:
            break
        said.append(w)
    return " ".join(said)

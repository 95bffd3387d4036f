"""When the user's turn is over: from the words, not from a fixed silence.

A fixed silence (the VAD's ``min_silence_ms``) is either long, and every answer waits for it, or
short, and a user who pauses mid-sentence ("I would like to buy … a long sword") is cut in two.
``EndOfTurn`` decides while the silence lasts, from the early transcript of the words so far:

* **complete** → the turn ends once the silence reaches ``complete_silence_ms`` (~250 ms);
* **likely** (the model less sure, ``likely_threshold`` ≤ p < ``threshold``, and the text looks
  finished: final punctuation, no ellipsis, a last word that closes) → ``likely_silence_ms``
  (~600 ms): a finished sentence the model scores just under the threshold no longer waits for
  the cap, and a beginning that only whisper's punctuation makes look finished scores far lower;
* **incomplete** → it waits until ``incomplete_silence_ms`` (~1.2 s), the VAD's own cap;
* **not known yet** (no early transcript) → the cap ends it;
* **words it may have misheard** (the early transcript's confidence, whisper's mean token
  probability, under ``trust_confidence``) → a complete judgement waits ``likely_silence_ms``
  at least, and the text alone never ends the turn: "could you" heard as "caught you." and
  judged complete ended a paused sentence in two;
* **a last word it may have misheard** (its least sure token under ``last_word_confidence``)
  → only the cap ends the turn. A misheard last word is what makes a fragment look finished
  ("Please look at me and then" heard as "… and earn.", the word at 0.27), while the mean over
  the other words stays high, so ``trust_confidence`` misses it.

Whether the words are complete comes from a *hint*: the resident LLM's probability that a
sentence ends right after the words (``EndOfTurnHint`` on ``llm/end_of_turn``; one decode step
on the prompt it has already prefilled, see ``TurnRunner.end_of_turn_probability``), at or above
``threshold``, unless the last word plainly asks for more (``ends_open``). Without a hint for
the same text within ``hint_timeout_ms`` of silence (no LLM node, a remote engine, a busy
worker), the text itself decides (``text_looks_complete``: final punctuation and the last word;
weaker, since whisper punctuates fragments too: docs/speech.md has the measured figures).

Pure logic: the listener feeds it the silence so far, the early transcript and the hints.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MODES = ("fixed", "semantic")
#: auxiliaries: after their subject they can close a sentence, an embedded question or an
#: elided verb ("… how old you are", "Yes, I can"); there the model's probability decides
_AUXILIARY_WORDS = (
    "is are was were be been am do does did have has had will would could should can may might "
    "must shall"
)
_SUBJECT_WORDS = "i you we they he she it"
#: a last word that needs more after it (articles, prepositions, conjunctions, auxiliaries…)
_CONTINUE_WORDS = (
    "a an the and or but so because if then than that which who whose where when while to of "
    "for with from into onto at by about as like towards toward across against between among "
    "without upon through my your his her our their its this these those "
    f"some any no every {_AUXILIARY_WORDS} i we they he she um uh er erm"
)
_CONTINUES = frozenset(_CONTINUE_WORDS.split())
_AUXILIARIES = frozenset(_AUXILIARY_WORDS.split())
_SUBJECTS = frozenset(_SUBJECT_WORDS.split())
_FINAL_PUNCT = (".", "?", "!")


def ends_open(text: str) -> bool:
    """The last word asks for more ("… to buy a", "… protect me from", "… to know is"): never a
    turn's end, whatever the punctuation or the model says. An auxiliary after a subject
    pronoun ("… how old you are") is left to the model."""
    words = re.findall(r"[a-zA-Z']+", text.lower())
    if not words:
        return True
    last = words[-1]
    if last in _AUXILIARIES and len(words) > 1 and words[-2] in _SUBJECTS:
        return False
    return last in _CONTINUES


def text_looks_complete(text: str) -> bool:
    """The words alone: a sentence that ends in final punctuation (not an ellipsis) and whose
    last word does not ask for more. Whisper punctuates what it hears as finished."""
    t = text.strip()
    if not t or t.endswith(("...", "…", ",", ";", ":", "-", "—")):
        return False
    return t.endswith(_FINAL_PUNCT) and not ends_open(t)


@dataclass(frozen=True)
class EndOfTurnSettings:
    mode: str = "semantic"  # fixed (the VAD's min_silence_ms alone) | semantic
    complete_silence_ms: int = 250  # silence that ends a complete turn
    incomplete_silence_ms: int = 1200  # the longest wait: ends any turn (the VAD's cap)
    threshold: float = 0.05  # hint p_complete at or above which the words are complete
    hint_timeout_ms: int = 800  # silence after which the text decides when no hint came
    likely_threshold: float = 0.03  # hint p_complete at or above which finished-looking text…
    likely_silence_ms: int = 600  # …ends the turn after this silence
    trust_confidence: float = 0.0  # early transcripts less sure than this wait longer (0: off)
    last_word_confidence: float = 0.4  # a last word less sure than this: the cap decides (0: off)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"end_of_turn mode must be one of {list(MODES)}, not {self.mode!r}")
        for name in ("trust_confidence", "last_word_confidence"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], not {getattr(self, name)}")
        if not 0 <= self.complete_silence_ms <= self.incomplete_silence_ms:
            raise ValueError(
                f"complete_silence_ms ({self.complete_silence_ms}) must be within "
                f"[0, incomplete_silence_ms ({self.incomplete_silence_ms})]"
            )
        if not self.complete_silence_ms <= self.likely_silence_ms <= self.incomplete_silence_ms:
            raise ValueError(
                f"likely_silence_ms ({self.likely_silence_ms}) must be within "
                f"[complete_silence_ms ({self.complete_silence_ms}), "
                f"incomplete_silence_ms ({self.incomplete_silence_ms})]"
            )
        if not 0 <= self.likely_threshold <= self.threshold:
            raise ValueError(
                f"likely_threshold ({self.likely_threshold}) must be within "
                f"[0, threshold ({self.threshold})]"
            )


@dataclass(frozen=True)
class Decision:
    """Why a turn ended early (for logs and the benchmark)."""

    complete: bool
    source: str  # hint | likely (the hint's middle band, the text agreeing) | text
    p_complete: float | None = None
    silence_ms: float = 0.0  # the silence after which a complete decision ends the turn


class EndOfTurn:
    """The decision for the utterance in progress; one instance per listener."""

    def __init__(self, settings: EndOfTurnSettings | None = None) -> None:
        self.settings = settings or EndOfTurnSettings()
        self._utterance = ""
        self._hints: dict[str, float] = {}  # text → p_complete, for the current utterance

    def start(self, utterance_id: str) -> None:
        """A new utterance: earlier hints are forgotten."""
        self._utterance, self._hints = utterance_id, {}

    def hint(self, utterance_id: str, text: str, p_complete: float) -> bool:
        """A judgement of ``text``; ignored (False) unless it is about the current utterance."""
        if utterance_id != self._utterance or not (0.0 <= p_complete <= 1.0):
            return False
        if len(self._hints) >= 16:  # a long utterance with many pauses: keep it bounded
            self._hints.pop(next(iter(self._hints)))
        self._hints[text.strip()] = float(p_complete)
        return True

    def judge(self, text: str, silence_ms: float) -> Decision | None:
        """Is the turn complete with ``text`` (the early transcript of the words before
        this silence)? None while it cannot be said yet (no hint and still within
        ``hint_timeout_ms``)."""
        s = self.settings
        p = self._hints.get(text.strip())
        if p is not None:
            if p >= s.threshold and not ends_open(text):
                return Decision(True, "hint", p, s.complete_silence_ms)
            if p >= s.likely_threshold and text_looks_complete(text):
                return Decision(True, "likely", p, s.likely_silence_ms)
            return Decision(False, "hint", p)
        if silence_ms >= s.hint_timeout_ms:
            return Decision(text_looks_complete(text), "text", None, s.hint_timeout_ms)
        return None

    def should_end(
        self,
        text: str | None,
        silence_ms: float,
        confidence: float = 1.0,
        last_word_confidence: float = 1.0,
    ) -> Decision | None:
        """End the utterance now? A ``Decision`` that says complete, else None (keep waiting:
        the VAD's own cap, ``incomplete_silence_ms``, ends it). ``confidence``: the early
        transcript's (below ``trust_confidence``: the words may be misheard);
        ``last_word_confidence``: its last word's (below the setting: only the cap ends it)."""
        s = self.settings
        if s.mode != "semantic" or text is None:
            return None
        if last_word_confidence < s.last_word_confidence:
            return None
        if silence_ms < s.complete_silence_ms:
            return None
        decision = self.judge(text, silence_ms)
        if decision is None or not decision.complete:
            return None
        if confidence < s.trust_confidence:
            if decision.source == "text":
                return None  # misheard words alone prove nothing: the cap decides
            wait = max(decision.silence_ms, s.likely_silence_ms)
            decision = Decision(True, decision.source, decision.p_complete, wait)
        if silence_ms < decision.silence_ms:
            return None
        return decision

"""The one preemptive turn that waits for its final transcript: start, commit, discard, count.

llm_node's callbacks (early and final transcripts, voice activity, teleop, mute), its
cancels (``llm/cancel``, reset, a Converse goal) and the LLM worker all reach the same held
turn from different threads. The decisions are made here (each one once: the ``HeldTurn``
decides under its own lock, this class's lock guards the slot and the counts), so the node
only wires topics to them:

* a final transcript with the same words **commits** the held turn (``commit``: True, the
  final needs no turn of its own); one with other words, or one that comes after a cancel
  stopped the held turn before it ran, discards it (False: the final is answered as usual);
* a held turn that the scheduler refuses (the node is not active) is discarded at once, so
  the final is refused like any other rather than swallowed by a turn that never runs;
* a cancel of the held turn discards it unheard (``turn_cancelled``: True, nothing to stop);
  one that a final committed in the meantime is a real turn, stopped like any other (False);
* every commit and discard is counted where it happens (``HeldTurn``'s observer): the node's,
  a cancel's, the scheduler dropping a stale turn, the hold timing out.
"""

from __future__ import annotations

import threading
from typing import Any

from bolt_agent.core.llm.chat_template import Knobs
from bolt_agent.core.llm.held_turn import COMMITTED, DISCARDED, HeldTurn
from bolt_agent.core.llm.turn_runner import TurnSink
from bolt_agent.core.llm.turn_scheduler import TurnScheduler


class Preemption:
    """The held turn and the counts (``started``, ``committed``, ``discarded``, ``hints``)."""

    def __init__(self, scheduler: TurnScheduler, logger: Any) -> None:
        self.scheduler = scheduler
        self._log = logger
        self._held: HeldTurn | None = None
        self._lock = threading.Lock()
        self._counts = {"started": 0, "committed": 0, "discarded": 0, "hints": 0}

    @property
    def held(self) -> HeldTurn | None:
        return self._held

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def count(self, what: str) -> None:
        with self._lock:
            self._counts[what] += 1

    def start(
        self,
        utterance_id: str,
        text: str,
        knobs: Knobs,
        sink: TurnSink | None,
        hold_s: float,
        probe: bool,
        with_nearest: bool = False,
    ) -> None:
        """A early transcript: the end-of-turn probe (``probe``) and, with ``sink``, a
        preemptive turn answering ``text`` held until its final (``hold_s`` at most)."""
        self.discard("a newer early transcript")
        held = None
        if sink is not None:
            held = HeldTurn(utterance_id, text, sink, hold_s, observer=self._observe)
            with self._lock:
                self._held = held
                self._counts["started"] += 1
        turn = self.scheduler.preempt(utterance_id, text, knobs, held, probe, with_nearest)
        if held is not None and turn is None:  # not active: the final is refused on its own
            self.discard("llm_node is not active", utterance_id)

    def commit(self, utterance_id: str, text: str) -> bool:
        """The final transcript: True when the held turn of the same words is released (the
        final needs no turn of its own); a held turn of other words is discarded (False)."""
        with self._lock:
            held, self._held = self._held, None
        if held is None:
            return False
        if held.is_cancelled():  # it will never run: the final is answered on its own
            self._discard(held, "a cancel stopped it before its final", cancel=False)
            return False
        if held.turn_id == utterance_id and same_words(held.text, text) and held.commit():
            self._log.info(f"preemptive turn {utterance_id} committed")
            return True
        self._discard(held, "the final transcript differs")
        return False

    def discard(self, why: str, utterance_id: str = "") -> None:
        """Drop the held turn unheard (any one, or only ``utterance_id``'s)."""
        with self._lock:
            held = self._held
            if held is None or (utterance_id and held.turn_id != utterance_id):
                return
            self._held = None
        self._discard(held, why)

    def turn_cancelled(self, turn_id: str, why: str) -> bool:
        """A cancel stopped ``turn_id``: True when it was the held turn, now discarded unheard
        (nothing to stop: its discard goes out behind its held sentences, where a stop could
        overtake them or stop the turn that replaces it). False for any other turn, and for a
        held turn that a final committed in the meantime: a real turn, stopped as one."""
        held = self.scheduler.current_sink
        if not isinstance(held, HeldTurn) or held.turn_id != turn_id:
            return False
        if not self._discard(held, why, cancel=False) and held.state == COMMITTED:
            return False
        with self._lock:
            if self._held is held:
                self._held = None
        return True

    def _discard(self, held: HeldTurn, why: str, cancel: bool = True) -> bool:
        """Discard and log; ``cancel`` stops its generation if it is running (not when a
        cancel is what discards it: a second one would cancel the job that caused it). True
        when this call discarded it."""
        if not held.discard():
            return False  # already committed (a real turn now) or discarded
        self._log.info(f"preemptive turn {held.turn_id} discarded: {why}")
        if cancel and self.scheduler.current_sink is held:
            self.scheduler.cancel(f"preemptive turn discarded: {why}")
        return True

    def _observe(self, state: str) -> None:
        """``HeldTurn``'s observer: every commit and discard, whoever made it."""
        key = {COMMITTED: "committed", DISCARDED: "discarded"}.get(state)
        if key is not None:
            self.count(key)


def same_words(a: str, b: str) -> bool:
    """The final confirms the early transcript: the same words (case and punctuation aside)."""

    def words(text: str) -> list[str]:
        return "".join(c.lower() if c.isalnum() else " " for c in text).split()

    return words(a) == words(b)

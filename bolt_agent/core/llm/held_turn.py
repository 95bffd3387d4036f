"""A preemptive turn's gate: answer before the user's turn is confirmed over, commit or discard.

When a silence begins, the ASR publishes a early transcript; the LLM starts the turn from
it at once so that the first sentence is generated and synthesised while the end of the turn is
still being confirmed. ``HeldTurn`` wraps the node's ``TurnSink`` for such a turn:

* sentences go out *held* (``on_held_sentence``: the TTS synthesises them and keeps the audio);
* a tool goal is **never dispatched before the final**: ``dispatch`` waits for the decision;
* held sentences are handed on under the gate's lock, so a commit's release (``on_release``)
  always follows every held sentence on the wire (one topic, one publisher: DDS keeps order);
* the turn's end, thinking and streamed deltas wait too (nothing the user could see or hear);
* ``commit()`` (the final transcript confirmed the same text) releases everything in order
  (``on_release``, then what waited); ``discard()`` (the user went on, or the text changed)
  drops it: ``on_discard`` tells the TTS, dispatches are refused and the scheduler removes the
  turn from the history. Waiting ends after ``timeout_s`` as a discard (a final that never
  comes must not block the LLM worker).

A sink without ``on_held_sentence`` (an action's feedback sink, a test sink) gets its sentences
buffered here and delivered on commit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from bolt_agent.core.llm.turn_runner import ToolResult, TurnResult, TurnSink

PENDING, COMMITTED, DISCARDED = "pending", "committed", "discarded"


class HeldTurn:
    """Implements ``TurnSink`` around ``sink`` for one preemptive turn."""

    def __init__(
        self,
        turn_id: str,
        text: str,
        sink: TurnSink,
        timeout_s: float = 5.0,
        is_cancelled: Callable[[], bool] = lambda: False,
        observer: Callable[[str], None] | None = None,
    ) -> None:
        self.turn_id, self.text, self.sink = turn_id, text, sink
        self.timeout_s = timeout_s
        self.is_cancelled = is_cancelled  # the scheduler's: a stale turn is a discarded one
        self._observer = observer  # told the decision once (COMMITTED, DISCARDED), by anyone
        self._state = PENDING
        self._decided = threading.Condition()
        self._waiting: list[Callable[[], None]] = []  # delivered on commit, in order
        self.sentences = 0  # sentences produced while held (the benchmark's wasted work)

    # --- the decision (any thread) ---------------------------------------------------------------
    @property
    def state(self) -> str:
        return self._state

    def commit(self) -> bool:
        """The user's turn is over with the same text: play and dispatch. False if too late,
        or if a cancel stopped the turn first (queued or in its probe, it will never run:
        the final transcript then needs a turn of its own, so this is a discard)."""
        if self._state == PENDING and self.is_cancelled():
            self.discard()
            return False
        with self._decided:
            if self._state != PENDING:
                return self._state == COMMITTED
            self._state = COMMITTED
            waiting, self._waiting = self._waiting, []
            self._decided.notify_all()
            # under the lock: what waited goes out before anything the worker produces next
            release = getattr(self.sink, "on_release", None)
            if release is not None:
                release(self.turn_id)
            for deliver in waiting:
                deliver()
        if self._observer is not None:
            self._observer(COMMITTED)
        return True

    def discard(self) -> bool:
        """The user went on or said something else: drop the turn unheard. True when this call
        discarded it; False if it was already committed (too late: it is a real turn now) or
        already discarded."""
        with self._decided:
            if self._state != PENDING:
                return False
            self._state = DISCARDED
            self._waiting = []
            self._decided.notify_all()
        if self._observer is not None:
            self._observer(DISCARDED)
        drop = getattr(self.sink, "on_discard", None)
        if drop is not None:
            drop(self.turn_id)
        return True

    def wait(self) -> str:
        """Block until committed or discarded (or cancelled, or timed out: a discard)."""
        deadline = self.timeout_s
        with self._decided:
            while self._state == PENDING and deadline > 0 and not self.is_cancelled():
                self._decided.wait(0.02)
                deadline -= 0.02
        if self._state == PENDING:
            self.discard()
        return self._state

    def _later(self, deliver: Callable[[], None]) -> None:
        """Deliver now if committed, on commit if pending, never if discarded."""
        with self._decided:
            if self._state == PENDING:
                self._waiting.append(deliver)
                return
            if self._state == DISCARDED:
                return
        deliver()

    # --- TurnSink (the LLM worker) -----------------------------------------------------------
    def on_first_token(self, turn_id: str) -> None:
        self.sink.on_first_token(turn_id)

    def on_thinking(self, turn_id: str, text: str) -> None:
        self._later(lambda: self.sink.on_thinking(turn_id, text))

    def on_speech_delta(self, turn_id: str, text: str) -> None:
        self._later(lambda: self.sink.on_speech_delta(turn_id, text))

    def on_sentence(self, turn_id: str, seq: int, text: str) -> None:
        held = getattr(self.sink, "on_held_sentence", None)
        with self._decided:
            state = self._state
            if state == PENDING:
                self.sentences += 1
                if held is None:
                    self._waiting.append(lambda: self.sink.on_sentence(turn_id, seq, text))
                else:  # under the lock: a commit's release can never overtake this sentence
                    held(turn_id, seq, text)
                return
        if state == COMMITTED:
            self.sink.on_sentence(turn_id, seq, text)

    def dispatch(self, turn_id: str, name: str, arguments: dict[str, Any]) -> Future[ToolResult]:
        if self.wait() == COMMITTED:
            return self.sink.dispatch(turn_id, name, arguments)
        refused: Future[ToolResult] = Future()
        refused.set_result(ToolResult(ok=False, error="discarded: the user's turn went on"))
        return refused

    def on_turn_end(self, turn_id: str, seq: int, result: TurnResult) -> None:
        if self.wait() == COMMITTED:
            self.sink.on_turn_end(turn_id, seq, result)

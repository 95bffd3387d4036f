"""Which LLM job runs next: turns, prefill ahead of a transcript, and what the user really heard.

One worker drains one queue, so the model is used by one job at a time. A new turn cancels the
turn in progress (barge-in semantics); a prefill runs only when nothing newer waits (a newer
transcript prefills for itself); jobs queued while the node is inactive are refused, not run.
Each job is a small dataclass, so what crosses the thread boundary keeps its meaning. The
scheduler is rclpy-free: the node supplies the request details (scene, tool choice) and the
cancel side effects (stop the speaker, cancel tool goals) as callbacks.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from bolt_agent.core.llm.chat_template import Knobs
from bolt_agent.core.llm.turn_runner import TurnRequest, TurnResult, TurnRunner, TurnSink

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TurnJob:
    turn_id: str
    text: str
    knobs: Knobs
    sink: TurnSink
    done: Future = field(default_factory=Future)


@dataclass(frozen=True)
class PrewarmJob:
    """Prefill the prompt up to ``text`` (a partial transcript, or '' at speech start)."""

    utterance_id: str
    text: str


@dataclass(frozen=True)
class InterruptedJob:
    """The speaker was cut off: the history keeps only ``spoken_text`` of ``turn_id``."""

    turn_id: str
    spoken_text: str


Job = TurnJob | PrewarmJob | InterruptedJob


class NotActiveError(RuntimeError):
    """A turn was submitted (or was still queued) while the scheduler was not running."""


class TurnScheduler:
    """The LLM worker's queue and the turn in progress."""

    def __init__(
        self,
        runner: TurnRunner,
        make_request: Callable[[str, str, Knobs | None], TurnRequest],
        on_cancel: Callable[[str, str], None] = lambda turn_id, why: None,
        after_turn: Callable[[], None] = lambda: None,
        logger: Any = log,  # a logging.Logger or an rclpy logger (info/warning/error)
        on_failure: Callable[[str, str], None] = lambda kind, message: None,
    ) -> None:
        self.runner = runner
        self._make_request = make_request
        self._on_cancel = on_cancel
        self._after_turn = after_turn
        self._log = logger
        self._on_failure = on_failure  # (kind: "turn" | "prefill", message), after the log
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._active = False
        self._lock = threading.Lock()
        self.current_turn = ""

    # --- producer side (any thread) -------------------------------------------------------------
    @property
    def active(self) -> bool:
        return self._active

    def pending(self) -> int:
        """Jobs waiting for the worker (turns, prefills, interruptions; not the running one)."""
        return self._jobs.qsize()

    def start(self) -> None:
        self._active = True

    def stop(self) -> None:
        """Refuse new turns, cancel the current one and end ``run_forever`` after the queue."""
        self._active = False
        self.cancel("deactivate")
        self._jobs.put(None)

    def submit(self, turn_id: str, text: str, knobs: Knobs, sink: TurnSink) -> Future:
        """Queue a turn; a new one cancels the turn in progress. The future holds its result."""
        job = TurnJob(turn_id, text, knobs, sink)
        if not self._active:
            job.done.set_exception(NotActiveError("llm_node is not active"))
            return job.done
        if self.current_turn:
            self.cancel("new utterance")
        self._jobs.put(job)
        return job.done

    def prewarm(self, utterance_id: str, text: str) -> None:
        if self._active and not self.current_turn:
            self._jobs.put(PrewarmJob(utterance_id, text))

    def interrupted(self, turn_id: str, spoken_text: str) -> None:
        self._jobs.put(InterruptedJob(turn_id, spoken_text))

    def cancel(self, why: str) -> str:
        """Cancel the turn in progress (its id, or '' when there was none)."""
        with self._lock:
            turn_id = self.current_turn
        if not turn_id:
            return ""
        self._log.info(f"cancel turn {turn_id}: {why}")
        self.runner.cancel()
        self._on_cancel(turn_id, why)
        return turn_id

    # --- worker side ---------------------------------------------------------------------------
    def run_forever(self) -> None:
        """Run jobs until ``stop``. Only the sentinel ends the loop: a worker that left on the
        active flag alone would leave the sentinel queued for the next activation's worker."""
        while (job := self._jobs.get()) is not None:
            self.run_job(job)

    def run_pending(self) -> int:
        """Run every queued job now, on this thread (tests); returns how many ran."""
        n = 0
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return n
            if job is None:
                return n
            self.run_job(job)
            n += 1

    def run_job(self, job: Job) -> None:
        if not self._active:  # deactivating: turns queued before it are refused, not run
            if isinstance(job, TurnJob) and not job.done.done():
                job.done.set_exception(NotActiveError("llm_node is not active"))
            return
        if isinstance(job, InterruptedJob):
            self.runner.dialogue.mark_interrupted(job.turn_id, job.spoken_text)
        elif isinstance(job, PrewarmJob):
            self._prewarm(job)
        else:
            self._turn(job)

    def _turn(self, job: TurnJob) -> None:
        with self._lock:
            self.current_turn = job.turn_id
        try:
            result: TurnResult = self.runner.run(
                self._make_request(job.turn_id, job.text, job.knobs), job.sink
            )
        except Exception as exc:  # keep the worker alive; report the turn as failed
            message = f"turn {job.turn_id} failed: {exc!r}"
            self._log.error(message)
            self._on_failure("turn", message)
            job.done.set_exception(exc)
        else:
            self._log.info(
                f"turn {job.turn_id}: {result.steps} step(s), {result.completion_tokens} tokens, "
                f"tools {result.tool_calls}{' (cancelled)' if result.cancelled else ''}"
                + (f", tool errors {result.errors}" if result.errors else "")
            )
            job.done.set_result(result)
        finally:
            with self._lock:
                self.current_turn = ""
            if self._jobs.empty():
                self._after_turn()

    def _prewarm(self, job: PrewarmJob) -> None:
        if not self._jobs.empty():
            return  # a newer transcript (or the final) is waiting: it prefills for itself
        request = self._make_request(job.utterance_id, job.text, None)
        t0 = time.monotonic()
        try:
            n = self.runner.prewarm(request)
        except Exception as exc:  # a failed warm-up costs nothing but its time
            message = f"prefill ahead of {job.utterance_id} failed: {exc!r}"
            self._log.warning(message)
            self._on_failure("prefill", message)
            return
        if n:
            dt = time.monotonic() - t0
            what = (
                f"partial transcript of {job.utterance_id}"
                if job.text
                else f"{job.utterance_id} (no text)"
            )
            self._log.info(f"prefilled {n} tokens ahead of the {what} in {dt:.2f}s")

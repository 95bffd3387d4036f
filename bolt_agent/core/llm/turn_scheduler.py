"""Which LLM job runs next: turns, prefill ahead of a transcript, and what the user really heard.

One worker drains one queue, so the model is used by one job at a time. Scheduling is by
generation: every turn and prefill is stamped with the scheduler's generation when it is queued,
and a newer final transcript or a cancel bumps it. A stale job is dropped when the worker takes
it (its future holds a cancelled result, its sink hears the turn end), so with finals B and C
arriving while A runs, A is cancelled, B never runs and C answers. The generation the runner
compares against is pinned to the job's stamp while the turn starts (``PinnedToken``), so a
cancel that lands between "turn marked current" and the runner's first check is not lost.
A early transcript (the user just went quiet) queues its end-of-turn probe (the hint the
ASR waits for) and, when the node answers preemptively, a turn behind a ``HeldTurn`` gate; a
discarded one is removed from the history once it ends. Interruptions (what the user really
heard) are never dropped. Jobs queued while the node is
inactive are refused, not run. Each job is a small dataclass, so what crosses the thread
boundary keeps its meaning. A turn that fails ends in a clear state: logged, counted through
``on_failure``, its sink told the turn ended (optionally after a short spoken
``failure_reply``), its future holding the exception. The scheduler is rclpy-free: the node
supplies the request details (scene, tool choice) and the cancel side effects (stop the
speaker, cancel tool goals) as callbacks.
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

from bolt_agent.core.cancellation import CancelToken
from bolt_agent.core.llm.chat_template import Knobs
from bolt_agent.core.llm.turn_runner import TurnRequest, TurnResult, TurnRunner, TurnSink

log = logging.getLogger(__name__)


class PinnedToken(CancelToken):
    """The runner's cancel token under a scheduler: while a job is pinned, ``current()`` answers
    the generation stamped on that job instead of the live counter. The runner reads
    ``current()`` once when a turn starts; with the pin, a cancel that came after the job was
    queued is seen as stale at the runner's first check, however late that read happens."""

    def __init__(self) -> None:
        super().__init__()
        self.pinned: int | None = None

    def current(self) -> int:
        pinned = self.pinned
        return super().current() if pinned is None else pinned

    def current_live(self) -> int:
        """The live generation, whatever is pinned (what new jobs are stamped with)."""
        return super().current()


@dataclass(frozen=True)
class TurnJob:
    turn_id: str
    text: str
    knobs: Knobs
    sink: TurnSink
    done: Future = field(default_factory=Future)
    generation: int = 0  # the scheduler's generation when it was queued


@dataclass(frozen=True)
class PrewarmJob:
    """Prefill the prompt up to ``text`` (a partial transcript, or '' at speech start).
    ``done`` is set once the job is over, whether it prefilled, was skipped or failed."""

    utterance_id: str
    text: str
    generation: int = 0
    done: threading.Event = field(default_factory=threading.Event, compare=False)


@dataclass(frozen=True)
class PreemptiveJob:
    """A early transcript (the user has just gone quiet): judge whether their turn is
    complete with these words (``probe``: the hint for the ASR's end of turn) and, with ``turn``,
    start the answer at once behind a ``HeldTurn`` gate (nothing heard or dispatched before the
    final transcript commits it; a discard removes it from the history)."""

    utterance_id: str
    text: str
    knobs: Knobs
    probe: bool
    turn: TurnJob | None = None  # its sink is the HeldTurn
    generation: int = 0
    with_nearest: bool = False  # the probe's prompt carries the turn's few-shot exchange


@dataclass(frozen=True)
class InterruptedJob:
    """The speaker was cut off: the history keeps only ``spoken_text`` of ``turn_id``."""

    turn_id: str
    spoken_text: str


@dataclass(frozen=True)
class ResetJob:
    """Forget the conversation; ``done`` holds the number of turns forgotten."""

    done: Future = field(default_factory=Future)


Job = TurnJob | PrewarmJob | PreemptiveJob | InterruptedJob | ResetJob


def _pending_turn(job: Job) -> TurnJob | None:
    """The turn a job carries (a preemptive job's turn) while its future is open."""
    turn = job.turn if isinstance(job, PreemptiveJob) else job
    return turn if isinstance(turn, TurnJob) and not turn.done.done() else None


def _discard_unheard(turn: TurnJob) -> None:
    """A turn that will never run: a preemptive one (its sink a ``HeldTurn``) is dropped
    unheard; any other sink has nothing to drop."""
    discard = getattr(turn.sink, "discard", None)
    if discard is not None:
        discard()


def _futures(job: Job) -> list[Future]:
    """The futures a job's callers wait on (a prefill's event is set by ``run_job``)."""
    if isinstance(job, PreemptiveJob):
        return [job.turn.done] if job.turn is not None else []
    if isinstance(job, TurnJob | ResetJob):
        return [job.done]
    return []


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
        failure_reply: str = "",
        on_hint: Callable[[str, str, float], None] = lambda utterance_id, text, p: None,
    ) -> None:
        self.runner = runner
        self.token = PinnedToken()
        runner.cancel_token = self.token  # one generation counter for the queue and the decoder
        self.failure_reply = failure_reply  # said when a turn fails ('' = end it silently)
        self.dropped = 0  # stale jobs dropped unrun (superseded or cancelled while queued)
        self._make_request = make_request
        self._on_cancel = on_cancel
        self._after_turn = after_turn
        self._log = logger
        self._on_failure = on_failure  # (kind: "turn", "prefill", "worker", ..., message), logged
        self._on_hint = on_hint  # (utterance_id, text, p_complete): the end-of-turn judgement
        self.discarded = 0  # preemptive turns dropped from the history (the user went on)
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._active = False
        self._lock = threading.Lock()
        self.current_turn = ""
        self.current_sink: TurnSink | None = None  # the running turn's (a HeldTurn: preemptive)
        self._stopped_turn = ""  # the current turn once something cancelled it

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
        if not self._active:
            job = TurnJob(turn_id, text, knobs, sink)
            job.done.set_exception(NotActiveError("llm_node is not active"))
            return job.done
        with self._lock:  # bump and stamp together: no job can be stamped between them
            running = self._bump()
            job = TurnJob(turn_id, text, knobs, sink, generation=self.token.current_live())
            self._jobs.put(job)
        self._cancelled(running, "new utterance")
        return job.done

    def preempt(
        self,
        utterance_id: str,
        text: str,
        knobs: Knobs,
        held: TurnSink | None,
        probe: bool,
        with_nearest: bool = False,
    ) -> Future | None:
        """A early transcript: queue its end-of-turn probe and, with ``held`` (a
        ``HeldTurn``), the preemptive turn. A preemptive turn supersedes the turn in progress
        like any new utterance (the final would a moment later); a probe alone does not. The
        future holds the turn's result (None without a turn). ``with_nearest``: the probe's
        prompt is the turn's (with the few-shot exchange the words pick), so the turn that
        follows reuses all of it."""
        if not self._active or (held is None and not probe):
            return None
        with self._lock:
            running = self._bump() if held is not None else ""
            generation = self.token.current_live()
            turn = None
            if held is not None:
                turn = TurnJob(utterance_id, text, knobs, held, generation=generation)
                if hasattr(held, "is_cancelled"):  # a cancelled preemptive turn is discarded
                    held.is_cancelled = lambda: self.token.is_stale(generation)
            job = PreemptiveJob(utterance_id, text, knobs, probe, turn, generation, with_nearest)
            self._jobs.put(job)
        self._cancelled(running, "new utterance (preemptive answer)")
        return turn.done if turn is not None else None

    def prewarm(self, utterance_id: str, text: str) -> threading.Event | None:
        """Queue a prefill up to ``text``; the event set when it is over (None: not queued,
        the scheduler is stopped or a turn is running that no cancel has stopped yet)."""
        with self._lock:
            if self._active and self.current_turn in ("", self._stopped_turn):
                job = PrewarmJob(utterance_id, text, self.token.current_live())
                self._jobs.put(job)
                return job.done
        return None

    def interrupted(self, turn_id: str, spoken_text: str) -> None:
        self._jobs.put(InterruptedJob(turn_id, spoken_text))

    def reset(self, why: str = "reset") -> Future:
        """A new conversation: cancel the turn in progress and what is queued, then forget the
        history on the worker (after whatever the worker is finishing). The future holds the
        number of turns forgotten."""
        job = ResetJob()
        self.cancel(why)
        if self._active:
            self._jobs.put(job)
        else:  # no worker: nothing can be using the dialogue
            job.done.set_result(self.runner.dialogue.clear())
        return job.done

    def cancel(self, why: str) -> str:
        """Cancel the turn in progress and every job still queued (the id of the one in
        progress, or '' when there was none or it was already cancelled)."""
        with self._lock:
            turn_id = self._bump()
        self._cancelled(turn_id, why)
        return turn_id

    def _bump(self) -> str:
        """A new generation (the lock held: a turn is marked current only with its stamp
        checked under it); the turn in progress when this cancel is the first to stop it."""
        if not self.token.cancel() or self.current_turn == self._stopped_turn:
            return ""  # already over (its end marker out), or cancelled: side effects ran once
        self._stopped_turn = self.current_turn
        return self.current_turn

    def _cancelled(self, turn_id: str, why: str) -> None:
        """The side effects of cancelling ``turn_id`` (outside the lock: they publish)."""
        if not turn_id:
            return
        self._log.info(f"cancel turn {turn_id}: {why}")
        try:
            self._on_cancel(turn_id, why)  # stop the speaker, cancel tool goals: quick calls
        except Exception as exc:
            self._fail("cancel", f"cancel side effects of {turn_id} failed: {exc!r}")

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
        """Run one job; whatever it raises is logged, counted and put on its future: the
        worker goes on with the next job (a dead worker would leave every later turn waiting
        while the node looks active)."""
        try:
            self._run_job(job)
        except Exception as exc:
            self._fail("worker", f"{type(job).__name__} failed: {exc!r}")
            turn = _pending_turn(job)
            if turn is not None:  # a held turn that never ran: its final gets a turn of its own
                _discard_unheard(turn)
            for future in _futures(job):
                if not future.done():
                    future.set_exception(exc)
        finally:
            if isinstance(job, PrewarmJob):
                job.done.set()

    def _run_job(self, job: Job) -> None:
        if isinstance(job, ResetJob):  # also while deactivating: its caller waits for it
            job.done.set_result(self.runner.dialogue.clear())
            self._log.info("conversation reset")
            return
        if not self._active:  # deactivating: turns queued before it are refused, not run
            turn = _pending_turn(job)
            if turn is not None:
                _discard_unheard(turn)
                turn.done.set_exception(NotActiveError("llm_node is not active"))
            return
        if isinstance(job, InterruptedJob):
            self.runner.dialogue.mark_interrupted(job.turn_id, job.spoken_text)
        elif isinstance(job, PrewarmJob):
            self._prewarm(job)
        elif isinstance(job, PreemptiveJob):
            self._preemptive(job)
        else:
            self._turn(job)

    def _preemptive(self, job: PreemptiveJob) -> None:
        gone = job.turn is not None and getattr(job.turn.sink, "state", "") == "discarded"
        if job.probe and not gone and not self.token.is_stale(job.generation):
            request = self._make_request(job.utterance_id, job.text, job.knobs)
            try:
                p = self.runner.end_of_turn_probability(request, job.with_nearest)
            except Exception as exc:  # the listener falls back on the text: log and count
                self._fail(
                    "end_of_turn", f"end-of-turn probe of {job.utterance_id} failed: {exc!r}"
                )
                p = None
            if p is not None:
                try:
                    self._on_hint(job.utterance_id, job.text, p)
                except Exception as exc:
                    self._fail("end_of_turn", f"publishing the end-of-turn hint failed: {exc!r}")
        if job.turn is None:
            return
        self._turn(job.turn)
        held = job.turn.sink
        if getattr(held, "state", "") == "discarded" and self.runner.dialogue.forget(
            job.turn.turn_id
        ):
            self.discarded += 1
            self._log.info(f"preemptive turn {job.turn.turn_id} discarded: history unchanged")

    def _turn(self, job: TurnJob) -> None:
        with self._lock:  # check the stamp and mark the turn current in one step
            if self.token.is_stale(job.generation) or getattr(job.sink, "state", "") == "discarded":
                self._drop(job)  # (a preemptive turn discarded before it started)
                return
            self.current_turn, self._stopped_turn = job.turn_id, ""
            self.current_sink = job.sink
            self.token.pinned = job.generation
        try:
            result: TurnResult = self.runner.run(
                self._make_request(job.turn_id, job.text, job.knobs), job.sink
            )
        except Exception as exc:  # keep the worker alive; report the turn as failed
            self._fail("turn", f"turn {job.turn_id} failed: {exc!r}")
            self._end_failed(job, exc)
            job.done.set_exception(exc)
        else:
            tools = [c["name"] for c in result.tool_calls]
            self._log.info(
                f"turn {job.turn_id}: {result.steps} step(s), {result.completion_tokens} tokens, "
                f"tools {tools}{' (cancelled)' if result.cancelled else ''}"
                + (f", tool errors {result.errors}" if result.errors else "")
            )
            job.done.set_result(result)
        finally:
            with self._lock:
                self.current_turn, self.current_sink = "", None
                self.token.pinned = None
            if self._jobs.empty():
                self._after_turn()

    def _drop(self, job: TurnJob) -> None:
        """A stale turn, never started: a cancelled result, and its sink hears the end."""
        self.dropped += 1
        self._log.info(f"turn {job.turn_id} dropped unrun: superseded or cancelled")
        result = TurnResult(turn_id=job.turn_id, cancelled=True)
        try:
            _discard_unheard(job)
            job.sink.on_turn_end(job.turn_id, 0, result)
        except Exception as exc:
            self._fail("turn", f"turn {job.turn_id}: ending it failed: {exc!r}")
        job.done.set_result(result)

    def _end_failed(self, job: TurnJob, exc: Exception) -> None:
        """A failed turn ends in a clear state: the optional apology, then the turn end (the
        node's sink stamps ``turn_end`` in TurnMetrics)."""
        result = TurnResult(turn_id=job.turn_id, errors=[repr(exc)], failure=str(exc) or repr(exc))
        seq = 0
        try:
            if self.failure_reply:
                job.sink.on_sentence(job.turn_id, 0, self.failure_reply)
                result.spoken_text, seq = self.failure_reply, 1
            job.sink.on_turn_end(job.turn_id, seq, result)
        except Exception as again:  # the sink itself is broken: the log is all that is left
            self._fail("turn", f"turn {job.turn_id}: ending it failed: {again!r}")

    def _fail(self, kind: str, message: str) -> None:
        self._log.error(message)
        try:
            self._on_failure(kind, message)
        except Exception as exc:
            self._log.error(f"on_failure raised {exc!r}")

    def _prewarm(self, job: PrewarmJob) -> None:
        if not self._jobs.empty() or self.token.is_stale(job.generation):
            return  # a newer transcript (or the final) is waiting: it prefills for itself
        request = self._make_request(job.utterance_id, job.text, None)
        t0 = time.monotonic()
        try:
            n = self.runner.prewarm(request)
        except Exception as exc:  # a failed warm-up costs nothing but its time
            message = f"prefill ahead of {job.utterance_id} failed: {exc!r}"
            self._log.warning(message)
            try:
                self._on_failure("prefill", message)
            except Exception as again:
                self._log.error(f"on_failure raised {again!r}")
            return
        if n:
            dt = time.monotonic() - t0
            what = (
                f"partial transcript of {job.utterance_id}"
                if job.text
                else f"{job.utterance_id} (no text)"
            )
            self._log.info(f"prefilled {n} tokens ahead of the {what} in {dt:.2f}s")

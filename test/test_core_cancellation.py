"""CancelToken: generation-id cancellation, and begin/cancel/finish as single steps."""

from __future__ import annotations

import threading

from bolt_agent.core.cancellation import CancelToken


def test_a_cancel_makes_every_earlier_generation_stale():
    token = CancelToken()
    first = token.begin()
    assert not token.is_stale(first)
    assert token.cancel()  # the job had not finished: it was stopped
    assert token.is_stale(first)
    assert not token.finish(first)  # cancelled first: no end marker
    second = token.begin()
    assert second != first and token.finish(second)
    assert not token.cancel()  # after the end: it stopped nothing


def test_a_cancel_racing_begin_is_not_lost():
    """A cancel that lands while ``begin`` reads the generation waits for it, and then stops
    the job that began (True). Read and clear as two steps, the cancel saw the previous job's
    end, answered "nothing stopped", and the new job started already stale."""
    answers: list[bool] = []

    class Racing(CancelToken):
        racing = False

        def current(self) -> int:
            generation = super().current()
            if self.racing and not hasattr(self, "racer"):
                self.racer = threading.Thread(target=lambda: answers.append(self.cancel()))
                self.racer.start()
                self.racer.join(0.2)  # the cancel cannot get past begin's lock meanwhile
                self.blocked = self.racer.is_alive()
            return generation

    token = Racing()
    token.finish(token.current())  # the previous job ended
    token.racing = True
    generation = token.begin()
    token.racer.join()
    assert token.blocked and answers == [True]
    assert token.is_stale(generation)

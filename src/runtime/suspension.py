"""Suspending a job and waking it early.

A job suspends (``ctx.sleep``, ``ctx.wait_for_event``, awaiting children)
by raising :class:`Suspend` from its handler: the worker gives its claim
back with a wake time (a :class:`~stepstone.runtime.decision.Suspended` settlement), the attempt not
counted, and the job holds no worker while it waits. When what it waits
for happens first (an event is sent, a child ends), whoever made it happen
wakes the job (:class:`stepstone.runtime.capabilities.Waking`), naming
what arrived: it becomes due at once if that is what it waits for. A job
that is merely scheduled (its first run-at, a retry's backoff) or waits
for something else is not moved: an event sent early does not start a run
before its run-at.

A wake can arrive while the job still runs, between its last look at what
it waits for and its suspension. It must not be lost, so a backend that
offers waking marks a held job as woken, and its ``suspend`` then makes the
job due at once instead (and answers RETRIED): the job looks again.

A backend that cannot wake (SQS cannot change a message it does not hold)
does without: the workflow layer then suspends waiting jobs for a bounded
time and looks again when they come due.
"""

from __future__ import annotations

from .status import Wait


class Suspend(Exception):
    """Raised by a handler: give the job back until ``until`` (clock time) or
    a wake, the attempt not counted; ``wait`` says what it waits for."""

    def __init__(self, until: float, wait: Wait) -> None:
        self.until = until
        self.wait = wait
        what = f"{wait.status.value}: {wait.shown}" if wait.shown else wait.status.value
        super().__init__(f"suspended ({what})")

"""Errors of the runtime: the queue's refusals, and the verdicts a handler raises.

Two families live here. ``QueueError`` and its subclasses are stepstone's own
errors (under :class:`~stepstone.store.errors.StepstoneError`, drawn in
:mod:`stepstone.errors`). ``Permanent`` and ``RetryLater`` are not errors
stepstone raises to its caller: a job raises them to tell the worker what to
do with its attempt, so they stand outside the tree, as plain exceptions.
"""

from __future__ import annotations

from stepstone.store.errors import StepstoneError


class QueueError(StepstoneError):
    """A lease queue refused an operation."""


class PayloadTooLarge(QueueError, ValueError):
    """A payload is over the queue's size limit; nothing was enqueued."""


class LeaseLost(QueueError):
    """The worker's claim on a job is gone: its lease lapsed and another worker
    took the job over, or the job was cancelled.

    Raised into a handler by ``Lease.ensure_at_least``. The worker cancels the
    handler and settles nothing: the job's new owner (if any) decides its fate.
    """


class WorkerIdInUse(StepstoneError):
    """A worker was started with an id another live worker on this host
    holds. Two workers with one id would each take back the other's runs as
    their own after a restart, so the second is refused
    (:mod:`stepstone.runtime.worker.identity`)."""


class Permanent(Exception):
    """Raise (or subclass) this in a job: it will fail the same way on every attempt.

    The worker sends the job to dead at once instead of spending retries.
    """


class UnknownKind(Permanent):
    """No handler is registered for the delivery's kind."""


class MalformedPayload(Permanent):
    """The payload could not be decoded into what its handler takes."""


class RetryLater(Exception):
    """Raise this in a job: not now, try again in ``delay`` seconds.

    For rate limits and "the thing I need is not ready yet": by default the
    attempt is not spent (``count=False``), so a job that waits on a refilling
    bucket is never dead-lettered for having waited. With ``count=True`` it is
    an ordinary failed attempt with a chosen delay instead of the backoff.
    """

    def __init__(self, delay: float, count: bool = False, reason: str = "") -> None:
        if delay < 0:
            raise ValueError(f"RetryLater delay must be >= 0, got {delay}")
        self.delay = float(delay)
        self.count = count
        self.reason = reason
        super().__init__(reason or f"retry in {self.delay:g}s")

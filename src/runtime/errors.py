"""Errors of the runtime: the queue's refusals and the handler's verdicts."""

from __future__ import annotations


class RuntimeError_(Exception):
    """Base class of the runtime's own errors (named so it does not shadow the builtin)."""


class QueueError(RuntimeError_):
    """A lease queue refused an operation."""


class PayloadTooLarge(QueueError, ValueError):
    """A payload is over the queue's size limit; nothing was enqueued."""


class JobNotFound(QueueError, LookupError):
    """No queue record has this id."""


class PermanentError(Exception):
    """Raised by a handler: this job will fail the same way on every attempt.

    The worker sends it to dead at once instead of spending retries. The
    workflow layer re-exports it as ``workflow.Permanent``.
    """


class UnknownKind(PermanentError):
    """No handler is registered for the delivery's kind."""


class MalformedPayload(PermanentError):
    """The payload could not be decoded into what its handler takes."""


class LeaseLost(RuntimeError_):
    """The worker's claim on a job is gone: its lease lapsed and another worker
    took the job over, or the job was cancelled.

    Raised into a handler by ``Lease.ensure_at_least``. The worker cancels the
    handler and settles nothing: the job's new owner (if any) decides its fate.
    """


class RetryLater(Exception):
    """Raised by a handler: not now, try again in ``delay`` seconds.

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

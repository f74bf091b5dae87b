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

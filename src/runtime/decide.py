"""What to do with a job once its attempt is over: the pure decision.

The worker runs a handler and learns how its attempt *ended* (it returned,
it raised, it timed out, or it never ran because no handler is registered or
its last attempt already lapsed). :func:`decide` turns that
:data:`AttemptEnd` into a *decision*: ack it, retry it after a delay, or send
it to dead with a terminal failure.

It does no I/O and reads no clock, so every rule of the
retry policy is a plain function call in a test, and the worker's own code is
left with the mechanics: running handlers and applying decisions to the queue.
(A raised error comes with its traceback already formatted, by the worker:
formatting one reads source files.)
"""

from __future__ import annotations

from dataclasses import dataclass

from stepstone.store.errors import StoreUnavailable

from .backoff import Backoff
from .decision import Ack, Dead, Decision, Failure, FailureKind, Retry, Success, Suspended
from .error_text import describe, qualified_name, reported_error, truncate
from .errors import MalformedPayload, Permanent, RetryLater, UnknownKind
from .queue import Delivery
from .suspension import Suspend

# -- attempt ends: how an attempt ended ----------------------------------------


@dataclass(frozen=True)
class Returned:
    """The handler returned ``value``."""

    value: object


@dataclass(frozen=True)
class Raised:
    """The handler raised ``error`` (a sync handler's crash in its thread
    included); ``traceback`` is where, formatted (:func:`format_traceback`)."""

    error: BaseException
    traceback: str | None = None


@dataclass(frozen=True)
class TimedOut:
    """The attempt ran past ``seconds`` and the worker cancelled it."""

    seconds: float


@dataclass(frozen=True)
class NoHandler:
    """Nothing is registered for the delivery's kind; nothing ran."""


@dataclass(frozen=True)
class Expired:
    """The delivery took over a lease that lapsed, and its run's lapses have
    reached ``limit`` (the worker's ``max_lapses``): its workers died or hung
    under it that often. Nothing ran. (``limit`` None: a record written by
    a release that counted a lapse as an attempt, whose attempt is past
    ``max_attempts``.)"""

    lapses: int
    limit: int | None = None


AttemptEnd = Returned | Raised | TimedOut | NoHandler | Expired
"""How an attempt ended: what :func:`decide` decides on."""


def decide(delivery: Delivery, ended: AttemptEnd, backoff: Backoff) -> Decision:
    """The decision for ``delivery`` whose attempt ended as ``ended``.

    A success acks. Permanent errors (and their subclasses UnknownKind,
    MalformedPayload) die at once. Any other error, and a timeout, retries
    with ``backoff`` while attempts remain, and dies on the last one carrying
    that last error. RetryLater retries after its own delay, spending no
    attempt unless it asks to. StoreUnavailable (the store failed, not the
    job) retries without spending an attempt, backing off by the claims so far.
    Suspend gives the job back until its wake time, spending no attempt.
    """
    attempt, last = delivery.attempt, delivery.attempt >= delivery.max_attempts

    match ended:
        case Returned(value):
            return Ack(Success(value))
        case Expired(lapses, None):
            lapsed = delivery.attempt - 1
            message = f"lease expired on attempt {lapsed}, the last of {delivery.max_attempts}"
            return _dead(FailureKind.EXPIRED, message, None, lapsed)
        case Expired(lapses, limit):
            message = (
                f"its lease lapsed {lapses} times (its workers died or hung under it), "
                f"the most a run is given ({limit}), on attempt {attempt}"
            )
            return _dead(FailureKind.EXPIRED, message, None, attempt)
        case NoHandler():
            message = f"no handler registered for job type `{delivery.kind}`"
            return _dead(FailureKind.UNKNOWN, message, qualified_name(UnknownKind), attempt)
        case TimedOut(seconds):
            message = f"TimeoutError: attempt {attempt} timed out after {seconds:g}s"
            if last:
                return _dead(FailureKind.TIMEOUT, message, "TimeoutError", attempt)
            return _retry(backoff.delay(attempt, delivery.id), True, message)
        case Raised(Suspend() as suspension):
            return Suspended(suspension.until, suspension.wait)
        case Raised(error, tb):
            reported = reported_error(error)
            message, error_type = describe(reported), qualified_name(type(reported))
            if isinstance(error, Permanent):
                return _dead(_permanent_kind(error), message, error_type, attempt, tb)
            if isinstance(error, RetryLater):
                if error.count and last:
                    return _dead(FailureKind.EXHAUSTED, message, error_type, attempt, tb)
                # (An uncounted retry is no failed attempt: no traceback kept.)
                return _retry(error.delay, error.count, message, tb if error.count else None)
            if isinstance(error, StoreUnavailable):
                # The store failed, not the job: try again without spending
                # an attempt, or an outage would exhaust every job it touched.
                # The attempt number stands still, so the backoff grows with
                # the claims instead: a long outage is not retried every second.
                delay = backoff.delay(uncounted_step(delivery), delivery.id)
                return _retry(delay, False, message)
            if last:
                return _dead(FailureKind.EXHAUSTED, message, error_type, attempt, tb)
            return _retry(backoff.delay(attempt, delivery.id), True, message, tb)
    raise TypeError(f"not an attempt end: {ended!r}")  # pragma: no cover


def _permanent_kind(error: Permanent) -> FailureKind:
    if isinstance(error, MalformedPayload):
        return FailureKind.MALFORMED
    if isinstance(error, UnknownKind):
        return FailureKind.UNKNOWN
    return FailureKind.PERMANENT


def _dead(
    kind: FailureKind,
    message: str,
    error_type: str | None,
    attempt: int,
    traceback: str | None = None,
) -> Dead:
    failure = Failure(kind, message, error_type, attempt, traceback)
    return Dead(truncate(f"{kind.value}: {message}"), failure)


def _retry(delay: float, count: bool, message: str, traceback: str | None = None) -> Retry:
    delay = max(0.0, delay)
    return Retry(delay=delay, count=count, error=message, traceback=traceback)


def uncounted_step(delivery: Delivery) -> int:
    """The backoff step for a retry that does not spend an attempt: the claims
    so far (counted or not), so repeated uncounted retries still back off."""
    return max(delivery.attempt, delivery.claims)

"""What to do with a job once its attempt is over: the pure decision.

The worker runs a handler and learns how its attempt *ended* (it returned,
it raised, it timed out, or it never ran because no handler is registered or
its last attempt already lapsed). :func:`decide` turns that
:data:`AttemptEnd` into a *decision*: ack it, retry it after a delay, or send
it to dead with a terminal failure.

It does no I/O and reads no clock (``now`` is passed in), so every rule of the
retry policy is a plain function call in a test, and the worker's own code is
left with the mechanics: running handlers and applying decisions to the queue.
(A raised error comes with its traceback already formatted, by the worker:
formatting one reads source files.)
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from enum import StrEnum

from stepstone.store.errors import StoreUnavailable

from .backoff import Backoff
from .errors import MalformedPayload, Permanent, RetryLater, UnknownKind
from .queue import Delivery, Wait
from .suspension import Suspend

MAX_MESSAGE_CHARS = 4000
"""Error messages are cut to this length: they travel in queue records and
outcome records, and a handler that raises with a megabyte of text must not
make either of those too big to write."""
MAX_TRACEBACK_CHARS = 8000
"""A failed attempt's traceback is cut to its last this many characters (the
frames nearest the error) for the outcome record; the queue record's last
error takes what fits beside the message within MAX_MESSAGE_CHARS."""


# -- terminal results: what the workflow layer's on_terminal receives ------


class FailureKind(StrEnum):
    """Why a job failed for good."""

    PERMANENT = "permanent"
    """The handler raised Permanent: retrying would fail the same way."""
    EXHAUSTED = "exhausted"
    """A transient error on the last allowed attempt."""
    TIMEOUT = "timeout"
    """The last allowed attempt ran past its timeout."""
    UNKNOWN = "unknown"
    """No handler is registered for the job's kind."""
    MALFORMED = "malformed"
    """The payload could not be decoded (MalformedPayload)."""
    EXPIRED = "expired"
    """Its leases lapsed too often: its workers died or hung under it
    ``max_lapses`` times (a lapse costs no attempt; this bounds a run that
    kills every worker it lands on)."""
    CANCELLED = "cancelled"
    """Someone cancelled the job before it finished (never decided here: the
    workflow layer records it when ``cancel`` is called)."""


@dataclass(frozen=True)
class Failure:
    """A run's end for good: why, what, and on which attempt."""

    reason: FailureKind
    """Why the run failed for good."""
    message: str
    """``"ExcType: text"``, safe to print and at most MAX_MESSAGE_CHARS long."""
    error_type: str | None
    """The exception's qualified class name, when an exception caused it."""
    attempt: int
    """The attempt that failed (1-based)."""
    traceback: str | None = None
    """Where the error was raised, at most MAX_TRACEBACK_CHARS (its last frames)."""


@dataclass(frozen=True)
class Success:
    """A run's end with a result."""

    result: object


Terminal = Success | Failure
"""How a run ended for good: a Success or a Failure."""


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


# -- decisions: what the worker does next -----------------------------------


@dataclass(frozen=True)
class Ack:
    """Done: report ``terminal`` to on_terminal, then ack."""

    terminal: Success


@dataclass(frozen=True)
class Retry:
    """Nack: run again after ``delay`` seconds (at ``run_at`` on the clock)."""

    delay: float
    run_at: float
    count: bool
    """False: the attempt is handed back (RetryLater), not spent."""
    error: str
    traceback: str | None = None


@dataclass(frozen=True)
class Suspended:
    """Give the job back, uncounted, until ``until`` (clock time) or a wake."""

    until: float
    wait: Wait


@dataclass(frozen=True)
class Dead:
    """Failed for good: report ``terminal`` to on_terminal, then dead-letter with ``reason``."""

    terminal: Failure
    reason: str


Decision = Ack | Retry | Suspended | Dead


def decide(delivery: Delivery, ended: AttemptEnd, backoff: Backoff, now: float) -> Decision:
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
            return _retry(backoff.delay(attempt, delivery.id), now, True, message)
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
                return _retry(error.delay, now, error.count, message, tb if error.count else None)
            if isinstance(error, StoreUnavailable):
                # The store failed, not the job: try again without spending
                # an attempt, or an outage would exhaust every job it touched.
                # The attempt number stands still, so the backoff grows with
                # the claims instead: a long outage is not retried every second.
                delay = backoff.delay(uncounted_step(delivery), delivery.id)
                return _retry(delay, now, False, message)
            if last:
                return _dead(FailureKind.EXHAUSTED, message, error_type, attempt, tb)
            return _retry(backoff.delay(attempt, delivery.id), now, True, message, tb)
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
    return Dead(failure, truncate(f"{kind.value}: {message}"))


def _retry(
    delay: float, now: float, count: bool, message: str, traceback: str | None = None
) -> Retry:
    delay = max(0.0, delay)
    return Retry(delay=delay, run_at=now + delay, count=count, error=message, traceback=traceback)


def uncounted_step(delivery: Delivery) -> int:
    """The backoff step for a retry that does not spend an attempt: the claims
    so far (counted or not), so repeated uncounted retries still back off."""
    return max(delivery.attempt, delivery.claims)


# -- describing errors safely ------------------------------------------------


def reported_error(error: BaseException) -> BaseException:
    """The error to report: a Permanent that only classifies another
    error (it has an ``original``, like the workflow layer's
    ClassifiedPermanent) is reported as the error it wraps."""
    original = getattr(error, "original", None)
    if isinstance(error, Permanent) and isinstance(original, BaseException):
        return original
    return error


def describe(error: BaseException) -> str:
    """``"ExcType: text"`` (or ``"ExcType"`` when the text is empty), truncated.

    Never raises: an exception whose ``__str__`` raises is described as
    ``"<unprintable ExcType>"``, because a failure report that itself crashes
    would leave the job settled by nobody.
    """
    name = type(error).__name__
    try:
        text = str(error)
    except Exception:
        return f"<unprintable {name}>"
    return truncate(f"{name}: {text}" if text else name)


def qualified_name(cls: type) -> str:
    """``module.QualName``, or just ``QualName`` for builtins."""
    module = getattr(cls, "__module__", None)
    qualname = getattr(cls, "__qualname__", cls.__name__)
    return qualname if module in (None, "builtins") else f"{module}.{qualname}"


def truncate(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    if len(text) <= limit:
        return text
    marker = "... [truncated]"
    return text[: limit - len(marker)] + marker


def format_traceback(error: BaseException) -> str | None:
    """Where ``error`` was raised, as Python prints it (its causes included),
    cut to its last MAX_TRACEBACK_CHARS characters; None without a traceback.
    Never raises, like :func:`describe`."""
    if error.__traceback__ is None:
        return None
    try:
        text = "".join(traceback.format_exception(error)).rstrip("\n")
    except Exception:
        return None
    return _tail(text, MAX_TRACEBACK_CHARS)


def with_traceback(message: str, traceback_text: str | None) -> str:
    """``message``, then as much of the traceback's end as fits beside it
    within MAX_MESSAGE_CHARS: the error text a queue record keeps."""
    room = MAX_MESSAGE_CHARS - len(message) - 1
    if not traceback_text or room < 200:  # not even a frame fits: the message alone
        return message
    return f"{message}\n{_tail(traceback_text, room)}"


def _tail(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    marker = "[... earlier frames cut]\n"
    return marker + text[len(text) - (limit - len(marker)) :]

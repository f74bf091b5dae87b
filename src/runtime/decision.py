"""How a claim ends: the decision the worker settles it by, and a run's final result.

:func:`stepstone.runtime.decide.decide` makes a :data:`Decision` of how an
attempt ended; the worker hands it to the queue, whose one verb for a
claim's end, :meth:`~stepstone.runtime.queue.LeaseQueue.settle`, carries it
out: done (:class:`Ack`), run again later (:class:`Retry`), given back
until a wake time (:class:`Suspended`), failed for good (:class:`Dead`), or
given back at once, uncounted (:class:`Release`, a drain's). A terminal
decision carries the run's final result (:data:`Terminal`), which the
workflow layer records before the queue forgets the job. Once the claim is
over, how it ended is one :class:`AttemptResult`, from the decision, what
the queue answered and what stopped it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from .error_text import with_traceback
from .status import Wait


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


@dataclass(frozen=True)
class Ack:
    """Done: the job is removed. ``terminal`` is its result, which the worker
    reports before it settles (a queue ignores it)."""

    terminal: Success = field(default_factory=lambda: Success(None))


@dataclass(frozen=True)
class Retry:
    """Run the job again ``delay`` seconds from now. ``count``: the attempt
    is spent (False hands it back: RetryLater, a store outage). ``error``
    (``ExcType: text``) and ``traceback`` say why, for people."""

    delay: float
    count: bool = True
    error: str = ""
    traceback: str | None = None

    @property
    def kept_error(self) -> str:
        """What the job's record keeps as its last error: the message, then
        as much of the traceback's end as fits beside it."""
        return with_traceback(self.error, self.traceback)


@dataclass(frozen=True)
class Suspended:
    """Give the job back, its attempt not counted, due again at ``until``
    (clock time) or when woken for what it waits for; the queue keeps
    ``wait`` with it for people to see and for wakes to match."""

    until: float
    wait: Wait


@dataclass(frozen=True)
class Dead:
    """Failed for good: the job stays, dead, with ``reason``, until it is
    requeued or discarded. ``terminal`` is its result, which the worker
    reports before it settles (a queue ignores it); None when the worker
    dead-letters a job whose result could not be recorded."""

    reason: str
    terminal: Failure | None = None


@dataclass(frozen=True)
class Release:
    """Give the job back at once, its attempt not counted: a drain cut it short."""


Decision = Ack | Retry | Suspended | Dead | Release
"""How a claim ends: what :meth:`~stepstone.runtime.queue.LeaseQueue.settle` carries out."""


class AttemptResult(StrEnum):
    """How one claim of a run ended: the one value the worker makes of it
    (:func:`stepstone.runtime.observer.claim_result`, in its
    :class:`~stepstone.runtime.observer.AttemptReport`), which the metrics
    count, the attempt record keeps and ``stepstone show`` prints."""

    SUCCEEDED = "succeeded"
    """The run succeeded: its outcome is recorded."""
    FAILED = "failed"
    """The attempt failed and the run will be tried again (the attempt counted)."""
    DEFERRED = "deferred"
    """Handed back without spending the attempt, to run again later: the job
    raised RetryLater, or the store failed (the attempt's own, or the outcome's write)."""
    DEAD = "dead"
    """The run failed for good (its outcome records the error)."""
    SUSPENDED = "suspended"
    """The run went to sleep or to wait (for a time, an event, children);
    another claim resumes it."""
    RELEASED = "released"
    """A drain (a worker stopping) cut the attempt short and gave the run back uncounted."""
    LOST = "lost"
    """The worker lost its lease (it stalled, or the store was out of reach
    too long): the run may be another worker's now; nothing was settled."""
    CANCELLED = "cancelled"
    """The run was cancelled while this attempt ran (its lease was lost to the cancel)."""
    ANSWERED = "answered"
    """The run's outcome was already recorded (a worker stopped after writing
    it, before acking): the claim settled the run without running it."""
    UNSETTLED = "unsettled"
    """The queue refused the settlement; the run came back when its lease lapsed."""
    UNRECORDED = "unrecorded"
    """No record of this claim: its worker stopped before it could write one
    (a crash, a lapsed lease), or the history was off when it ended."""

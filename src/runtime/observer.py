"""What the worker tells about each attempt: what metrics count and history keeps.

How the claim ended is one value, :class:`~stepstone.runtime.decision.AttemptResult`,
made here (:func:`claim_result`) when the worker reports the claim's end.

The worker calls an observer, when it was given one, twice per attempt:
when it claims a job and when the attempt is over (settled, or given up
on). The workflow layer's metrics (:mod:`stepstone.telemetry.metrics`) are one;
without an observer the worker pays one ``is None`` test per call site. The
same :class:`AttemptReport` goes to the worker's callbacks
(:meth:`stepstone.runtime.worker.AttemptCallbacks.attempt_over`), which the
workflow layer's attempt history (:mod:`stepstone.records.attempt_log`) writes from.

An observer runs on the worker's event loop, inside the job's own task: it
must be quick and must not block. The worker logs and swallows whatever it
raises, so a broken observer never changes how a job settles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from .decide import AttemptEnd, Raised, TimedOut
from .decision import AttemptResult, Dead, Decision, Retry, Suspended
from .error_text import qualified_name, reported_error
from .queue import Delivery, Settlement
from .suspension import Suspend


@dataclass(frozen=True, slots=True)
class AttemptReport:
    """How one attempt ended, as the worker saw it."""

    delivery: Delivery
    settled: Settlement | None
    """What the queue did with the job: ``LOST`` when the lease was lost
    (nothing settled); None when no settlement landed (the queue kept failing,
    and the job returns when its lease lapses)."""
    error_type: str | None
    """The attempt ended in an error: the exception's qualified class name, or
    the failure kind when no exception caused it (``expired``, ``unknown``).
    None for a success, a suspension, a drain, or a lost lease."""
    seconds: float
    """Real seconds from the claim until the settlement landed (or was given up on)."""
    claimed_at: float = 0.0
    """When the job was claimed, by the worker's clock."""
    ended_at: float = 0.0
    """When the attempt was over (settled, or given up on), by the worker's clock."""
    decision: Decision | None = None
    """What :func:`~stepstone.runtime.decide.decide` made of the attempt's end;
    None when there was nothing to settle (the lease was lost, or a drain cut
    the attempt short and released the job)."""
    cancelled: bool = False
    """The run was cancelled while the attempt ran: it was stopped, not settled."""
    result: AttemptResult = AttemptResult.UNSETTLED
    """How the claim ended (:func:`claim_result`): what the metrics count and
    the attempt record keeps."""


class WorkerObserver(Protocol):
    """Hears each claim and each attempt's end. See the module docstring."""

    def claimed(self, delivery: Delivery) -> None:
        """A claim landed: the worker holds ``delivery``."""

    def attempt_over(self, report: AttemptReport) -> None:
        """An attempt ended and was settled (or given up on), as ``report`` says."""


_BY_QUEUE = {
    Settlement.LOST: AttemptResult.LOST,
    Settlement.RELEASED: AttemptResult.RELEASED,
    Settlement.DEAD: AttemptResult.DEAD,  # (or a nack the queue made the last)
    Settlement.SUSPENDED: AttemptResult.SUSPENDED,
}
"""How a claim ended, where what the queue did says it whatever was decided."""


def claim_result(
    decision: Decision | None, settled: Settlement | None, cancelled: bool = False
) -> AttemptResult:
    """How a claim ended, from the worker's decision, what the queue did with
    it (``LOST`` too when the lease was found lost) and whether a cancel
    stopped it. (Whether the run's outcome was recorded before the claim is
    the workflow layer's to add: ``ANSWERED``.)"""
    if cancelled:
        return AttemptResult.CANCELLED
    if settled is None:
        return AttemptResult.UNSETTLED
    by_queue = _BY_QUEUE.get(settled)
    if by_queue is not None:
        return by_queue
    if isinstance(decision, Retry):
        return AttemptResult.FAILED if decision.count else AttemptResult.DEFERRED
    if isinstance(decision, Suspended):
        return AttemptResult.SUSPENDED  # a wake came while it was held: due again at once
    # Acked or retried after an Ack or Dead whose outcome was not recorded (the
    # store was out: it goes round again).
    return AttemptResult.SUCCEEDED if settled is Settlement.ACKED else AttemptResult.DEFERRED


def error_type(ended: AttemptEnd | None, decision: Decision | None) -> str | None:
    """The type of error an attempt ended in (see :attr:`AttemptReport.error_type`)."""
    if isinstance(decision, Dead) and decision.terminal is not None:
        return decision.terminal.error_type or decision.terminal.reason.value
    if isinstance(ended, TimedOut):
        return "TimeoutError"
    if isinstance(ended, Raised) and not isinstance(ended.error, Suspend):
        return qualified_name(type(reported_error(ended.error)))
    return None

"""Where a job is: the one vocabulary of statuses, and what a suspended job waits for.

``handle.status()``, outcome records, queue listings, the CLI and the web
view all speak of a job's place in these words (:class:`JobStatus`); a
suspended job keeps what it waits for (:class:`Wait`) for people to see and
for wakes to match.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class JobStatus(StrEnum):
    """Where a job is: the one vocabulary of ``handle.status()``, outcome
    records, queue listings and the CLI.

    A queue holds a job while it is ``scheduled``, ``ready``, ``running``,
    suspended (``sleeping``, ``waiting_for_event``,
    ``waiting_for_callback``, ``waiting_for_children``,
    ``waiting_for_slot``, ``rate_limited``, ``waiting_for_version``,
    ``debounced``) or
    ``dead``; its outcome record says how it ``succeeded``, ``failed`` or
    was ``cancelled``.
    """

    SCHEDULED = "scheduled"
    """Waiting for its run-at time (a first run or a retry's backoff)."""
    SLEEPING = "sleeping"
    """Suspended in ``ctx.sleep`` until its wake time; holds no worker."""
    WAITING_FOR_EVENT = "waiting_for_event"
    """Suspended in ``ctx.wait_for_event`` until the event comes (or its timeout)."""
    WAITING_FOR_CALLBACK = "waiting_for_callback"
    """Suspended awaiting a callback (``await ctx.callback(...)``) until it is
    completed (or its timeout)."""
    WAITING_FOR_CHILDREN = "waiting_for_children"
    """Suspended awaiting child jobs until they have ended."""
    WAITING_FOR_SLOT = "waiting_for_slot"
    """Suspended until a run holding a slot of its concurrency key ends."""
    RATE_LIMITED = "rate_limited"
    """Suspended by its type's rate limit until its start under the limit."""
    WAITING_FOR_VERSION = "waiting_for_version"
    """Given back by a worker whose code cannot replay it, until a worker of
    the code version that recorded its history claims it (a rolling deploy)."""
    DEBOUNCED = "debounced"
    """A debounced run whose window is still taking submits: it starts once
    they stop for its ``wait`` (or at its ``max_wait``)."""
    READY = "ready"
    """Due and waiting for a worker."""
    RUNNING = "running"
    """Claimed by a worker under a lease. A running job whose lease has expired
    is claimable again."""
    DEAD = "dead"
    """Failed for good; kept in the queue until requeued or cancelled."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        """True for the states an outcome record holds: nothing will change."""
        return self in _FINISHED

    @property
    def queued(self) -> bool:
        """True for the states a queue record holds."""
        return not self.finished


_FINISHED = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})
QUEUE_STATUSES: tuple[JobStatus, ...] = (
    JobStatus.SCHEDULED,
    JobStatus.READY,
    JobStatus.RUNNING,
    JobStatus.SLEEPING,
    JobStatus.WAITING_FOR_EVENT,
    JobStatus.WAITING_FOR_CALLBACK,
    JobStatus.WAITING_FOR_CHILDREN,
    JobStatus.WAITING_FOR_SLOT,
    JobStatus.RATE_LIMITED,
    JobStatus.WAITING_FOR_VERSION,
    JobStatus.DEBOUNCED,
    JobStatus.DEAD,
)
"""The statuses a queue record can have."""
SUSPENDED_STATUSES = frozenset(
    {
        JobStatus.SLEEPING,
        JobStatus.WAITING_FOR_EVENT,
        JobStatus.WAITING_FOR_CALLBACK,
        JobStatus.WAITING_FOR_CHILDREN,
        JobStatus.WAITING_FOR_SLOT,
        JobStatus.RATE_LIMITED,
        JobStatus.WAITING_FOR_VERSION,
        JobStatus.DEBOUNCED,
    }
)


@dataclass(frozen=True, slots=True)
class Wait:
    """What a suspended job waits for: shown by status, ``ls`` and ``show``.

    The queue keeps it with the record until the job is claimed again. The
    job is due at its run-at time, or when woken for what it waits for: a
    wake for another status leaves it (see
    :class:`~stepstone.runtime.capabilities.Waking`)."""

    status: JobStatus
    """One of the suspended statuses (SUSPENDED_STATUSES)."""
    detail: str = ""
    """For people: the event's name, how many children are left, a
    concurrency key and how many were ahead, a rate limit start."""
    pending: tuple[str, ...] = ()
    """What the wait still needs, by id (the children a run awaits): a wake
    naming one of them as arrived takes it off, and the job is due only
    once none is left (:meth:`~stepstone.runtime.capabilities.Waking.wake`).
    Empty: any wake for its status makes it due."""

    def __post_init__(self) -> None:
        if self.status not in SUSPENDED_STATUSES:
            raise ValueError(f"a wait's status is one of the suspended ones, not {self.status}")

    @property
    def shown(self) -> str:
        """What people are shown: the detail, after the number of what it
        still needs when it counts them (``2`` then ``of 4 children``)."""
        return f"{len(self.pending)} {self.detail}" if self.pending else self.detail


def still_pending(pending: tuple[str, ...], arrived: str | None) -> tuple[str, ...] | None:
    """What a wait that counts what it needs (``pending``) still needs once
    ``arrived`` came; None when the wake makes the job due: nothing is left,
    the wait counts nothing (any wake ends it), or the wake names nothing."""
    if arrived is None or not pending:
        return None
    left = tuple(needed for needed in pending if needed != arrived)
    return left or None

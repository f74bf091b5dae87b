"""What a queue backend may offer beyond the lease contract, in one place.

The worker, and the workflow layer's submit and await path, need only
:class:`stepstone.runtime.queue.LeaseQueue`, which every backend offers in
full. What some backends cannot do is a capability of its own: a
:class:`typing.Protocol` a backend offers by having the method, never a
method that raises. A caller that needs one checks for it,
``isinstance(queue, JobListing)``, and says which backend lacks it.

- :class:`Waking` (``wake``): makes a suspended run due at once when what
  it waits for arrives (an event sent, a child ended, a concurrency slot
  freed), and only then: a run scheduled for later (its run-at, a retry's
  backoff) or suspended for something else stays where it is.
  MemoryQueue, StoreQueue.
- :class:`JobListing` (``list``): the jobs a page at a time, for
  ``stepstone ls``. MemoryQueue, StoreQueue.
- :class:`JobCounts` (``counts``): jobs by status, for ``stepstone stats``
  and the queue-depth metric. MemoryQueue, StoreQueue, SqsQueue (SQS's
  approximate numbers).
- :class:`DeadJobRequeue` (``requeue``): a dead job back to ready, for
  ``stepstone retry``. MemoryQueue, StoreQueue, SqsQueue.
- :class:`Reclaiming` (``reclaim``): hands a restarted worker the runs its
  previous life held, at once instead of when their leases lapse. StoreQueue
  (a MemoryQueue dies with its worker; SQS forgets a receipt with the
  process that received it).
- :class:`QueueInspection`: the last three together, with ``counts`` over
  ``list`` unless the backend knows better. MemoryQueue, StoreQueue.

Why SqsQueue lacks two: SQS has no listing of messages, and cannot change a
message it does not hold, so nothing can make a waiting job due early (the
workflow layer then has waiting runs look again every ``wait_recheck``
seconds; :mod:`stepstone.runtime.suspension` says how suspending and waking
fit together).
"""

from __future__ import annotations

import abc
from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .queue import QUEUE_STATUSES, Delivery, JobRecord, JobStatus

__all__ = [
    "DeadJobRequeue",
    "JobCounts",
    "JobListing",
    "Page",
    "QueueInspection",
    "Reclaiming",
    "Waking",
]


@runtime_checkable
class Waking(Protocol):
    """A queue that can make a suspended job due at once."""

    @abc.abstractmethod
    async def wake(
        self, run_id: str, waiting_for: JobStatus, *, arrived: str | None = None
    ) -> bool:
        """Make the job due now if it is suspended waiting for ``waiting_for``
        (one of the suspended statuses: what arrived); if it is held
        (running), mark it so its next suspension returns at once. A job
        waiting for its run-at time, a retry's backoff or something else is
        left as it is. ``arrived`` names what came, when the wait counts what
        it needs (``Wait.pending``): it is taken off, and the job is due only
        once none is left (one not pending changes nothing); a held job
        keeps it, and its next suspension takes it off what its wait needs
        (returning at once when nothing is left). False if there
        is no such job (ended, never enqueued) or it is dead; True otherwise,
        moved or not."""


@runtime_checkable
class Reclaiming(Protocol):
    """A queue whose claims say who holds them, so a worker that restarts
    can take back its own (:mod:`stepstone.runtime.worker.identity`)."""

    @property
    @abc.abstractmethod
    def holder_scope(self) -> str:
        """Names this queue across processes: workers that claim from it
        under one id, on one host, must not both be alive."""

    @abc.abstractmethod
    async def reclaim(
        self,
        holder: str,
        *,
        lease: float,
        limit: int,
        within: float,
        kinds: Collection[str] | None = None,
    ) -> list[Delivery]:
        """Claim again, each by a compare-and-swap that fences the old token
        off, up to ``limit`` jobs (of ``kinds``) claimed as ``holder``
        (``claim(holder=)``) whose records changed within the last ``within``
        seconds: the runs a dead life of this worker held, which would
        otherwise wait for their leases to lapse. Each counts a lapse, not an
        attempt, as a lapsed lease's takeover does."""


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a queue's listing: its records, and the cursor for the next."""

    records: list[JobRecord]
    cursor: str | None
    """Pass back to get the next page; None when there is no more."""
    unreadable: tuple[tuple[str, str], ...] = ()
    """The records of this page that would not decode, as (key, why): runs
    a listing cannot show, nor an operator's bulk action touch."""


@dataclass(frozen=True, slots=True)
class Survey:
    """Every record of a queue at once, as far as a budget of reads allows:
    what a long-lived view (the web view) shows, filling in over its refreshes."""

    records: list[JobRecord]
    """The records known, each as read from the store (none guessed), in id order."""
    listed: int
    """Records listed, read or not: the queue's size, which costs no read."""
    unread: int = 0
    """Records listed but left unread for the budget: the next survey reads them."""
    unreadable: tuple[tuple[str, str], ...] = ()
    """The records that would not decode, as (key, why)."""


@runtime_checkable
class JobSurvey(Protocol):
    """A queue that can list all its jobs within a budget of reads."""

    @abc.abstractmethod
    async def survey(self, *, reads: int) -> Survey:
        """Every record listed, those read before at no cost (unless changed
        since), at most ``reads`` others read now."""


@runtime_checkable
class JobListing(Protocol):
    """A queue that can list its jobs."""

    @abc.abstractmethod
    async def list(
        self, status: JobStatus | None = None, *, cursor: str | None = None, limit: int = 100
    ) -> Page:
        """Records (of ``status`` if given), a page at a time, in id order."""


@runtime_checkable
class JobCounts(Protocol):
    """A queue that can count its jobs by status."""

    @abc.abstractmethod
    async def counts(self) -> dict[JobStatus, int]:
        """How many jobs are in each status."""


@runtime_checkable
class DeadJobRequeue(Protocol):
    """A queue that can bring a dead job back."""

    @abc.abstractmethod
    async def requeue(self, run_id: str) -> bool:
        """Move a dead job back to ready with its attempts reset; True if it was dead."""


class QueueInspection(JobListing, JobCounts, DeadJobRequeue, Protocol):
    """All three; ``counts`` walks :meth:`list` unless the backend knows better."""

    async def counts(self) -> dict[JobStatus, int]:
        totals = dict.fromkeys(QUEUE_STATUSES, 0)
        cursor: str | None = None
        while True:
            page = await self.list(cursor=cursor, limit=1000)
            for record in page.records:
                totals[record.status] += 1
            if page.cursor is None:
                return totals
            cursor = page.cursor

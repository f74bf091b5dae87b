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

And what saves requests or latency where a backend can:

- :class:`ClaimedEnqueue` (``enqueue_claimed``): a submit's record written
  already claimed by a worker in the same process (the hand-off).
  MemoryQueue, StoreQueue.
- :class:`Withdrawing` (``withdraw``): a record just created taken back.
  MemoryQueue, StoreQueue.
- :class:`IdleHints` (``subscribe``, ``next_due``, ``next_look``): when an
  idle worker in the process should look. MemoryQueue, StoreQueue; SqsQueue
  (its long poll does the rest).
- :class:`PendingHere` (``pending_here``): which runs this process knows
  are not over, so their handles need not poll. MemoryQueue, StoreQueue.
- :class:`Prefetching` (``give_back``): receives that run ahead of the
  claims that use them, given back when a worker stops. SqsQueue.

Why SqsQueue lacks two: SQS has no listing of messages, and cannot change a
message it does not hold, so nothing can make a waiting job due early (the
workflow layer then has waiting runs look again every ``wait_recheck``
seconds; :mod:`stepstone.runtime.suspension` says how suspending and waking
fit together).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .queue import Delivery, Enqueued, JobRecord, NewJob
from .status import QUEUE_STATUSES, JobStatus

__all__ = [
    "ClaimedEnqueue",
    "DeadJobRequeue",
    "IdleHints",
    "JobCounts",
    "JobListing",
    "Page",
    "PendingHere",
    "QueueInspection",
    "Reclaiming",
    "Waking",
    "Withdrawing",
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
class ClaimedEnqueue(Protocol):
    """A queue that can enqueue a job already claimed by its submitter: one
    write where an enqueue and a claim take two (a worker in the submitting
    process with room, and nothing else to take: a hand-off)."""

    @abc.abstractmethod
    async def enqueue_claimed(
        self, job: NewJob, *, lease: float, holder: str | None = None
    ) -> tuple[Enqueued, Delivery | None]:
        """Enqueue ``job`` claimed by the caller (``holder``, as ``claim``
        takes it), leased for ``lease`` seconds. The delivery is the
        caller's to run, renew and settle as a claim's, or to release; if
        the caller goes away instead, the lease lapses and any worker
        claims the job. None when the enqueue created no record (a live run
        has the id), or when this time the queue could not write it
        claimed (it then enqueued it as ``enqueue`` does)."""


@runtime_checkable
class Withdrawing(Protocol):
    """A queue that can take back a record it just created, if nothing
    changed it since: for a submit that finds, once it made the record,
    that it is nobody's run."""

    @abc.abstractmethod
    async def withdraw(self, enqueued: Enqueued) -> bool:
        """Remove the record ``enqueued`` created, if nothing changed it
        since (claimed, settled, or gone and made again). False when it
        changed or went; the caller decides what then."""


@runtime_checkable
class IdleHints(Protocol):
    """A queue that tells an idle worker in its process when to look:
    woken at once by this process's own enqueues, and told how long it may
    sleep. Without it, a worker polls every ``poll_interval``."""

    @abc.abstractmethod
    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` when this process makes work available (an
        enqueue, a release, a requeue). Returns an unsubscribe function."""

    @abc.abstractmethod
    async def next_due(self) -> float | None:
        """The earliest clock time something not claimable now may become
        claimable (a run-at, a backoff, a lease expiry), as far as this
        process knows; None when nothing is pending."""

    @abc.abstractmethod
    def next_look(self) -> float | None:
        """Real seconds until a claim would look for other processes' work in
        a way a wait would miss (a StoreQueue's look at its doorbell): how
        long an idle worker may sleep at most. None: whenever it polls."""


@runtime_checkable
class Prefetching(Protocol):
    """A queue whose receives run ahead of the claims that use them (an
    SqsQueue's long polls still out when their claim returned): a worker
    that stops asks it to give back what they brought, so those jobs are
    claimable by others at once, not after their leases, with no attempt
    and no lapse spent."""

    @abc.abstractmethod
    async def give_back(self) -> None:
        """Wait out the receives still running (at most their long-poll
        wait) and put back, uncounted, every job they brought that no claim
        took. The queue stays usable: a later claim receives again."""


@runtime_checkable
class PendingHere(Protocol):
    """A queue that knows, from its own writes and recent looks, which jobs
    have not ended: handles awaiting a run skip reading its outcome while
    it is known to be pending (on S3 that took a keyed job from 5.9 GETs to 2)."""

    @abc.abstractmethod
    def pending_here(self, run_id: str) -> bool:
        """Whether this process knows, without asking anyone, that the job
        has not ended: it waits unclaimed, or this process holds its lease,
        as of this process's own write or a recent look (a few seconds at
        most); False whenever it does not know."""


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

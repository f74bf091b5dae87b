"""What operators' tools ask of a queue beyond the lease contract.

The worker, and the workflow layer's submit and await path, need only
:class:`runtime.queue.LeaseQueue`. The ``stepstone`` CLI also lists jobs a
page at a time (``ls``), counts them by status (``stats``) and brings dead
ones back (``retry``). Not every backend can: SQS has no listing of
messages. So each of these is a capability of its own, a
:class:`typing.Protocol` a backend offers by having the method. MemoryQueue
and StoreQueue offer all three (:class:`QueueInspection`); SqsQueue offers
:class:`JobCounts` (SQS's approximate numbers) and :class:`DeadJobRequeue`.

A caller that needs one checks for it, ``isinstance(queue, JobListing)``,
and says which backend lacks it rather than calling a method that is not
there.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .queue import QUEUE_STATUSES, JobRecord, JobStatus


@dataclass(frozen=True, slots=True)
class Page:
    records: list[JobRecord]
    cursor: str | None
    """Pass back to get the next page; None when there is no more."""


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

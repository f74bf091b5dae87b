"""What a worker has in flight: one record per claimed job (:class:`InFlightJob`),
and the set of them, counted by run id and by kind (:class:`InFlight`).

Every mechanism of the worker works on these records: the claim loop adds
them, the heartbeats renew and stop them, the job's own task settles and
removes them. A job is stopped by cancelling its handler, with the reason
(:class:`Stop`) kept for how the attempt is then settled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

from ..queue import Delivery, Settlement
from .handlers import Registration
from .lease import Attempt, Lease


class Stop(Enum):
    """Why the worker cancelled a handler (None: it did not)."""

    LOST = "lease lost"
    TIMEOUT = "timed out"
    DRAIN = "drained"
    CANCELLED = "cancelled"


@dataclass(eq=False)
class InFlightJob:
    """One claimed job in flight: its delivery, lease, handler task and schedule."""

    delivery: Delivery
    registration: Registration | None
    lease: Lease
    deadline: float | None
    """Clock time past which the attempt has timed out (None: no timeout)."""
    next_beat: float
    """Loop time of the next heartbeat renewal."""
    renew_to: float
    """Seconds of lease each renewal asks for (the kind's lease, or the worker's)."""
    beat_every: float
    """Seconds between renewals (0: none)."""
    next_check: float
    """Loop time of the next look for a cancellation (inf: never)."""
    attempt: Attempt | None = None
    handler_task: asyncio.Task[object] | None = None
    task: asyncio.Task[None] | None = None
    stop: Stop | None = None
    renewing: bool = False
    beat_task: asyncio.Task[None] | None = None
    began: float = 0.0
    """Loop time of the claim (set only when someone hears of attempts)."""
    claimed_at: float = 0.0
    """Clock time of the claim."""
    settled: Settlement | None = None
    """What the queue did with the job, once a settlement landed."""
    check_task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        """Its handler runs (was started and has not finished)."""
        return self.handler_task is not None and not self.handler_task.done()

    def cancel(self, why: Stop) -> bool:
        """Cancel the handler for ``why``, unless it already finished (its
        result stands and is settled, however close to a deadline it came)
        or was stopped already. True if it was cancelled now."""
        handler = self.handler_task
        if self.stop is not None or handler is None or handler.done():
            return False
        self.stop = why
        if self.attempt is not None:
            self.attempt.stopped = why.value
        handler.cancel(why.value)
        return True


class InFlight:
    """The jobs a worker has in flight, with counts by run id and by kind."""

    def __init__(self) -> None:
        self._jobs: set[InFlightJob] = set()
        self._held: dict[str, int] = {}  # run id -> deliveries of it in flight here
        self._by_kind: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._jobs)

    def __iter__(self) -> Iterator[InFlightJob]:
        """The jobs as of now (a copy: a job may leave while the caller iterates)."""
        return iter(list(self._jobs))

    def add(self, job: InFlightJob) -> None:
        delivery = job.delivery
        self._jobs.add(job)
        self._held[delivery.id] = self._held.get(delivery.id, 0) + 1
        self._by_kind[delivery.kind] = self._by_kind.get(delivery.kind, 0) + 1

    def discard(self, job: InFlightJob) -> None:
        delivery = job.delivery
        self._jobs.discard(job)
        if (held := self._held.get(delivery.id, 1) - 1) > 0:
            self._held[delivery.id] = held
        else:
            self._held.pop(delivery.id, None)
        left = self._by_kind.get(delivery.kind, 1) - 1
        if left > 0:
            self._by_kind[delivery.kind] = left
        else:
            self._by_kind.pop(delivery.kind, None)

    def of_kind(self, kind: str) -> int:
        return self._by_kind.get(kind, 0)

    def by_kind(self) -> dict[str, int]:
        """Jobs in flight, by kind (a copy; safe to call from another thread)."""
        return self._by_kind.copy()

    def run_ids(self) -> list[str]:
        """The runs with a delivery in flight here, once each."""
        return list(self._held)

    def of_run(self, run_id: str) -> list[InFlightJob]:
        """The deliveries of ``run_id`` in flight here (usually none or one)."""
        if run_id not in self._held:
            return []
        return [job for job in self._jobs if job.delivery.id == run_id]

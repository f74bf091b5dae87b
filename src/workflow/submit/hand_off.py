"""The hand-off: a job submitted while this process's worker is ready for it
goes straight to that worker.

Its record is written claimed (``ClaimedEnqueue.enqueue_claimed``), one write
where an enqueue and a claim take two, and it makes no trip through the
queue. Queue order holds: the worker is ready for a kind only when it has
room and no older work of that kind waits for it (``Worker.ready_for``).
"""

from __future__ import annotations

import logging

from stepstone.runtime.capabilities import ClaimedEnqueue
from stepstone.runtime.decision import Release
from stepstone.runtime.queue import Delivery, Enqueued, LeaseQueue, NewJob
from stepstone.runtime.worker import Worker

log = logging.getLogger("stepstone")


class HandOff:
    """Enqueues new jobs, claimed for ``worker`` when it is ready for them."""

    def __init__(self, queue: LeaseQueue, worker: Worker) -> None:
        self._queue = queue
        self._worker = worker

    async def enqueue(self, job: NewJob) -> tuple[Enqueued, Delivery | None]:
        """Enqueue ``job``; with the delivery to hand over when it was written
        claimed for this process's worker (None: it waits in the queue)."""
        queue = self._queue
        if (
            job.run_at is not None
            or not isinstance(queue, ClaimedEnqueue)
            or not self._worker.ready_for(job.kind)
        ):
            return (await queue.enqueue_many([job]))[0], None
        return await queue.enqueue_claimed(
            job, lease=self._worker.lease, holder=self._worker.holder
        )

    async def hand_over(self, delivery: Delivery) -> None:
        """Run ``delivery`` in the worker, or give it back to the queue if the
        worker stopped being ready meanwhile (a release; if that fails, the
        lease lapses and any worker claims the job)."""
        if self._worker.take(delivery):
            return
        try:
            await self._queue.settle(delivery, Release())
        except Exception as exc:
            log.warning(
                "run %s: giving a claim back failed (%s); it runs once its lease lapses",
                delivery.id,
                exc,
                extra={"run_id": delivery.id},
            )

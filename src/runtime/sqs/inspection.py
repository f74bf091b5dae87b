"""What can honestly be said about SQS jobs: one job's record, and counts.

SQS has no lookup by id and no listing, so ``get`` answers exactly only for
a job this process holds, and from the id store's marker (or this process's
memory) for the rest; ``counts`` is SQS's own approximate numbers.
"""

from __future__ import annotations

from ..errors import QueueError
from ..queue import JobRecord
from ..status import QUEUE_STATUSES, JobStatus
from .message import JobMessage
from .parts import QueueParts


class SqsUnsupported(QueueError, NotImplementedError):
    """SQS cannot answer this (it has no lookup by id)."""


class SqsInspection:
    """One SqsQueue's reads for status and counts, over ``queue_names`` (the
    tiers', then the dead-letter queue, ``dead_queue_name``)."""

    def __init__(self, parts: QueueParts, *, queue_names: list[str], dead_queue_name: str) -> None:
        self._parts = parts
        self._queue_names = queue_names
        self._dead_queue_name = dead_queue_name

    async def get(self, run_id: str) -> JobRecord | None:
        """What can honestly be said about the job.

        Held by this process: its record, RUNNING, exact. Otherwise, with an
        id store: None when it has no marker (acked, cancelled, never
        enqueued), DEAD when it was dead-lettered, else READY or SCHEDULED by
        its run-at: the job is live but SQS cannot say whether it is waiting
        or running elsewhere. Without an id store, a job this process enqueued
        is answered the same way from memory; for any other this raises
        :class:`SqsUnsupported` rather than answer None (which would claim the
        job is gone). SQS has no lookup by id."""
        now = self._parts.clock.now()
        held = self._parts.fence.holding(run_id)
        if held is not None:
            return _record(
                held.message,
                JobStatus.RUNNING,
                attempts=held.attempt,
                lease_expires_at=held.expires,
            )
        message: JobMessage | None
        if self._parts.markers is not None:
            message = await self._parts.markers.read(run_id)
            if message is None:
                return None
        else:
            message = self._parts.local.live(run_id)
            if message is None:
                raise SqsUnsupported(
                    f"SqsQueue cannot look up job {run_id!r}: SQS has no lookup by id, this "
                    "process does not hold it and no id store was given; read the job's "
                    "outcome record instead"
                )
        if message.dead_reason is not None:
            status = JobStatus.DEAD
        elif message.run_at > now:
            status = JobStatus.SCHEDULED
        else:
            status = JobStatus.READY
        return _record(message, status, attempts=message.attempts)

    async def counts(self) -> dict[JobStatus, int]:
        """SQS's approximate totals (GetQueueAttributes, one request per queue).

        READY is ApproximateNumberOfMessages over the tiers, SCHEDULED is
        ...Delayed, RUNNING is ...NotVisible, DEAD is everything
        in the dead-letter queue. SQS says these may lag by about a minute."""
        totals = dict.fromkeys(QUEUE_STATUSES, 0)
        names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        names.append("ApproximateNumberOfMessagesDelayed")
        for queue_name in self._queue_names:
            url = await self._parts.sqs.url(queue_name)
            response = await self._parts.sqs.call(
                "get_queue_attributes", QueueUrl=url, AttributeNames=names
            )
            attrs = response["Attributes"]
            ready, hidden, delayed = (int(attrs.get(k, 0)) for k in names)
            if queue_name == self._dead_queue_name:
                totals[JobStatus.DEAD] += ready + hidden + delayed
            else:
                totals[JobStatus.READY] += ready
                totals[JobStatus.RUNNING] += hidden
                totals[JobStatus.SCHEDULED] += delayed
        return totals


def _record(
    message: JobMessage,
    status: JobStatus,
    *,
    attempts: int,
    lease_expires_at: float | None = None,
) -> JobRecord:
    return JobRecord(
        id=message.id,
        kind=message.kind,
        status=status,
        priority=message.priority,
        attempts=attempts,
        max_attempts=message.max_attempts,
        run_at=message.run_at,
        created_at=message.enqueued_at,
        updated_at=message.enqueued_at if message.died_at is None else message.died_at,
        payload=message.payload or b"",
        headers=dict(message.headers),
        lease_expires_at=lease_expires_at,
        lapses=message.lapses,
        last_error=message.last_error,
        dead_reason=message.dead_reason,
    )

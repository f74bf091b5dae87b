"""Looking at one run and stopping it: ``status`` and ``cancel``.

Both read the run's outcome record first, then its queue record: a run has
ended once it has an outcome (a dead run keeps its queue record, until it is
requeued or cancelled, beside its failed outcome).
"""

from __future__ import annotations

from stepstone.runtime.clock import Clock
from stepstone.runtime.decide import FailureKind
from stepstone.runtime.errors import MalformedPayload
from stepstone.runtime.queue import JobStatus, LeaseQueue
from stepstone.runtime.suspension import Waking

from .envelope import Envelope
from .handle import JobState
from .outcome import ErrorInfo, OutcomeRecord
from .records import RunRecords


async def job_state(records: RunRecords, queue: LeaseQueue, job_id: str) -> JobState | None:
    """Where the job is: its outcome if it has one, else its queue record."""
    record = await records.outcome(job_id)
    if record is not None:
        progress = record.progress
        if progress is None and record.status is not JobStatus.SUCCEEDED:
            progress = await records.progress(job_id)  # a failed run's last report
        return JobState(
            id=job_id,
            state=record.status,
            attempts=record.attempts,
            progress=progress,
            last_error=None if record.error is None else record.error.message,
        )
    queued = await queue.get(job_id)
    if queued is None:
        return None
    return JobState(
        id=job_id,
        state=queued.status,
        attempts=queued.attempts,
        progress=await records.progress(job_id),
        last_error=queued.last_error or queued.dead_reason,
        run_at=queued.run_at,
        lease_expires_at=queued.lease_expires_at,
        waiting_for=None if queued.wait is None else queued.wait.detail,
    )


async def cancel_run(
    records: RunRecords, queue: LeaseQueue, clock: Clock, job_id: str
) -> OutcomeRecord | None:
    """Cancel a run that has not finished: record it cancelled (create-if-absent),
    then drop it from the queue. Returns the cancelled record, or None if the
    run had already finished (or was never submitted)."""
    queued = await queue.get(job_id)
    if queued is None:
        return None
    try:
        envelope = Envelope.decode(queued.payload)
        name, digest, incarnation = envelope.name, envelope.input_hash, envelope.incarnation
    except MalformedPayload:
        name, digest, incarnation = queued.kind, "", ""
    record = OutcomeRecord(
        run_id=job_id,
        name=name,
        status=JobStatus.CANCELLED,
        input_hash=digest,
        incarnation=incarnation,
        attempts=queued.attempts,
        finished_at=clock.now(),
        error=ErrorInfo(FailureKind.CANCELLED, "the job was cancelled"),
    )
    if await records.record_outcome(record) is not record:
        return None  # it had ended first: its outcome stands
    await queue.cancel(job_id)
    parent = None if not digest else envelope.parent
    if parent is not None and isinstance(queue, Waking):
        await queue.wake(parent)  # a parent waiting for this child looks again
    return record

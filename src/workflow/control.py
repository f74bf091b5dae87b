"""Looking at one run and stopping it: ``status`` and ``cancel``.

Both read the run's outcome record and its queue record: a run has ended
once it has an outcome that answers it (a dead run keeps its queue record,
until it is requeued or cancelled, beside its failed outcome); an outcome of
another input than the queued run's answers nothing.
"""

from __future__ import annotations

import asyncio

from stepstone.runtime.capabilities import Waking
from stepstone.runtime.clock import Clock
from stepstone.runtime.decide import FailureKind
from stepstone.runtime.errors import MalformedPayload
from stepstone.runtime.queue import JobRecord, JobStatus, LeaseQueue

from .envelope import Envelope
from .errors import CorruptOutcome
from .handle import JobState
from .outcome import ErrorInfo, OutcomeRecord
from .records import RunRecords, answering


async def job_state(records: RunRecords, queue: LeaseQueue, job_id: str) -> JobState | None:
    """Where the job is: its outcome if it has one that answers its run, else
    its queue record. Raises CorruptOutcome when the object at its outcome
    key answers nothing and the queue holds no record of the run either."""
    record, queued = await asyncio.gather(_outcome(records, job_id), queue.get(job_id))
    envelope = None if queued is None else _envelope(queued)
    if isinstance(record, OutcomeRecord) and queued is not None:
        # A record of another input than the queued run's is no answer for it.
        try:
            digest = None if envelope is None else envelope.input_hash
            answering(record, records.layout.outcome(job_id), digest)
        except CorruptOutcome as exc:
            record = exc
    if isinstance(record, CorruptOutcome) and queued is None:
        raise record
    if isinstance(record, OutcomeRecord):
        progress = record.progress
        if progress is None and record.status is not JobStatus.SUCCEEDED:
            # A failed run's last report.
            progress = await records.progress(job_id, record.incarnation)
        return JobState(
            id=job_id,
            state=record.status,
            attempts=record.attempts,
            progress=progress,
            last_error=None if record.error is None else record.error.message,
        )
    if queued is None:
        return None
    return JobState(
        id=job_id,
        state=queued.status,
        attempts=queued.attempts,
        progress=None if envelope is None else await records.progress(job_id, envelope.incarnation),
        last_error=queued.last_error or queued.dead_reason or _reason(record),
        run_at=queued.run_at,
        lease_expires_at=queued.lease_expires_at,
        waiting_for=None if queued.wait is None else queued.wait.detail,
    )


async def _outcome(records: RunRecords, job_id: str) -> OutcomeRecord | CorruptOutcome | None:
    try:
        return await records.outcome(job_id)
    except CorruptOutcome as exc:
        return exc


def _envelope(queued: JobRecord) -> Envelope | None:
    try:
        return Envelope.decode(queued.payload)
    except MalformedPayload:
        return None


def _reason(error: CorruptOutcome | None) -> str | None:
    return None if error is None else str(error)


async def cancel_run(
    records: RunRecords, queue: LeaseQueue, clock: Clock, job_id: str
) -> tuple[OutcomeRecord, bytes | None] | None:
    """Cancel a run that has not finished: record it cancelled (create-if-absent),
    then drop it from the queue. Returns the cancelled record and the run's
    input JSON (None when its payload does not decode), or None if the run
    had already finished (or was never submitted)."""
    queued = await queue.get(job_id)
    if queued is None:
        return None
    job_input: bytes | None = None
    try:
        envelope = Envelope.decode(queued.payload)
        name, digest, incarnation = envelope.name, envelope.input_hash, envelope.incarnation
        job_input = envelope.input
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
        return None  # it had ended first (or was swept): its outcome stands
    await queue.cancel(job_id)
    parent = None if not digest else envelope.parent
    if parent is not None and isinstance(queue, Waking):
        await queue.wake(parent)  # a parent waiting for this child looks again
    return record, job_input

"""Where a run is: :class:`JobState`, what ``runner.status`` and ``handle.status()`` answer.

It is read from the run's outcome record and its queue record: a run has
ended once it has an outcome that answers it (a dead run keeps its queue
record, until it is requeued or cancelled, beside its failed outcome); an
outcome of another input than the queued run's answers nothing.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from stepstone.errors import CorruptOutcome
from stepstone.records.envelope import Envelope
from stepstone.records.error_texts import open_optional, open_text
from stepstone.records.outcome import OutcomeRecord
from stepstone.records.run_records import RunRecords, answering
from stepstone.runtime.errors import MalformedPayload
from stepstone.runtime.queue import JobRecord, LeaseQueue
from stepstone.runtime.status import SUSPENDED_STATUSES, JobStatus


@dataclass(frozen=True, slots=True)
class JobState:
    """A snapshot of where a run is, from its outcome record, queue record and progress."""

    id: str
    """The run id."""
    status: JobStatus
    attempts: int
    """Attempts begun that count toward ``max_attempts``; a durable wait
    pauses an attempt, so this only rises."""
    progress: Any = None
    last_error: str | None = None
    """The last error's message (its traceback is in ``runner.history``)."""
    run_at: float | None = None
    """When it is (or was) due: a suspended run's wake time."""
    lease_expires_at: float | None = None
    waiting_for: str | None = None
    """What a suspended run waits for: ``until <time>``, an event's name,
    ``<n> of <m> children``."""
    lapses: int = 0
    """Leases the run lost to workers that died or hung under it; none of
    them spent an attempt (docs/guarantees.md)."""

    @property
    def finished(self) -> bool:
        """Whether the run has its outcome (succeeded, failed or cancelled)."""
        return self.status.finished


async def read_state(records: RunRecords, queue: LeaseQueue, run_id: str) -> JobState | None:
    """Where the job is: its outcome if it has one that answers its run, else
    its queue record. Raises CorruptOutcome when the object at its outcome
    key answers nothing and the queue holds no record of the run either."""
    record, queued = await asyncio.gather(_outcome(records, run_id), queue.get(run_id))
    envelope = None if queued is None else _envelope(queued)
    if isinstance(record, OutcomeRecord) and queued is not None:
        # A record of another input than the queued run's is no answer for it.
        try:
            digest = None if envelope is None else envelope.input_hash
            answering(record, records.layout.outcome(run_id), digest)
        except CorruptOutcome as exc:
            record = exc
    if isinstance(record, CorruptOutcome) and queued is None:
        raise record
    if isinstance(record, OutcomeRecord):
        progress = records.opened(record.progress)
        if progress is None and record.status is not JobStatus.SUCCEEDED:
            # A failed run's last report.
            progress = await records.progress(run_id, record.incarnation)
        return JobState(
            id=run_id,
            status=record.status,
            attempts=record.attempts,
            progress=progress,
            last_error=None
            if record.error is None
            else open_text(records.payloads, record.error.message),
            lapses=record.lapses,
        )
    if queued is None:
        return None
    return JobState(
        id=run_id,
        status=queued.status,
        attempts=attempts_of(queued),
        progress=None if envelope is None else await records.progress(run_id, envelope.incarnation),
        last_error=first_line(
            open_optional(records.payloads, queued.last_error or queued.dead_reason)
            or _reason(record)
        ),
        run_at=queued.run_at,
        lease_expires_at=queued.lease_expires_at,
        waiting_for=None if queued.wait is None else queued.wait.shown,
        lapses=queued.lapses,
    )


async def _outcome(records: RunRecords, run_id: str) -> OutcomeRecord | CorruptOutcome | None:
    try:
        return await records.outcome(run_id)
    except CorruptOutcome as exc:
        return exc


def _envelope(queued: JobRecord) -> Envelope | None:
    try:
        return Envelope.decode(queued.payload)
    except MalformedPayload:
        return None


def _reason(error: CorruptOutcome | None) -> str | None:
    return None if error is None else str(error)


def attempts_of(record: JobRecord) -> int:
    """The attempts a run has begun that count toward ``max_attempts``, as
    people read it: a durable wait pauses an attempt, it does not end it (the
    queue gives a suspended run's attempt back uncounted, to charge it only
    when the run resumes), so the count of a waiting run is its attempt's."""
    if record.status in SUSPENDED_STATUSES:
        return record.attempts + 1
    return record.attempts


def first_line(text: str | None) -> str | None:
    """An error's message without the traceback lines after it."""
    return None if text is None else text.partition("\n")[0]

"""Cancelling a run: ``runner.cancel`` and ``handle.cancel()``.

A cancel records the run's outcome as cancelled (create-if-absent: a run
that ended first keeps its outcome), then drops its queue record and wakes
the runs waiting for it (its parent, the runs that joined it). An attempt
running in this process stops at once; one running elsewhere stops within
``cancel_check`` seconds (its worker reads the run's outcome) or at its next
lease renewal. The handles awaiting the run here are told, and the run's
``on_settled`` hooks run here, in the cancelling process.
"""

from __future__ import annotations

from stepstone.execute.hooks import SettledHooks
from stepstone.handles.watch import OutcomeWatch
from stepstone.records.envelope import Envelope
from stepstone.records.family import Family
from stepstone.records.outcome import ErrorInfo, OutcomeRecord, about_the_run
from stepstone.records.run_records import RunRecords
from stepstone.runtime.capabilities import Waking
from stepstone.runtime.clock import Clock
from stepstone.runtime.decide import FailureKind
from stepstone.runtime.errors import MalformedPayload
from stepstone.runtime.queue import JobStatus, LeaseQueue
from stepstone.runtime.worker import Worker


class Canceller:
    """Cancels runs kept in ``records`` and ``queue``; ``worker`` is this
    process's (its attempt of a cancelled run stops at once)."""

    def __init__(
        self,
        *,
        records: RunRecords,
        queue: LeaseQueue,
        clock: Clock,
        worker: Worker,
        watch: OutcomeWatch,
        hooks: SettledHooks,
    ) -> None:
        self._records = records
        self._queue = queue
        self._clock = clock
        self._worker = worker
        self._watch = watch
        self._hooks = hooks

    async def cancel(self, run_id: str) -> bool:
        """Cancel the run unless it has finished; False if it had (or was never
        submitted). See the module docstring."""
        cancelled = await cancel_run(self._records, self._queue, self._clock, run_id)
        if cancelled is None:
            return False
        record, job_input = cancelled
        self._worker.cancel_running(run_id)
        self._watch.stands(record)
        await self._hooks.run(record, job_input)
        return True


async def cancel_run(
    records: RunRecords, queue: LeaseQueue, clock: Clock, run_id: str
) -> tuple[OutcomeRecord, bytes | None] | None:
    """Record a run that has not finished cancelled (create-if-absent), then
    drop it from the queue and wake its parent. Returns the cancelled record
    and the run's input JSON (None when its payload does not decode), or
    None if the run had already finished (or was never submitted)."""
    queued = await queue.get(run_id)
    if queued is None:
        return None
    envelope: Envelope | None
    try:
        envelope = Envelope.decode(queued.payload)
        kind, digest, incarnation = envelope.kind, envelope.input_hash, envelope.incarnation
    except MalformedPayload:
        envelope = None
        kind, digest, incarnation = queued.kind, "", ""
    record = OutcomeRecord(
        run_id=run_id,
        kind=kind,
        status=JobStatus.CANCELLED,
        input_hash=digest,
        incarnation=incarnation,
        attempts=queued.attempts,
        finished_at=clock.now(),
        error=ErrorInfo(FailureKind.CANCELLED, "the job was cancelled"),
        **({} if envelope is None else about_the_run(envelope)),
    )
    if await records.record_outcome(record) is not record:
        return None  # it had ended first (or was swept): its outcome stands
    await queue.cancel(run_id)
    if isinstance(queue, Waking):  # the runs waiting for this one look again
        await Family(records.store, records.layout).wake_waiters(queue, run_id, envelope)
    return record, None if envelope is None else envelope.input

"""Cancelling a run: ``runner.cancel`` and ``handle.cancel()``.

A cancel records the run's outcome as cancelled (create-if-absent: a run
that ended first keeps its outcome), then drops its queue record and wakes
the runs waiting for it (its parent, the runs that joined it). An attempt
running in this process stops at once; one running elsewhere stops within
``cancel_check`` seconds (its worker reads the run's outcome) or at its next
lease renewal. The handles awaiting the run here are told, and the run's
``on_settled`` hooks run here, in the cancelling process.

A cancel takes the run's live children with it (and theirs), unless told to
leave them: each child a run creates is recorded under it before it is
enqueued (:mod:`stepstone.records.family`), and the cancel, once the run's
outcome is recorded, cancels each of those still live, its outcome saying
"cancelled with its parent". A child the run joined (another submitted it)
is not the run's to cancel, and goes on. A child created while the cancel
lists them finds its parent cancelled right after it is created, and is
cancelled by its submit (:mod:`stepstone.submit.submitter`).
"""

from __future__ import annotations

import asyncio

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

CANCEL_AT_ONCE = 32
"""Children of a cancelled run cancelled concurrently."""


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
        self._family = Family(records.store, records.layout)

    async def cancel(self, run_id: str, *, leave_children: bool = False) -> bool:
        """Cancel the run unless it has finished, and its live children with
        it unless ``leave_children``; False if it had finished (or was never
        submitted). See the module docstring."""
        return await self._cancel(run_id, None, leave_children)

    async def _cancel(self, run_id: str, parent: str | None, leave_children: bool) -> bool:
        """Cancel ``run_id`` (only if ``parent`` created it, when given), then
        its children, and theirs."""
        cancelled = await cancel_run(self._records, self._queue, self._clock, run_id, parent)
        if cancelled is None:
            return False
        record, job_input = cancelled
        self._worker.cancel_running(run_id)
        self._watch.stands(record)
        await self._hooks.run(record, job_input)
        if not leave_children:
            children = await self._family.children(run_id)
            for start in range(0, len(children), CANCEL_AT_ONCE):
                batch = children[start : start + CANCEL_AT_ONCE]
                await asyncio.gather(*(self._cancel(child, run_id, False) for child in batch))
        return True


async def cancel_run(
    records: RunRecords, queue: LeaseQueue, clock: Clock, run_id: str, parent: str | None = None
) -> tuple[OutcomeRecord, bytes | None] | None:
    """Record a run that has not finished cancelled (create-if-absent), then
    drop it from the queue and wake the runs waiting for it. Returns the
    cancelled record and the run's input JSON (None when its payload does
    not decode), or None if the run had already finished (or was never
    submitted). Given ``parent``, only a run that parent created is
    cancelled (with it), not one it joined."""
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
    why = "the job was cancelled"
    if parent is not None:
        if envelope is None or envelope.parent != parent:
            return None  # another's run that the parent joined: not the parent's to cancel
        why = f"the job was cancelled with its parent {parent}"
    record = OutcomeRecord(
        run_id=run_id,
        kind=kind,
        status=JobStatus.CANCELLED,
        input_hash=digest,
        incarnation=incarnation,
        attempts=queued.attempts,
        lapses=queued.lapses,
        finished_at=clock.now(),
        error=ErrorInfo(FailureKind.CANCELLED, why),
        **({} if envelope is None else about_the_run(envelope)),
    )
    if await records.record_outcome(record) is not record:
        return None  # it had ended first (or was swept): its outcome stands
    await queue.cancel(run_id)
    if isinstance(queue, Waking):  # the runs waiting for this one look again
        await Family(records.store, records.layout).wake_waiters(
            queue, run_id, envelope, succeeded=False
        )
    return record, None if envelope is None else envelope.input

"""Recording runs cancelled: the primitive every cancel goes through.

A cancel records the run's outcome as cancelled (create-if-absent: a run
that ended first keeps its outcome), then drops its queue record and wakes
the runs waiting for it. With the run go its live children, and theirs:
each child a run creates is recorded under it before it is enqueued
(:mod:`stepstone.records.family`).

A cancel can be cut short between the two (its process killed once the
run's outcome stands, before each child is cancelled). The run then
answers "cancelled", and its children would go on with no parent to wait
for them; so a run found cancelled already still takes its live children
with it: when a cancel is tried again (:mod:`stepstone.execute.cancelling`),
and when retention sweeps it (:mod:`stepstone.records.retention`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from stepstone.records.envelope import Envelope
from stepstone.records.family import Family
from stepstone.records.outcome import ErrorInfo, OutcomeRecord, about_the_run
from stepstone.records.run_records import RunRecords
from stepstone.runtime.capabilities import Waking
from stepstone.runtime.clock import Clock
from stepstone.runtime.decision import FailureKind
from stepstone.runtime.errors import MalformedPayload
from stepstone.runtime.queue import LeaseQueue
from stepstone.runtime.status import JobStatus

CANCEL_AT_ONCE = 32
"""Children of a cancelled run cancelled concurrently."""


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


async def was_cancelled(records: RunRecords, run_id: str, parent: str | None = None) -> bool:
    """Whether the run's outcome says it was cancelled (its cancel may have
    been cut short before its children); given ``parent``, only a run that
    parent created counts."""
    try:
        found = await records.outcome(run_id)
    except Exception:  # (unreadable: not known to be cancelled)
        return False
    if found is None or found.status is not JobStatus.CANCELLED:
        return False
    return parent is None or found.parent == parent


async def each_child(
    records: RunRecords, parent: str, cancel: Callable[[str], Awaitable[object]]
) -> None:
    """``cancel`` each child ``parent`` submitted, CANCEL_AT_ONCE at a time."""
    children = await Family(records.store, records.layout).children(parent)
    for start in range(0, len(children), CANCEL_AT_ONCE):
        await asyncio.gather(*(cancel(child) for child in children[start : start + CANCEL_AT_ONCE]))


async def cancel_children(
    records: RunRecords, queue: LeaseQueue, clock: Clock, parent: str
) -> None:
    """Cancel the live children ``parent`` created, and theirs (a child
    already cancelled still takes its own)."""

    async def one(child: str) -> None:
        if await cancel_run(records, queue, clock, child, parent) is not None or (
            await was_cancelled(records, child, parent)
        ):
            await cancel_children(records, queue, clock, child)

    await each_child(records, parent, one)

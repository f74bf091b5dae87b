"""The retention sweep: a finished run's records go after the window.

It walks ``outcomes/`` (a LIST per thousand runs) and takes the objects' own
modification time from the listing, so only what is past the window is read.
For each run past the window it deletes its entries in the index of
attributes (:mod:`stepstone.records.attributes`), the memos, events, stream items,
callbacks' completions and attempt records of every incarnation, the
progress record, its waiters and children records, a dead run's queue
record, and last replaces the outcome with a tombstone: a sweep cut short
leaves the outcome, so a resubmission still answers from it, and the next
sweep finishes the job. A swept run is gone as a whole: a dead record left
behind would take the next submit of its key, which would then wait on a run
nobody runs and no outcome ends. The tombstone keeps a zombie of the swept
run from recording a late outcome for the key's next run to find (see
:mod:`stepstone.records.outcome`); the sweep deletes it once it is past the
window in its own time.

A cancelled run's live children are cancelled before it goes (its cancel
may have been cut short before them: :mod:`stepstone.records.cancels`),
so none waits for ever on a parent that is gone.

A finished run that a live run still waits on stays (its parent, or a run
that joined it, has no outcome yet): that run's replay submits it again and
must find its outcome, not a tombstone that would run it afresh. It goes in
the first sweep after the last of them ends.

Runs are swept REMOVE_AT_ONCE at a time: one after the other, each removal
waits on a busy event loop (or a round trip to S3), and a sweep
that removes fewer runs a second than finish falls behind for good while
the store, and every listing in it, grows.

A sweep runs in each worker process every ``interval`` (by the runner's
clock; a FakeClock moving past it wakes the sweeper). Several processes
sweeping at once is harmless: every delete is idempotent.

The same sweeper removes, at most hourly, the entries of the index of
attributes that name no run (:mod:`stepstone.records.index_sweep`), and
the audit records of operators' actions once they are older than their
own window, ``audit_retention`` (90 days by default, None to keep them),
at most once an hour (:func:`stepstone.records.audit_log.sweep`): they
outlive the runs they name.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Protocol

from stepstone.records import audit_log
from stepstone.records.attributes import attributes_marked, drop_run_entries
from stepstone.records.cancels import cancel_children
from stepstone.records.family import Family
from stepstone.records.index_sweep import INDEX_SWEEP_EVERY, sweep_index
from stepstone.records.layout import Layout
from stepstone.records.outcome import OutcomeRecord, Tombstone, decode_outcome_key
from stepstone.records.run_records import RunRecords
from stepstone.runtime import CorruptRecord
from stepstone.runtime.clock import Clock, subscribe
from stepstone.runtime.queue import LeaseQueue
from stepstone.runtime.status import JobStatus
from stepstone.store import NotFound, ObjectInfo, ObjectStore, PreconditionFailed

log = logging.getLogger("stepstone.records.retention")

AUDIT_SWEEP_EVERY = 3600.0
"""Seconds between two sweeps of the audit records, at most."""
REMOVE_AT_ONCE = 32
"""Objects past the window swept concurrently (each run's own deletes run together too)."""


class Runs(Protocol):
    """Where runs are kept: a store, a layout in it, their queue, a clock (a
    JobRunner is one)."""

    @property
    def store(self) -> ObjectStore: ...

    @property
    def queue(self) -> LeaseQueue: ...

    @property
    def layout(self) -> Layout: ...

    @property
    def clock(self) -> Clock: ...


class Sweeper:
    """Sweeps ``runs`` every ``interval`` seconds of their clock, and their
    audit records older than ``audit_retention`` seconds (None: none)."""

    def __init__(
        self,
        runs: Runs,
        retention: float,
        *,
        interval: float | None = None,
        audit_retention: float | None = audit_log.AUDIT_RETENTION,
    ) -> None:
        if retention <= 0:
            raise ValueError(f"retention must be positive seconds, got {retention}")
        if audit_retention is not None and audit_retention <= 0:
            raise ValueError(f"audit_retention must be positive seconds, got {audit_retention}")
        self.runs = runs
        self.retention = retention
        self.interval = interval if interval is not None else min(max(retention / 10, 1.0), 300.0)
        self.audit_retention = audit_retention
        self._audit_every = (
            0.0 if audit_retention is None else min(audit_retention / 10, AUDIT_SWEEP_EVERY)
        )
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._unsubscribe: Callable[[], None] = lambda: None

    def start(self) -> None:
        self._wake = asyncio.Event()
        self._unsubscribe = subscribe(self.runs.clock, self._wake.set)
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="stepstone-sweeper")

    async def stop(self) -> None:
        self._unsubscribe()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        clock = self.runs.clock
        next_at = audit_at = index_at = clock.now()
        while True:
            # Cleared before the round and each next time taken from its
            # start: a clock moved during a round (a FakeClock's advance)
            # brings the next round due at once, not an interval later.
            self._wake.clear()
            now = clock.now()
            if now >= next_at:
                next_at = now + self.interval
                try:
                    swept = await sweep(self.runs, self.retention)
                    if swept:
                        log.info("retention sweep removed %d finished run(s)", swept)
                except Exception as exc:
                    log.warning("retention sweep failed (will try again): %s", exc)
            if now >= index_at:
                index_at = now + INDEX_SWEEP_EVERY
                try:
                    removed = await sweep_index(self.runs)
                    if removed:
                        log.info("retention sweep removed %d index entries naming no run", removed)
                except Exception as exc:
                    log.warning("index sweep failed (will try again): %s", exc)
            if self.audit_retention is not None and now >= audit_at:
                audit_at = now + self._audit_every
                try:
                    cutoff = clock.now() - self.audit_retention
                    removed = await audit_log.sweep(self.runs.store, self.runs.layout, cutoff)
                    if removed:
                        log.info("retention sweep removed %d audit object(s)", removed)
                except Exception as exc:
                    log.warning("audit retention sweep failed (will try again): %s", exc)
            with contextlib.suppress(TimeoutError):
                due = min(next_at, index_at)
                due = due if self.audit_retention is None else min(due, audit_at)
                await asyncio.wait_for(self._wake.wait(), max(0.01, due - clock.now()))


async def sweep(runs: Runs, retention: float) -> int:
    """Remove every run that finished more than ``retention`` seconds ago; returns how many."""
    cutoff = runs.clock.now() - retention
    swept = 0
    expired: list[ObjectInfo] = []
    # Removing as it goes keeps memory flat however many runs expire; it is
    # safe because the listing pages by start-after on keys, not by offset.
    async for info in runs.store.scan(runs.layout.outcomes()):
        if info.modified <= cutoff:
            expired.append(info)
            if len(expired) == REMOVE_AT_ONCE:
                swept += sum(await asyncio.gather(*(sweep_one(runs, i) for i in expired)))
                expired = []
    return swept + sum(await asyncio.gather(*(sweep_one(runs, i) for i in expired)))


async def sweep_one(runs: Runs, info: ObjectInfo, *, dry_run: bool = False) -> bool:
    """Sweep the object ``info`` under ``outcomes/``, listed past the window:
    the run it records goes (True), or, a tombstone, it is deleted (False).
    An object that changed since it was listed is left alone: it is not past
    the window any more. ``dry_run``: say, change nothing."""
    try:
        stored = await runs.store.get(info.key)
    except NotFound:
        return False
    if stored.etag != info.etag:
        return False
    found = _decoded(stored.data)
    if isinstance(found, Tombstone):
        if not dry_run:
            with contextlib.suppress(PreconditionFailed, NotFound):
                await runs.store.delete(info.key, if_match=stored.etag)
        return False
    if isinstance(found, OutcomeRecord) and await _waited_for(runs, found):
        return False
    if not dry_run:
        run_id = runs.layout.run_id_of_outcome(info.key)
        if isinstance(found, OutcomeRecord) and found.status is JobStatus.CANCELLED:
            # (a cancel cut short before its children: they go with it now)
            records = RunRecords(runs.store, runs.layout)
            await cancel_children(records, runs.queue, runs.clock, run_id)
        await _remove(runs, run_id, found, stored.etag)
    return True


async def _waited_for(runs: Runs, record: OutcomeRecord) -> bool:
    """Whether a run that waits on this one lives: the parent that created
    it, or a run that joined it. Its replay would submit this run again and
    take its outcome; swept, the run would run again."""
    waiting = [] if record.parent is None else [record.parent]
    if record.key is not None:
        waiting += await Family(runs.store, runs.layout).waiters(record.run_id)
    for run_id in waiting:
        try:
            if await runs.queue.get(run_id) is not None:
                return True
        except CorruptRecord:
            return True  # its record is there, if unreadable: it may yet run
    return False


async def remove_run(runs: Runs, run_id: str) -> None:
    """Delete a run's memos, events, streams, callbacks' completions, progress
    and attempt records, and its queue record if the run died, then replace
    its outcome with a tombstone (nothing to replace: nothing more to do)."""
    try:
        stored = await runs.store.get(runs.layout.outcome(run_id))
    except NotFound:
        await _remove(runs, run_id, None, None)
        return
    await _remove(runs, run_id, _decoded(stored.data), stored.etag)


async def _remove(
    runs: Runs, run_id: str, found: OutcomeRecord | Tombstone | None, etag: str | None
) -> None:
    store, layout = runs.store, runs.layout
    keys = [info.key async for info in store.scan(layout.memos(run_id))]
    # Its entries in the index of attributes go before the memos that mark them.
    named = dict(found.attributes) if isinstance(found, OutcomeRecord) else {}
    marked = attributes_marked(layout, run_id, keys)
    await drop_run_entries(store, layout, run_id, {*named.items(), *marked})
    keys += [info.key async for info in store.scan(layout.events(run_id))]
    keys += [info.key async for info in store.scan(layout.streams(run_id))]
    keys += [info.key async for info in store.scan(layout.callbacks(run_id))]
    keys += [info.key async for info in store.scan(layout.progresses(run_id))]
    keys += [info.key async for info in store.scan(layout.attempts(run_id))]
    keys += [info.key async for info in store.scan(layout.children(run_id))]
    if isinstance(found, OutcomeRecord) and found.key is not None:
        keys.append(layout.waiters(run_id))  # (only a keyed run is joined)
    await asyncio.gather(*(store.delete(key) for key in keys))
    if etag is None or isinstance(found, Tombstone):
        return
    if found is None or found.status is not JobStatus.SUCCEEDED:
        # A run that did not succeed may have died, and its dead record would
        # take the key's next submit (a live record is left alone).
        await runs.queue.discard_dead(run_id)
    # A record, or an object that is none (it goes as well, fencing nothing).
    incarnation = "" if found is None else found.incarnation
    tombstone = Tombstone(run_id, incarnation, runs.clock.now())
    with contextlib.suppress(PreconditionFailed, NotFound):
        await store.put_if_match(layout.outcome(run_id), tombstone.encode(), etag)


def _decoded(data: bytes) -> OutcomeRecord | Tombstone | None:
    """What an outcome object holds; None when it holds nothing readable."""
    try:
        return decode_outcome_key(data)
    except ValueError:
        return None

"""Where audit records are kept, read back and swept.

Each action is one record, ``audit/<date>/<time>-<random>``
(:mod:`stepstone.records.audit`), so the log lists in the order the actions
began, a day to a folder; and an empty mark,
``audit-runs/<run_id>/<date>T<time>-<random>``, under each run it acted on,
so a run's page finds the actions on it with one LIST, however long the
log. The record is written before the action and again after it: an action
whose record cannot be written is not done (:func:`stepstone.ops.audited.audited`).

Audit records outlive the runs they name: the retention sweep of finished
runs leaves them, and removes them once they are older than their own
window (``JobRunner(audit_retention=...)``, 90 days by default; None keeps
them): :func:`sweep`.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from stepstone.records.audit import (
    Action,
    Actor,
    AuditRecord,
    day_of,
    decode_record,
    is_record_id,
    new_record,
    stamp,
)
from stepstone.records.layout import Layout
from stepstone.records.unreadable import Unreadable
from stepstone.runtime.clock import Clock
from stepstone.store import NotFound, ObjectStore

AUDIT_RETENTION = 90 * 86_400.0
"""Seconds an audit record is kept by default: 90 days."""
AT_ONCE = 16
"""Requests in flight at once when many marks or records are written, read or removed."""
KEPT_READ = 2000
"""Ended records a log keeps in memory once read (they never change)."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Found:
    """Records read, newest first, and those that would not decode."""

    records: list[AuditRecord] = field(default_factory=list)
    unreadable: list[Unreadable] = field(default_factory=list)

    def full(self, limit: int | None) -> bool:
        return limit is not None and len(self.records) >= limit


class AuditLog:
    """The audit records of the runs under ``layout`` in ``store``."""

    def __init__(self, store: ObjectStore, layout: Layout, clock: Clock) -> None:
        self.store = store
        self.layout = layout
        self.clock = clock
        self._ended: OrderedDict[str, AuditRecord] = OrderedDict()

    async def begin(
        self,
        actor: Actor,
        action: Action,
        runs: Sequence[str],
        detail: Mapping[str, str] | None = None,
    ) -> AuditRecord:
        """Record that ``actor`` begins ``action`` on ``runs``, and mark each
        run; raises StoreError when the store will not take them."""
        record = new_record(actor, action, runs, detail or {}, now=self.clock.now())
        await self.store.put_if_absent(self.layout.audit_record(record.id), record.encode())
        marks = (self.layout.audit_run(run_id, record.id) for run_id in dict.fromkeys(runs))
        await _bounded(self.store.put(key, b"") for key in marks)
        return record

    async def end(self, record: AuditRecord) -> None:
        """Write ``record`` (:meth:`AuditRecord.ending`) over the one :meth:`begin` wrote."""
        await self.store.put(self.layout.audit_record(record.id), record.encode())

    async def of_run(
        self,
        run_id: str,
        *,
        limit: int | None = 20,
        keep: Callable[[AuditRecord], bool] = lambda record: True,
    ) -> Found:
        """The newest ``limit`` actions on ``run_id`` that ``keep`` keeps,
        newest first: a LIST of its marks, and a GET of each record read."""
        prefix = self.layout.audit_runs(run_id)
        ids = [info.key[len(prefix) :] async for info in self.store.scan(prefix)]
        return await self._read(reversed([i for i in ids if is_record_id(i)]), limit, keep)

    async def listed(
        self,
        *,
        since: float | None = None,
        limit: int | None = 100,
        keep: Callable[[AuditRecord], bool] = lambda record: True,
    ) -> Found:
        """The newest ``limit`` records that began at ``since`` or later and
        that ``keep`` keeps, newest first. Lists the log's keys since then
        (a LIST per thousand), then reads from the newest back until it has
        ``limit``."""
        prefix = self.layout.audit()
        first = "" if since is None else stamp(since)
        # The day's folder name sorts just before its records and after the day before's.
        start = None if since is None else prefix + day_of(first)
        ids: list[str] = []
        async for info in self.store.scan(prefix, start_after=start):
            day, _, rest = info.key[len(prefix) :].partition("/")
            record_id = f"{day}T{rest}"
            if is_record_id(record_id) and record_id >= first:
                ids.append(record_id)
        return await self._read(reversed(ids), limit, keep)

    async def _read(
        self,
        ids: Iterable[str],
        limit: int | None,
        keep: Callable[[AuditRecord], bool] = lambda record: True,
    ) -> Found:
        """Read the records ``ids`` (newest first) a batch at a time until
        ``limit`` are kept; a record swept meanwhile is left out."""
        found = Found()
        pending = list(ids)
        while pending and not found.full(limit):
            batch, pending = pending[:AT_ONCE], pending[AT_ONCE:]
            for read in await _bounded(self._get(record_id) for record_id in batch):
                if isinstance(read, Unreadable):
                    found.unreadable.append(read)
                elif read is not None and keep(read) and not found.full(limit):
                    found.records.append(read)
        return found

    async def _get(self, record_id: str) -> AuditRecord | Unreadable | None:
        kept = self._ended.get(record_id)
        if kept is not None:
            return kept
        key = self.layout.audit_record(record_id)
        try:
            stored = await self.store.get(key)
        except NotFound:
            return None
        try:
            record = decode_record(stored.data, now=self.clock.now())
        except ValueError as exc:
            return Unreadable(key, str(exc))
        if record.id != record_id:
            return Unreadable(key, f"it holds record {record.id}, not {record_id}")
        if record.outcome != "started":
            self._ended[record_id] = record
            while len(self._ended) > KEPT_READ:
                self._ended.popitem(last=False)
        return record


async def sweep(store: ObjectStore, layout: Layout, cutoff: float) -> int:
    """Remove the audit records and marks last written before ``cutoff``
    (by the store's modification times); returns how many objects went.
    The log is listed only up to the day after the cutoff's (its keys are
    in time order); the marks, all of them."""
    last_day = day_of(stamp(cutoff + 86_400.0))
    old: list[str] = []
    log = layout.audit()
    async for info in store.scan(log):
        if info.key[len(log) :].partition("/")[0] > last_day:
            break
        if info.modified <= cutoff:
            old.append(info.key)
    async for info in store.scan(layout.audit_runs()):
        if info.modified <= cutoff:
            old.append(info.key)
    await _bounded(store.delete(key) for key in old)
    return len(old)


async def _bounded(coros: Iterable[Awaitable[T]]) -> list[T]:
    semaphore = asyncio.Semaphore(AT_ONCE)

    async def one(coro: Awaitable[T]) -> T:
        async with semaphore:
            return await coro

    return list(await asyncio.gather(*(one(c) for c in coros)))

"""The fleet as its workers' records tell it: the workers page and
``stepstone workers``.

Each worker that runs writes its record under ``workers/`` every beat
(:mod:`stepstone.runtime.worker.presence`); this reads them. What one
refresh reads is bounded: one listing page (``MAX_RECORDS`` keys), and a GET
of each record written in the last ``AGE_OUT`` (older ones are left to the
workers' sweep, unread) and no larger than a record can be. A record that
does not decode, or holds a value no worker could have written, is
:class:`~stepstone.ops.reads.Unreadable`, named by its key, beside the
others.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from stepstone.ops.reads import Unreadable, bounded
from stepstone.records.retention import Runs
from stepstone.runtime.error_text import describe
from stepstone.runtime.worker.presence import AGE_OUT, MAX_RECORD_BYTES, State, WorkerRecord
from stepstone.store import NotFound

MAX_RECORDS = 1000
"""Worker records one read lists at most (one listing page)."""

ORDER: dict[State, int] = {"live": 0, "gone": 1, "stopped": 2}


@dataclass(frozen=True, slots=True)
class WorkerRow:
    """One worker life: its record, its state now, and whether another live
    life carries its id (two processes under one id, each shown apart)."""

    key: str
    record: WorkerRecord
    state: State
    shared_id: bool


@dataclass(frozen=True, slots=True)
class Fleet:
    """The workers: live first (by id), then gone, then stopped (latest first)."""

    rows: list[WorkerRow]
    unreadable: list[Unreadable]
    more: bool
    """The listing held more records than one read takes (MAX_RECORDS)."""

    def count(self, state: State) -> int:
        return sum(1 for row in self.rows if row.state == state)


async def read_workers(runner: Runs) -> Fleet:
    """The workers' records under ``runner``'s prefix, as of its clock's now."""
    now = runner.clock.now()
    listed = await runner.store.list(runner.layout.workers(), limit=MAX_RECORDS + 1)
    more = len(listed) > MAX_RECORDS
    recent = [info for info in listed[:MAX_RECORDS] if info.modified >= now - AGE_OUT]
    oversized = [
        Unreadable(info.key, f"{info.size} bytes is too large for a worker record")
        for info in recent
        if info.size > MAX_RECORD_BYTES
    ]
    recent = [info for info in recent if info.size <= MAX_RECORD_BYTES]

    async def one(key: str) -> tuple[str, WorkerRecord | str | None]:
        try:
            stored = await runner.store.get(key)
        except NotFound:  # swept, or replaced by a restart, since the listing
            return key, None
        try:
            return key, WorkerRecord.decode(stored.data, now=now)
        except ValueError as exc:
            return key, str(exc)
        except Exception as exc:  # a bug of the decoder must not break the page
            return key, describe(exc)

    rows: list[WorkerRow] = []
    unreadable: list[Unreadable] = oversized
    for key, found in await bounded(one(info.key) for info in recent):
        if isinstance(found, str):
            unreadable.append(Unreadable(key, found))
        elif found is not None:
            rows.append(WorkerRow(key, found, found.state(now), shared_id=False))
    live_ids = Counter(row.record.worker_id for row in rows if row.state == "live")
    rows = [
        WorkerRow(row.key, row.record, row.state, live_ids[row.record.worker_id] > 1)
        for row in rows
    ]
    rows.sort(
        key=lambda row: (
            ORDER[row.state],
            row.record.worker_id if row.state == "live" else "",
            -row.record.beat_at,
        )
    )
    return Fleet(rows, unreadable, more)

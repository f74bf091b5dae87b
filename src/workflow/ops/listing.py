"""Runs listed and counted: ``stepstone ls``, ``stepstone stats``, the web view's list.

Live runs are listed from the queue (which holds them, and the dead), finished
ones from their outcome records; a run is one row, newest first by when it
was submitted. What a listing costs is said at :func:`list_jobs`.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from stepstone.ops.reads import (
    Inspected,
    InspectError,
    Unreadable,
    bounded,
    iter_outcomes,
    lacks,
    parse_status,
    read_outcome,
    read_outcomes,
)
from stepstone.records.outcome import OutcomeRecord
from stepstone.runtime.capabilities import JobCounts, JobListing
from stepstone.runtime.queue import QUEUE_STATUSES, JobRecord, JobStatus
from stepstone.store import ObjectInfo


@dataclass(frozen=True, slots=True)
class Listed:
    """One row of ``stepstone ls`` and the web view's list: a job by its id,
    from the queue and/or its outcome."""

    id: str
    kind: str
    status: JobStatus
    attempts: int
    updated: float
    source: str
    """``queue``, ``outcome``, or ``queue+outcome`` (a dead job keeps both)."""
    last_error: str | None = None
    submitted: float = 0.0
    """When the run was enqueued (the finish time for an outcome too old to say)."""


@dataclass(frozen=True, slots=True)
class Listing:
    """``stepstone ls``: the rows, and the records that could not be read."""

    rows: list[Listed]
    unreadable: list[Unreadable]


@dataclass(frozen=True, slots=True)
class Counts:
    """``stepstone stats``: queue records and outcome records by status, and
    the outcome records that could not be read."""

    queue: dict[str, int]
    outcomes: dict[str, int]
    unreadable: list[Unreadable]


async def list_jobs(
    runner: Inspected,
    state: str | None = None,
    *,
    kind: str | None = None,
    since: float | None = None,
    limit: int | None = 100,
) -> Listing:
    """Jobs newest first by when they were submitted, one row per id, and the
    records met that would not decode.

    A queue state (scheduled, ready, running, dead, ...) lists queue records
    only; an outcome state (succeeded, failed, cancelled) lists outcome records
    only, which is where finished runs live; no state lists both. ``kind``
    keeps the jobs of one job type (its NAME), ``since`` those submitted at or
    after that epoch time, ``limit`` the newest that many (None: all).

    What it costs: every queue record is read (a LIST per thousand and a GET
    per record, as ``stats`` counts them; the queue holds the live runs and
    the dead). Outcome records are listed (a LIST per thousand), then read a
    page at a time, most recently written first, until no unread one can be
    newer than the rows kept: a run finishes after it is submitted, so an
    outcome written before the oldest row kept was submitted earlier still
    (to within ``CLOCK_SLACK`` of skew between the submitter's clock and the
    store's).
    """
    if limit is not None and limit < 1:
        raise InspectError(f"--limit must be at least 1, got {limit}")
    wanted = None if state is None else parse_status(state)
    found = _Newest(kind, since, limit)
    unreadable: dict[str, Unreadable] = {}  # by key: a dead job's outcome is met twice
    if wanted is None or wanted.queued:
        async for record in _queue_records(runner, wanted):
            found.offer(_queued_row(record))
    if wanted is None or wanted.finished:
        await _offer_outcomes(runner, wanted, found, unreadable)
    rows = found.newest()
    # A dead job keeps its failed outcome beside its queue record: say so.
    dead = [row.id for row in rows if row.status is JobStatus.DEAD]
    beside: set[str] = set()
    for run_id, outcome in zip(
        dead, await bounded(read_outcome(runner, run_id) for run_id in dead), strict=True
    ):
        if isinstance(outcome, Unreadable):
            unreadable[outcome.key] = outcome
        elif outcome is not None:
            beside.add(run_id)
    rows = [
        dataclasses.replace(row, source="queue+outcome") if row.id in beside else row
        for row in rows
    ]
    return Listing(rows, list(unreadable.values()))


CLOCK_SLACK = 5.0
"""Seconds a submitter's clock may run ahead of the store's with ``ls`` still
newest first (see :func:`list_jobs`)."""


_OUTCOME_PAGE = 100
"""Outcome records read at a time (fewer when fewer rows are wanted)."""


@dataclass(slots=True)
class _Newest:
    """The rows a listing keeps: those its filters match, one per id (the
    first offered), of which the newest ``limit`` are shown."""

    kind: str | None
    since: float | None
    limit: int | None
    rows: dict[str, Listed] = field(default_factory=dict)

    def offer(self, row: Listed) -> None:
        if row.id in self.rows:
            return
        if (self.kind is None or row.kind == self.kind) and (
            self.since is None or row.submitted >= self.since
        ):
            self.rows[row.id] = row

    def newer_than(self, written: float) -> bool:
        """True when ``limit`` rows kept were submitted after a record written
        at ``written`` (by the store's clock) could have been."""
        if self.limit is None or len(self.rows) < self.limit:
            return False
        submitted = (row.submitted for row in self.rows.values())
        return heapq.nlargest(self.limit, submitted)[-1] > written + CLOCK_SLACK

    def newest(self) -> list[Listed]:
        rows = sorted(self.rows.values(), key=lambda row: (row.submitted, row.id), reverse=True)
        return rows[: self.limit]


async def _queue_records(runner: Inspected, status: JobStatus | None) -> AsyncIterator[JobRecord]:
    """Every queue record (of ``status`` if given), in id order."""
    queue = runner.queue
    if not isinstance(queue, JobListing):
        raise lacks(
            queue,
            "list its jobs",
            "; `ls succeeded`, `ls failed` and `ls cancelled` list finished runs",
        )
    cursor: str | None = None
    while True:
        page = await queue.list(status, cursor=cursor, limit=1000)
        for record in page.records:
            yield record
        if page.cursor is None:
            return
        cursor = page.cursor


def _queued_row(record: JobRecord) -> Listed:
    return Listed(
        id=record.id,
        kind=record.kind,
        status=record.status,
        attempts=record.attempts,
        updated=record.updated_at,
        source="queue",
        last_error=record.last_error or record.dead_reason,
        submitted=record.created_at,
    )


async def _offer_outcomes(
    runner: Inspected,
    wanted: JobStatus | None,
    found: _Newest,
    unreadable: dict[str, Unreadable],
) -> None:
    """Offer ``found`` the outcome records that may be among its newest rows,
    most recently written first, a page at a time (see :func:`list_jobs`)."""
    written_after = None if found.since is None else found.since - CLOCK_SLACK
    infos = [
        info
        async for info in iter_outcomes(runner)
        if written_after is None or info.modified >= written_after
    ]
    infos.sort(key=lambda info: info.modified, reverse=True)
    page = min(_OUTCOME_PAGE, found.limit or _OUTCOME_PAGE)
    for start in range(0, len(infos), page):
        if found.newer_than(infos[start].modified):
            return
        for record in await read_outcomes(runner, infos[start : start + page]):
            if isinstance(record, Unreadable):
                unreadable[record.key] = record
            elif wanted is None or record.status is wanted:
                found.offer(_finished_row(record))


def _finished_row(record: OutcomeRecord) -> Listed:
    return Listed(
        id=record.run_id,
        kind=record.kind,
        status=record.status,
        attempts=record.attempts,
        updated=record.finished_at,
        source="outcome",
        last_error=None if record.error is None else record.error.message,
        submitted=record.submitted_at or record.finished_at,
    )


async def queue_counts(runner: Inspected) -> dict[str, int]:
    """Queue records by status (no outcome is read: a LIST per thousand records)."""
    if not isinstance(runner.queue, JobCounts):
        raise lacks(runner.queue, "count its jobs")
    counts = await runner.queue.counts()
    return {status.value: counts.get(status, 0) for status in QUEUE_STATUSES}


async def stats(runner: Inspected) -> Counts:
    """Queue records by status, and outcome records by status (a GET each)."""
    queue = await queue_counts(runner)
    outcomes = {status.value: 0 for status in JobStatus if status.finished}
    unreadable: list[Unreadable] = []

    async def count(infos: list[ObjectInfo]) -> None:
        for record in await read_outcomes(runner, infos):
            if isinstance(record, Unreadable):
                unreadable.append(record)
            else:
                outcomes[record.status.value] += 1

    batch: list[ObjectInfo] = []
    async for info in iter_outcomes(runner):
        batch.append(info)
        if len(batch) >= 1000:
            await count(batch)
            batch.clear()
    await count(batch)
    return Counts(queue, outcomes, unreadable)

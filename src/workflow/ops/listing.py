"""Runs listed and counted: ``runner.runs()``, ``stepstone ls``, ``stepstone
stats``, the web view's list, and the runs a bulk action takes.

Live runs are listed from the queue (which holds them, and the dead), finished
ones from their outcome records; a run is one row, newest first by when it
was submitted, chosen by a :class:`RunFilter`. What a listing costs is said
at :func:`list_runs`.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field

from stepstone.errors import InspectError
from stepstone.handles.state import attempts_of, first_line
from stepstone.ops.reads import (
    Inspected,
    Unreadable,
    bounded,
    iter_outcomes,
    lacks,
    payloads_of,
    read_outcome,
    read_outcomes,
)
from stepstone.records.envelope import Envelope
from stepstone.records.error_texts import open_optional, open_text
from stepstone.records.outcome import OutcomeRecord
from stepstone.records.payloads import Payloads
from stepstone.runtime.capabilities import JobCounts, JobListing, JobSurvey, Survey
from stepstone.runtime.errors import MalformedPayload
from stepstone.runtime.fairness import fairness_of
from stepstone.runtime.queue import JobRecord
from stepstone.runtime.status import QUEUE_STATUSES, JobStatus
from stepstone.store import ObjectInfo


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One run as a listing shows it (``runner.runs()``, ``stepstone ls``, the
    web view's list): from its queue record and/or its outcome."""

    id: str
    """The run id."""
    kind: str
    status: JobStatus
    attempts: int
    updated: float
    source: str
    """``queue``, ``outcome``, or ``queue+outcome`` (a dead run keeps both)."""
    last_error: str | None = None
    """The last error's message (its first line: tracebacks are in ``show``)."""
    submitted: float = 0.0
    """When the run was enqueued (the finish time for an outcome too old to say)."""
    version: str | None = None
    """The job type's ``VERSION`` it was submitted under."""
    key: str | None = None
    """The idempotency key it was submitted with."""
    lapses: int = 0
    """Leases it lost to workers that died or hung (none spent an attempt)."""
    attributes: Mapping[str, str] = field(default_factory=dict)
    """Its attributes: those it was submitted with, those it set once it
    has ended (when it succeeded), and those a listing by attributes found
    it by."""
    fairness_key: str | None = None
    """The fairness key it was submitted with, while its queue record is
    there (an outcome does not keep it)."""


@dataclass(frozen=True, slots=True)
class RunFilter:
    """Which runs a listing or a bulk action takes: each field that is set
    must match (None: any)."""

    status: JobStatus | None = None
    kind: str | None = None
    since: float | None = None
    """Submitted at or after this epoch time."""
    version: str | None = None
    """Submitted under this ``VERSION`` of its job type."""
    key_prefix: str | None = None
    """Submitted with an idempotency key starting with this."""
    attributes: Mapping[str, str] | None = None
    """Having each of these attributes (names and values); a listing then
    reads the runs the index of attributes names, not every run
    (:mod:`stepstone.ops.by_attributes`)."""

    def matches(self, row: RunSummary) -> bool:
        """Whether ``row`` is a run this filter takes (its status aside)."""
        return (
            (
                not self.attributes
                or all(row.attributes.get(n) == v for n, v in self.attributes.items())
            )
            and (self.kind is None or row.kind == self.kind)
            and (self.since is None or row.submitted >= self.since)
            and (self.version is None or row.version == self.version)
            and (
                self.key_prefix is None
                or (row.key is not None and row.key.startswith(self.key_prefix))
            )
        )


@dataclass(frozen=True, slots=True)
class Listing:
    """A listing: the rows, and the records that could not be read."""

    rows: list[RunSummary]
    unreadable: list[Unreadable]
    unread: int = 0
    """Outcome records ``reads`` left unread that might have been among the
    rows (0: the rows are all the runs chosen, up to ``limit``)."""


@dataclass(frozen=True, slots=True)
class Counts:
    """``stepstone stats``: queue records and outcome records by status, and
    the outcome records that could not be read."""

    queue: dict[str, int]
    outcomes: dict[str, int]
    unreadable: list[Unreadable]


async def list_runs(
    runner: Inspected,
    chosen: RunFilter = RunFilter(),
    *,
    limit: int | None = 100,
    listed: Sequence[ObjectInfo] | None = None,
    reads: int | None = None,
    surveyed: Survey | None = None,
) -> Listing:
    """Runs ``chosen`` takes, newest first by when they were submitted, one
    row per id, and the records met that would not decode.

    A queue status (scheduled, ready, running, dead, ...) lists queue records
    only; an outcome status (succeeded, failed, cancelled) lists outcome
    records only, which is where finished runs live; no status lists both.
    ``limit`` keeps the newest that many (None: all).

    What it costs: every queue record is read (a LIST per thousand and a GET
    per record, as ``stats`` counts them; the queue holds the live runs and
    the dead). Outcome records are listed (a LIST per thousand), then read a
    page at a time, most recently written first, until no unread one can be
    newer than the rows kept: a run finishes after it is submitted, so an
    outcome written before the oldest row kept was submitted earlier still
    (to within ``CLOCK_SLACK`` of skew between the submitter's clock and the
    store's).

    ``listed``: the outcome objects, newest written first, as a view listed
    them before (:mod:`stepstone.ops.finished`), in place of listing them now.
    ``reads``: read at most that many outcome records; a filter that few
    finished runs match then shows those among the ones read, and the
    listing says how many it left unread (``Listing.unread``).
    ``surveyed``: the queue's records as a view surveyed them
    (:func:`survey_queue`), in place of reading every one now; the rows
    are then of those it read (``Survey.unread`` says how many it did not).
    """
    if limit is not None and limit < 1:
        raise InspectError(f"--limit must be at least 1, got {limit}")
    wanted = chosen.status
    found = Newest(chosen, limit)
    unreadable: dict[str, Unreadable] = {}  # by key: a dead job's outcome is met twice
    payloads = payloads_of(runner)
    if surveyed is not None and (wanted is None or wanted.queued):
        for key, why in surveyed.unreadable:
            unreadable[key] = Unreadable(key, why)
        for record in surveyed.records:
            if wanted is None or record.status is wanted:
                found.offer(queued_row(record, payloads))
    elif wanted is None or wanted.queued:
        async for record in _queue_records(runner, wanted, unreadable):
            found.offer(queued_row(record, payloads))
    unread = 0
    if wanted is None or wanted.finished:
        if listed is None:
            listed = [info async for info in iter_outcomes(runner)]
            listed.sort(key=lambda info: info.modified, reverse=True)
        unread = await _offer_outcomes(runner, wanted, found, unreadable, listed, reads)
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
    return Listing(rows, list(unreadable.values()), unread)


CLOCK_SLACK = 5.0
"""Seconds a submitter's clock may run ahead of the store's with ``ls`` still
newest first (see :func:`list_runs`)."""


_OUTCOME_PAGE = 100
"""Outcome records read at a time (fewer when fewer rows are wanted)."""


@dataclass(slots=True)
class Newest:
    """The rows a listing keeps: those its filters match, one per id (the
    first offered), of which the newest ``limit`` are shown."""

    chosen: RunFilter
    limit: int | None
    rows: dict[str, RunSummary] = field(default_factory=dict)

    def offer(self, row: RunSummary) -> None:
        if row.id not in self.rows and self.chosen.matches(row):
            self.rows[row.id] = row

    def newer_than(self, written: float) -> bool:
        """True when ``limit`` rows kept were submitted after a record written
        at ``written`` (by the store's clock) could have been."""
        if self.limit is None or len(self.rows) < self.limit:
            return False
        submitted = (row.submitted for row in self.rows.values())
        return heapq.nlargest(self.limit, submitted)[-1] > written + CLOCK_SLACK

    def newest(self) -> list[RunSummary]:
        rows = sorted(self.rows.values(), key=lambda row: (row.submitted, row.id), reverse=True)
        return rows[: self.limit]


async def queued_runs(
    runner: Inspected, chosen: RunFilter = RunFilter()
) -> tuple[list[tuple[RunSummary, JobRecord]], list[Unreadable]]:
    """The runs in the queue (live, or dead) that ``chosen`` takes (its
    status, if any, one of the queue's), newest first, each with its record;
    and the records that would not decode. Outcome records are not read."""
    unreadable: dict[str, Unreadable] = {}
    rows: list[tuple[RunSummary, JobRecord]] = []
    payloads = payloads_of(runner)
    async for record in _queue_records(runner, chosen.status, unreadable):
        row = queued_row(record, payloads)
        if chosen.matches(row):
            rows.append((row, record))
    rows.sort(key=lambda pair: (pair[0].submitted, pair[0].id), reverse=True)
    return rows, list(unreadable.values())


async def _queue_records(
    runner: Inspected, status: JobStatus | None, unreadable: dict[str, Unreadable]
) -> AsyncIterator[JobRecord]:
    """Every queue record (of ``status`` if given), in id order; those that
    would not decode go to ``unreadable``."""
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
        for key, why in page.unreadable:
            unreadable[key] = Unreadable(key, why)
        for record in page.records:
            yield record
        if page.cursor is None:
            return
        cursor = page.cursor


def queued_row(record: JobRecord, payloads: Payloads) -> RunSummary:
    """A live (or dead) run's row, from its queue record (its last error,
    when sealed, opened with ``payloads`` or saying what sealed it)."""
    envelope = _envelope(record)
    return RunSummary(
        id=record.id,
        kind=record.kind,
        status=record.status,
        attempts=attempts_of(record),
        updated=record.updated_at,
        source="queue",
        last_error=first_line(open_optional(payloads, record.last_error or record.dead_reason)),
        submitted=record.created_at,
        version=None if envelope is None else envelope.version,
        key=None if envelope is None else envelope.key,
        lapses=record.lapses,
        attributes={} if envelope is None else dict(envelope.attributes),
        fairness_key=fairness_of(record.headers)[0] or None,
    )


def _envelope(record: JobRecord) -> Envelope | None:
    try:
        return Envelope.decode(record.payload)
    except MalformedPayload:
        return None


async def _offer_outcomes(
    runner: Inspected,
    wanted: JobStatus | None,
    found: Newest,
    unreadable: dict[str, Unreadable],
    listed: Sequence[ObjectInfo],
    reads: int | None,
) -> int:
    """Offer ``found`` the outcome records of ``listed`` (newest written
    first) that may be among its newest rows, a page at a time, at most
    ``reads`` of them (see :func:`list_runs`); how many it left unread that
    might have been."""
    since = found.chosen.since
    payloads = payloads_of(runner)
    written_after = None if since is None else since - CLOCK_SLACK
    infos = [info for info in listed if written_after is None or info.modified >= written_after]
    page = min(_OUTCOME_PAGE, found.limit or _OUTCOME_PAGE)
    start = 0
    while start < len(infos) and not found.newer_than(infos[start].modified):
        if reads is not None and start >= reads:
            return len(infos) - start
        end = start + page if reads is None else min(start + page, reads)
        for record in await read_outcomes(runner, infos[start:end]):
            if isinstance(record, Unreadable):
                unreadable[record.key] = record
            elif wanted is None or record.status is wanted:
                found.offer(finished_row(record, payloads))
        start = end
    return 0


def finished_row(record: OutcomeRecord, payloads: Payloads) -> RunSummary:
    """A finished run's row, from its outcome record (its error, when
    sealed, opened with ``payloads`` or saying what sealed it)."""
    return RunSummary(
        id=record.run_id,
        kind=record.kind,
        status=record.status,
        attempts=record.attempts,
        updated=record.finished_at,
        source="outcome",
        last_error=None
        if record.error is None
        else first_line(open_text(payloads, record.error.message)),
        submitted=record.submitted_at or record.finished_at,
        version=record.version,
        key=record.key,
        lapses=record.lapses,
        attributes=record.attributes,
    )


async def queue_counts(runner: Inspected) -> dict[str, int]:
    """Queue records by status (no outcome is read: a LIST per thousand records)."""
    if not isinstance(runner.queue, JobCounts):
        raise lacks(runner.queue, "count its jobs")
    counts = await runner.queue.counts()
    return {status.value: counts.get(status, 0) for status in QUEUE_STATUSES}


async def survey_queue(runner: Inspected, *, reads: int) -> Survey | None:
    """The queue's records as far as ``reads`` GETs allow, those read before
    free unless changed (:class:`~stepstone.runtime.capabilities.JobSurvey`);
    None for a queue that cannot survey (the caller reads them all)."""
    queue = runner.queue
    return await queue.survey(reads=reads) if isinstance(queue, JobSurvey) else None


def surveyed_counts(surveyed: Survey) -> dict[str, int]:
    """Queue records by status, of those ``surveyed`` read."""
    counts = {status.value: 0 for status in QUEUE_STATUSES}
    for record in surveyed.records:
        counts[record.status.value] += 1
    return counts


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

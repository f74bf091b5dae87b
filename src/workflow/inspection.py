"""Read-side helpers over a runner's store and queue: what ``stepstone`` shows.

These read the same objects the engine writes (see :mod:`workflow.layout`)
without knowing any job type, so an operator's shell, which imports none of
the application's code, can list, show, retry and purge runs. Results and
memos are shown as their MessagePack values (a pydantic model appears as
the dict it was dumped to).

A record that will not decode (garbage, truncated, a format this library
does not read) never stops a command: it comes back as :class:`Unreadable`,
naming its key and why, beside everything else that could be read.

Kept out of :mod:`stepstone.runner` on purpose: the runner is the write path
and these are tools around it; nothing here is needed to run a job.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import heapq
import json
import re
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from stepstone.runtime.capabilities import DeadJobRequeue, JobCounts, JobListing
from stepstone.runtime.decide import describe
from stepstone.runtime.errors import MalformedPayload, QueueError
from stepstone.runtime.queue import QUEUE_STATUSES, JobRecord, JobStatus
from stepstone.runtime.store_queue import CorruptRecord
from stepstone.store import NotFound, ObjectInfo, StoreError

from .codec import unpack
from .envelope import Envelope
from .history import AttemptInfo, keep_final_attempt, read_history
from .layout import check_run_id, step_name
from .outcome import OutcomeRecord, decode_slot
from .retention import Runs, sweep_one

READ_CONCURRENCY = 16
"""GETs in flight at once when a command has to read many records."""


class Inspected(Runs, Protocol):
    """What the tools work on: a store, a layout, a clock, the queue, and
    cancelling a run (a JobRunner is one)."""

    async def cancel(self, job_id: str) -> bool: ...


def parse_status(name: str) -> JobStatus:
    """The status called ``name`` (as ``stepstone ls --status`` takes it)."""
    try:
        return JobStatus(name)
    except ValueError:
        names = ", ".join(status.value for status in JobStatus)
        raise InspectError(f"unknown status {name!r} (one of: {names})") from None


class InspectError(Exception):
    """A request an operator made that cannot be done, with the reason to show."""


def _lacks(queue: object, doing: str, instead: str = "") -> InspectError:
    """The error for a command the queue's backend does not offer (see
    :mod:`stepstone.runtime.capabilities`; SqsQueue cannot list, for one)."""
    return InspectError(f"the queue cannot {doing}: {queue!r} does not offer it{instead}")


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A stored object that would not decode: its key, and why."""

    key: str
    reason: str


@dataclass(frozen=True, slots=True)
class Memo:
    """One memoized step of a run, as stored."""

    key: str
    incarnation: str
    step_key: str
    size: int
    modified: float
    value: Any = None
    unreadable: str | None = None
    """Why the value would not decode, when it would not."""

    @property
    def step(self) -> str:
        """The step's readable name (``charge #2`` for the second ``charge``)."""
        return step_name(self.step_key)


@dataclass(frozen=True, slots=True)
class Listed:
    """One row of ``stepstone ls`` and the web view's list: a job by its id,
    from the queue and/or its outcome."""

    id: str
    name: str
    state: JobStatus
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


@dataclass(slots=True)
class Detail:
    """Everything stored about one job: ``stepstone show``."""

    id: str
    queued: JobRecord | None
    outcome: OutcomeRecord | None
    progress: Any
    memos: list[Memo] = field(default_factory=list)
    incarnation: str | None = None
    """The incarnation of the live or recorded run; memos of others are leftovers."""
    input: Any = None
    unreadable: dict[str, Unreadable] = field(default_factory=dict)
    """The job's records that would not decode, by part (``queue``,
    ``outcome``, ``progress``); an unreadable memo says so itself."""
    history: list[AttemptInfo] = field(default_factory=list)
    """The claims of the run's incarnation, in order (:mod:`stepstone.history`)."""
    unreadable_attempts: list[Unreadable] = field(default_factory=list)

    def unreadable_records(self) -> list[Unreadable]:
        """Every record of the job that would not decode, memos and attempts included."""
        memos = [Unreadable(m.key, m.unreadable) for m in self.memos if m.unreadable is not None]
        return [*self.unreadable.values(), *memos, *self.unreadable_attempts]

    @property
    def state(self) -> JobStatus | None:
        """Where the job is; None when nothing but leftovers is stored."""
        if self.queued is not None and self.queued.status is JobStatus.DEAD:
            return JobStatus.DEAD
        if self.outcome is not None:
            return self.outcome.status
        if self.queued is not None:
            return self.queued.status
        return None

    @property
    def name(self) -> str:
        if self.outcome is not None:
            return self.outcome.name
        if self.queued is not None:
            return self.queued.kind
        return ""


def decode_value(data: bytes | None) -> Any:
    """A stored MessagePack value, or a short note when it is not one."""
    if data is None:
        return None
    try:
        return unpack(data)
    except Exception:
        return f"<{len(data)} undecodable bytes>"


async def read_outcome(runner: Inspected, job_id: str) -> OutcomeRecord | Unreadable | None:
    """The run's outcome record; Unreadable when it does not decode; None when
    there is none (a swept run's tombstone is none)."""
    return await _read_outcome_at(runner, runner.layout.outcome(job_id))


async def _read_outcome_at(runner: Inspected, key: str) -> OutcomeRecord | Unreadable | None:
    try:
        stored = await runner.store.get(key)
    except NotFound:
        return None
    try:
        found = decode_slot(stored.data)
    except ValueError as exc:  # what decode_slot says of anything that is no record
        return Unreadable(key, str(exc))
    return found if isinstance(found, OutcomeRecord) else None  # not a tombstone


async def read_progress(runner: Inspected, job_id: str, incarnation: str | None) -> Any:
    """The last progress value the run's ``incarnation`` reported (None when
    there is none); Unreadable when its record does not decode."""
    if incarnation is None:
        return None
    key = runner.layout.progress(job_id, incarnation)
    try:
        stored = await runner.store.get(key)
    except NotFound:
        return None
    try:
        raw = unpack(stored.data)
        if not isinstance(raw, dict) or "value" not in raw:
            raise ValueError("not a progress record")
    except Exception as exc:
        return Unreadable(key, describe(exc))
    return raw["value"]


async def list_memos(runner: Inspected, job_id: str, *, values: bool = True) -> list[Memo]:
    """Every memo of every incarnation of the run, in key order."""
    prefix = runner.layout.memos(job_id)
    infos = [info async for info in runner.store.scan(prefix)]

    async def one(info: ObjectInfo) -> Memo:
        incarnation, _, key = info.key[len(prefix) :].partition("/")
        value: Any = None
        why = None
        if values:
            try:
                value = unpack((await runner.store.get(info.key)).data)
            except NotFound:
                value = None
            except Exception as exc:
                why = describe(exc)
        return Memo(info.key, incarnation, key, info.size, info.modified, value, why)

    return await _bounded(one(info) for info in infos)


async def detail(runner: Inspected, job_id: str) -> Detail:
    """The job's queue record, outcome, progress, memos and attempt history,
    and which of them would not decode. Raises InspectError when the store
    knows nothing of the id."""
    _check_id(job_id)
    queued, outcome, memos = await asyncio.gather(
        _read_queued(runner, job_id),
        read_outcome(runner, job_id),
        list_memos(runner, job_id),
    )
    input_json: Any = None
    incarnation: str | None = None
    if isinstance(queued, JobRecord):
        with contextlib.suppress(MalformedPayload):
            envelope = Envelope.decode(queued.payload)
            incarnation = envelope.incarnation
            with contextlib.suppress(ValueError):
                input_json = json.loads(envelope.input)
    if incarnation is None and isinstance(outcome, OutcomeRecord):
        incarnation = outcome.incarnation or None
    recorded = outcome if isinstance(outcome, OutcomeRecord) else None
    progress, history = await asyncio.gather(
        read_progress(runner, job_id, incarnation),
        read_history(runner.store, runner.layout, job_id, incarnation, recorded),
    )
    if queued is None and outcome is None and progress is None and not memos:
        raise InspectError(f"no job {job_id} in {runner.store.location}")
    parts = {"queue": queued, "outcome": outcome, "progress": progress}
    unreadable = {part: item for part, item in parts.items() if isinstance(item, Unreadable)}
    found = Detail(
        job_id,
        None if isinstance(queued, Unreadable) else queued,
        None if isinstance(outcome, Unreadable) else outcome,
        None if isinstance(progress, Unreadable) else progress,
        memos,
        unreadable=unreadable,
    )
    found.incarnation = incarnation
    found.input = input_json
    found.history = history.attempts
    found.unreadable_attempts = [Unreadable(key, why) for key, why in history.unreadable]
    return found


CANDIDATES = 5
"""Ids an ambiguous prefix names in its error."""

_ID_PREFIX = re.compile(r"[0-9a-f]{4,64}")


async def resolve_id(runner: Inspected, prefix: str) -> str:
    """The id of the one run whose id is or starts with ``prefix`` (4 or more
    hex digits), for ``stepstone show``.

    It looks among outcome records (a LIST) and queue records (a page of the
    queue's listing, from where the prefix would sort). Raises InspectError
    when the prefix names several runs (naming a few) or none. A whole id
    found nowhere is returned as it is, for :func:`detail` to look further
    (a run's leftover memos) or say it knows no such job.
    """
    if not _ID_PREFIX.fullmatch(prefix):
        raise InspectError(
            f"not a job id or id prefix: {prefix[:80]!r} (expected 4 to 64 lowercase hex digits)"
        )
    outcomes = await runner.store.list(runner.layout.outcome(prefix), limit=CANDIDATES + 1)
    found = {runner.layout.run_id_of_outcome(info.key) for info in outcomes}
    queue = runner.queue
    if isinstance(queue, JobListing):
        page = await queue.list(cursor=_just_before(prefix), limit=CANDIDATES + 1)
        found.update(record.id for record in page.records if record.id.startswith(prefix))
    if prefix in found or len(found) == 1:
        return prefix if prefix in found else found.pop()
    if not found:
        with contextlib.suppress(ValueError):
            return check_run_id(prefix)
        raise InspectError(f"no job id starts with {prefix} in {runner.store.location}")
    some = sorted(found)[:CANDIDATES]
    shown = ", ".join(job_id[: len(prefix) + 8] + "…" for job_id in some)
    more = ", and more" if len(found) > len(some) else ""
    raise InspectError(f"{prefix} names more than one job ({shown}{more}); give more of the id")


def _just_before(prefix: str) -> str | None:
    """A listing cursor after which the first ids are those starting with
    ``prefix`` (a queue lists ids after its cursor, in order)."""
    head, last = prefix[:-1], prefix[-1]
    if last == "0":
        return head or None
    # '~' sorts after every character an id may hold.
    return head + chr(ord(last) - 1) + "~"


async def _read_queued(runner: Inspected, job_id: str) -> JobRecord | Unreadable | None:
    try:
        return await runner.queue.get(job_id)
    except CorruptRecord as exc:
        return Unreadable(exc.key, str(exc).removesuffix(f" (record {exc.key})"))


async def iter_outcomes(
    runner: Inspected, *, older_than: float | None = None
) -> AsyncIterator[ObjectInfo]:
    """The outcome objects, in key order (one LIST per thousand); with
    ``older_than``, only those last modified before that epoch time."""
    async for info in runner.store.scan(runner.layout.outcomes()):
        if older_than is None or info.modified <= older_than:
            yield info


async def read_outcomes(
    runner: Inspected, infos: Iterable[ObjectInfo]
) -> list[OutcomeRecord | Unreadable]:
    """The records behind listed outcome objects, or what kept each from being
    read; those gone since the listing are left out."""
    found = await _bounded(_read_outcome_at(runner, info.key) for info in infos)
    return [record for record in found if record is not None]


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
    dead = [row.id for row in rows if row.state is JobStatus.DEAD]
    beside: set[str] = set()
    for job_id, outcome in zip(
        dead, await _bounded(read_outcome(runner, job_id) for job_id in dead), strict=True
    ):
        if isinstance(outcome, Unreadable):
            unreadable[outcome.key] = outcome
        elif outcome is not None:
            beside.add(job_id)
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
        if (self.kind is None or row.name == self.kind) and (
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
        raise _lacks(
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
        name=record.kind,
        state=record.status,
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
        name=record.name,
        state=record.status,
        attempts=record.attempts,
        updated=record.finished_at,
        source="outcome",
        last_error=None if record.error is None else record.error.message,
        submitted=record.submitted_at or record.finished_at,
    )


async def queue_counts(runner: Inspected) -> dict[str, int]:
    """Queue records by status (no outcome is read: a LIST per thousand records)."""
    if not isinstance(runner.queue, JobCounts):
        raise _lacks(runner.queue, "count its jobs")
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


async def retry(runner: Inspected, job_id: str) -> Unreadable | None:
    """Run a dead job again: remove its failed outcome, then requeue it.

    The claim the run died in, which the outcome describes, is first written
    to the run's attempt history as a record of its own. The outcome goes
    before the requeue because it is the run's answer: a worker that
    claims a keyed job (or a job claimed before) and finds an outcome settles
    without running, and a submit of the same key answers from it. Cut short
    between the two, the job is dead with no outcome; retrying again finishes
    the job. The requeued job keeps its incarnation, so the steps it finished
    before it died replay from their memos instead of running again.

    An outcome that will not decode is removed too (a dead job's run did not
    succeed, so it cannot be an answer worth keeping) and returned, for the
    caller to say so.
    """
    _check_id(job_id)
    queue = runner.queue
    if not isinstance(queue, DeadJobRequeue):
        raise _lacks(queue, "requeue a dead job")
    queued = await queue.get(job_id)
    if queued is None:
        outcome = await read_outcome(runner, job_id)
        if outcome is None:
            raise InspectError(f"no job {job_id} in {runner.store.location}")
        raise InspectError(
            f"job {job_id} has {_ended(outcome)} and left the queue; only a dead job can be retried"
        )
    if queued.status is not JobStatus.DEAD:
        raise InspectError(
            f"job {job_id} is {queued.status}, not dead; only a dead job can be retried"
        )
    outcome = await read_outcome(runner, job_id)
    if isinstance(outcome, OutcomeRecord) and outcome.status is JobStatus.SUCCEEDED:
        raise InspectError(f"job {job_id} succeeded; its outcome is kept and it is not retried")
    if isinstance(outcome, OutcomeRecord):
        # The outcome describes the claim the run died in: keep that in its history.
        await keep_final_attempt(runner.store, runner.layout, outcome)
    if outcome is not None:
        await runner.store.delete(runner.layout.outcome(job_id))
    if not await queue.requeue(job_id):
        raise InspectError(f"job {job_id} is no longer dead; it was not requeued")
    return outcome if isinstance(outcome, Unreadable) else None


@dataclass(frozen=True, slots=True)
class Retried:
    """What :func:`retry_many` did: the jobs requeued, why each other one was
    not, and the outcome records removed that would not decode."""

    requeued: list[str]
    refused: dict[str, str]
    unreadable: list[Unreadable]


async def retry_many(runner: Inspected, job_ids: Iterable[str]) -> Retried:
    """Retry each dead job as :func:`retry` does, ``READ_CONCURRENCY`` at a
    time. A job that cannot be retried (it is no longer dead, the store
    refuses) is noted with why, and the others go on."""
    refused: dict[str, str] = {}

    async def one(job_id: str) -> tuple[str, Unreadable | None]:
        try:
            return job_id, await retry(runner, job_id)
        except (InspectError, StoreError, QueueError) as exc:
            refused[job_id] = str(exc)
            return job_id, None

    done = await _bounded(one(job_id) for job_id in job_ids)
    return Retried(
        [job_id for job_id, _ in done if job_id not in refused],
        refused,
        [removed for _, removed in done if removed is not None],
    )


def _ended(outcome: OutcomeRecord | Unreadable) -> str:
    """How a run with this outcome ended, for a message."""
    if isinstance(outcome, Unreadable):
        return f"ended with an outcome that cannot be read ({outcome.key}: {outcome.reason})"
    return f"finished ({outcome.status.value})"


async def cancel(runner: Inspected, job_id: str) -> str:
    """Cancel a live job, or discard a dead one from the queue; returns what was done.

    The outcome is read first: a run that has one has ended (a dead run
    keeps its queue record beside it), and cancelling over an outcome that
    will not decode would have nothing to compare with.
    """
    _check_id(job_id)
    outcome = await read_outcome(runner, job_id)
    if outcome is None:
        if await runner.cancel(job_id):
            return "cancelled"
        outcome = await read_outcome(runner, job_id)  # it ended meanwhile, or never was
    queued = await runner.queue.get(job_id)
    if queued is not None and queued.status is JobStatus.DEAD:
        await runner.queue.cancel(job_id)
        return "discarded"
    if outcome is not None:
        raise InspectError(f"job {job_id} has already {_ended(outcome)}")
    raise InspectError(f"no job {job_id} in {runner.store.location}")


async def purge(
    runner: Inspected,
    older_than: float,
    *,
    dry_run: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
) -> list[str]:
    """Remove finished runs (outcome, memos, progress) whose outcome is more
    than ``older_than`` seconds old by the runner's clock; returns their ids.

    Each goes through :func:`workflow.retention.sweep_one`, what the runner's
    own retention sweep does: the outcome goes last, so a purge cut short
    leaves runs that still answer and a rerun finishes it; the tombstones
    of runs swept earlier that are past the age go too (they are no runs).
    """
    if older_than < 0:
        raise InspectError("the age must not be negative")
    cutoff = runner.clock.now() - older_than
    infos = [info async for info in iter_outcomes(runner, older_than=cutoff)]
    total = len(infos)
    if on_progress is not None:
        on_progress(0, total)
    done = 0
    semaphore = asyncio.Semaphore(READ_CONCURRENCY)

    async def one(info: ObjectInfo) -> str | None:
        nonlocal done
        async with semaphore:
            removed = await sweep_one(runner, info, dry_run=dry_run)
        done += 1
        if on_progress is not None:
            on_progress(done, total)
        return runner.layout.run_id_of_outcome(info.key) if removed else None

    return [run_id for run_id in await asyncio.gather(*(one(i) for i in infos)) if run_id]


def _check_id(job_id: str) -> None:
    try:
        check_run_id(job_id)
    except ValueError as exc:
        raise InspectError(str(exc)) from None


async def _bounded(coros: Iterable[Any]) -> list[Any]:
    semaphore = asyncio.Semaphore(READ_CONCURRENCY)

    async def guarded(coro: Any) -> Any:
        async with semaphore:
            return await coro

    return list(await asyncio.gather(*(guarded(c) for c in coros)))

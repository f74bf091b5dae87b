"""Runs found by their attributes: ``runner.runs(attributes=...)``,
``stepstone ls --attr``, the web view's filter.

A listing by attributes reads the index (:mod:`stepstone.records.attributes`),
not every run: one LIST per thousand entries of each attribute asked for,
then, newest first, the records of the runs every one of them names: a GET
of the outcome record for a finished run, and a GET of the queue record for
a live one (and for a failed one, which may be dead). What it costs grows
with the runs that match, not with the runs in the bucket.

Each entry is checked against the run's records: it counts while the
incarnation it names is the run's (its outcome's, or its queue record's).
An entry whose run has neither (the submit that wrote it crashed before it
enqueued, or it joined a run already there and could not take it back) is
left out; one that has stood ``ORPHAN_AGE`` is deleted by the listing that
finds it, so it is read once, not by every listing after.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

from stepstone.errors import InspectError
from stepstone.ops.listing import (
    CLOCK_SLACK,
    Listing,
    Newest,
    RunFilter,
    RunSummary,
    finished_row,
    list_runs,
    queued_row,
)
from stepstone.ops.reads import Inspected, Unreadable, bounded, payloads_of, read_outcome
from stepstone.records.attributes import (
    ORPHAN_AGE,
    Entry,
    check_attributes,
    entry_of,
    values_prefix,
)
from stepstone.records.envelope import incarnation_of
from stepstone.records.outcome import OutcomeRecord
from stepstone.runtime import CorruptRecord
from stepstone.runtime.status import JobStatus
from stepstone.store import NotFound, ObjectInfo, PreconditionFailed

_PAGE = 100
"""Runs read at a time (fewer when fewer rows are wanted)."""


async def find_runs(runner: Inspected, chosen: RunFilter, *, limit: int | None = 100) -> Listing:
    """The runs ``chosen`` takes, newest first (as :func:`list_runs` lists
    them): by the index when it names attributes, else by :func:`list_runs`."""
    if not chosen.attributes:
        return await list_runs(runner, chosen, limit=limit)
    return await list_by_attributes(runner, chosen, limit=limit)


@dataclass(frozen=True, slots=True)
class _Candidate:
    """A run every attribute asked for names: its entries, as listed."""

    entry: Entry
    infos: tuple[ObjectInfo, ...]

    @property
    def written(self) -> float:
        """When its first entry was written (the store's clock): no later
        than its submit, give or take the clocks' skew."""
        return min(info.modified for info in self.infos)


async def list_by_attributes(
    runner: Inspected, chosen: RunFilter, *, limit: int | None = 100
) -> Listing:
    """The runs with every attribute of ``chosen.attributes`` that the rest
    of ``chosen`` takes, newest first by when they were submitted, at most
    ``limit`` (None: all); see the module docstring for what it reads."""
    if limit is not None and limit < 1:
        raise InspectError(f"--limit must be at least 1, got {limit}")
    wanted = check_attributes(chosen.attributes or {}, where="the attributes asked for")
    if not wanted:
        raise InspectError("a listing by attributes needs at least one attribute")
    candidates = await _candidates(runner, wanted)
    since = chosen.since
    if since is not None:
        # (a run submitted since then wrote its entries since then, to the clocks' skew)
        candidates = [c for c in candidates if c.written >= since - CLOCK_SLACK]
    candidates.sort(key=lambda c: (c.written, c.entry.run_id), reverse=True)
    found = Newest(chosen, limit)
    unreadable: dict[str, Unreadable] = {}
    page = min(_PAGE, limit or _PAGE)
    start = 0
    while start < len(candidates) and not found.newer_than(candidates[start].written):
        chunk = candidates[start : start + page]
        rows = await bounded(_row(runner, c, chosen.status) for c in chunk)
        for row in rows:
            if isinstance(row, Unreadable):
                unreadable[row.key] = row
            elif row is not None and (chosen.status is None or row.status is chosen.status):
                found.offer(dataclasses.replace(row, attributes={**row.attributes, **wanted}))
        start += page
    return Listing(found.newest(), list(unreadable.values()))


async def _candidates(runner: Inspected, wanted: dict[str, str]) -> list[_Candidate]:
    """The runs (by incarnation) whose entries name every attribute of
    ``wanted``: one listing of each attribute's prefix, the shortest first
    read whole and the others only to check those."""
    listed: list[dict[Entry, ObjectInfo]] = []
    for name, value in sorted(wanted.items()):
        prefix = values_prefix(runner.layout, name, value)
        entries: dict[Entry, ObjectInfo] = {}
        async for info in runner.store.scan(prefix):
            entry = entry_of(prefix, info.key)
            if entry is not None:
                entries[entry] = info
        listed.append(entries)
    listed.sort(key=len)
    first, rest = listed[0], listed[1:]
    return [
        _Candidate(entry, (info, *(other[entry] for other in rest)))
        for entry, info in first.items()
        if all(entry in other for other in rest)
    ]


async def _row(
    runner: Inspected, candidate: _Candidate, status: JobStatus | None
) -> RunSummary | Unreadable | None:
    """The run's row, from the record of the incarnation its entries name;
    None when it has none (or none of ``status``, which is all that was read)."""
    entry = candidate.entry
    payloads = payloads_of(runner)
    outcome: OutcomeRecord | None = None
    if status is None or status.finished or status is JobStatus.DEAD:
        read = await read_outcome(runner, entry.run_id)
        if isinstance(read, Unreadable):
            return read
        if read is not None and read.incarnation == entry.incarnation:
            outcome = read
        finished = status is not None and status.finished  # (as ls lists it: the outcome)
        if outcome is not None and (finished or outcome.status is not JobStatus.FAILED):
            return finished_row(outcome, payloads)
    if status is None or status.queued or outcome is not None:
        try:
            record = await runner.queue.get(entry.run_id)
        except CorruptRecord as exc:
            return Unreadable(entry.run_id, str(exc))
        incarnation = None if record is None else incarnation_of(record.payload)
        if record is not None and incarnation is None:
            return Unreadable(entry.run_id, "its queue record's payload is no job envelope")
        if record is not None and incarnation == entry.incarnation:
            row = queued_row(record, payloads)
            both = outcome is not None and record.status is JobStatus.DEAD
            return dataclasses.replace(row, source="queue+outcome") if both else row
        if outcome is not None:
            return finished_row(outcome, payloads)
        if status is None and record is None:
            await _forget(runner, candidate)
    return None


async def _forget(runner: Inspected, candidate: _Candidate) -> None:
    """Delete the entries of a run that has no record of their incarnation,
    once they have stood ``ORPHAN_AGE`` (each only as it was listed)."""
    old = runner.clock.now() - ORPHAN_AGE
    for info in candidate.infos:
        if info.modified < old:
            with contextlib.suppress(NotFound, PreconditionFailed):
                await runner.store.delete(info.key, if_match=info.etag)

"""Which runs may still take the old path of a patch: ``stepstone ls --patch``.

A patch (``ctx.patched("change-id")``, :mod:`stepstone.execute.patches`)
keeps runs that got past its point on the old code on the old path. Its old
path can go (``ctx.deprecate_patch``) once no run may take it any more: no
run that is not finished (live, or dead and so retryable) has decided for
the old path, or not decided yet. A run that has not decided yet either has not
reached the point (it takes the new path there) or got past it on the old
code and has not gone on since (a durable wait): it takes the old path when
it does. Which, the store says only once some run has decided, recording
where in its history it met the patch: a run whose history goes past that
is past it. Both kinds count as runs that may: deprecating is safe when the
list is empty. A finished run takes no path; a replay of one does
(``runner.replay``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from stepstone.ops.listing import RunFilter, RunSummary, queued_runs
from stepstone.ops.reads import Inspected, Unreadable, bounded
from stepstone.records.codec import unpack
from stepstone.records.envelope import Envelope
from stepstone.records.layout import position_of, step_key
from stepstone.runtime.errors import MalformedPayload
from stepstone.runtime.queue import JobRecord

OLD = "old"
"""The run decided for the old path."""
NEW = "new"
"""The run decided for the new path."""
PAST = "past"
"""The run has not decided, but its history already went past the point
where the runs that decided met the patch: it takes the old path there
when it goes on (it got past on the old code)."""
NOT_YET = "not yet"
"""The run has not reached the patch's point (on code that asks)."""
UNPLACED = "unplaced"
"""The run has not decided, and no run of its kind has, to say where the
patch's point is: it may be before it or past it."""


@dataclass(frozen=True, slots=True)
class PatchPaths:
    """The runs not finished that the filter chose, by the path of the patch
    they took: ``old``, ``past`` and ``not_yet`` may still need the old code."""

    change_id: str
    old: list[RunSummary]
    not_yet: list[RunSummary]
    new: list[RunSummary]
    unreadable: list[Unreadable]
    past: list[RunSummary] = field(default_factory=list)
    """Runs that have not decided, whose history is past the patch's point
    (as far as the runs of their kind that decided say where it is): they
    take the old path when they go on."""
    unplaced: list[RunSummary] = field(default_factory=list)
    """Runs that have not decided, of a kind no listed run of which has: the
    store does not say whether they are before the patch's point or past it."""
    points: dict[str, int] = field(default_factory=dict)
    """By kind, where in a run's history the runs that decided met the patch
    (the calls before it; the latest, if they met it at several)."""

    @property
    def may_take_the_old_path(self) -> list[RunSummary]:
        return [*self.old, *self.past, *self.not_yet, *self.unplaced]


@dataclass(frozen=True, slots=True)
class _Seen:
    """What one run's memos say of the patch: its first decision (None:
    none yet), where it met it, and the last position of its history."""

    decided: bool | None
    at: int | None
    last: int


async def patch_paths(runner: Inspected, change_id: str, chosen: RunFilter) -> PatchPaths:
    """The runs not finished that ``chosen`` takes (its status, when given,
    must be one of the queue's), by the path of patch ``change_id`` each
    took. A run that has not decided is ``past`` the patch when its history
    holds a call after the point where the runs of its kind that did met it
    (it got there on the old code, and takes the old path when it goes on),
    else ``not_yet``; ``unplaced`` when no run of its kind decided. One GET
    per queue record, a LIST of each run's memos (its history and its
    decisions) and a GET per decision."""
    if not change_id:
        raise ValueError("a patch's change id must be a non-empty str")
    queued, unreadable = await queued_runs(runner, chosen)
    # A patch's decisions are !patch.<change-id>@1, @2, ...
    decision = step_key(change_id, 1, internal="patch").removesuffix("1")

    async def seen(record: JobRecord) -> _Seen:
        try:
            incarnation = Envelope.decode(record.payload).incarnation
        except MalformedPayload:
            return _Seen(None, None, 0)
        memos = runner.layout.memos(record.id, incarnation)
        decided: list[tuple[int, bool, int | None]] = []
        last = 0
        async for info in runner.store.scan(memos):
            segment = info.key[len(memos) :]
            position = position_of(segment)
            if position is not None:
                last = max(last, position)
            elif segment.startswith(decision) and segment[len(decision) :].isdigit():
                with contextlib.suppress(Exception):  # (one that does not decode decides nothing)
                    said = unpack((await runner.store.get(info.key)).data)
                    at = said.get("at")
                    at = at if isinstance(at, int) and not isinstance(at, bool) else None
                    decided.append((int(segment[len(decision) :]), bool(said["patched"]), at))
        if not decided:
            return _Seen(None, None, last)
        first = min(decided)
        return _Seen(all(patched for _, patched, _ in decided), first[2], last)

    found = await bounded(seen(record) for _, record in queued)
    points: dict[str, int] = {}
    for (row, _), s in zip(queued, found, strict=True):
        if s.decided is not None and s.at is not None:
            points[row.kind] = max(points.get(row.kind, s.at), s.at)
    by: dict[str, list[RunSummary]] = {OLD: [], NEW: [], PAST: [], NOT_YET: [], UNPLACED: []}
    for (row, _), s in zip(queued, found, strict=True):
        point = points.get(row.kind)
        if s.decided is not None:
            by[NEW if s.decided else OLD].append(row)
        elif point is None:
            by[UNPLACED].append(row)
        else:
            by[PAST if s.last > point else NOT_YET].append(row)
    return PatchPaths(
        change_id,
        by[OLD],
        by[NOT_YET],
        by[NEW],
        unreadable,
        past=by[PAST],
        unplaced=by[UNPLACED],
        points=points,
    )

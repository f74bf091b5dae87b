"""Which runs may still take the old path of a patch: ``stepstone ls --patch``.

A patch (``ctx.patched("change-id")``, :mod:`stepstone.execute.patches`)
keeps runs that got past its point on the old code on the old path. Its old
path can go (``ctx.deprecate_patch``) once no run may take it any more: no
run that is not finished (live, or dead and so retryable) has decided for
the old path, or not decided yet. A run that has not reached the point may
take either (it takes the new one unless its history already went past), so
it is counted as one that may: deprecating is safe when the list is empty.
A finished run takes no path; a replay of one does (``runner.replay``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from stepstone.ops.listing import RunFilter, RunSummary, queued_runs
from stepstone.ops.reads import Inspected, Unreadable, bounded
from stepstone.records.codec import unpack
from stepstone.records.envelope import Envelope
from stepstone.records.layout import step_key
from stepstone.runtime.errors import MalformedPayload
from stepstone.runtime.queue import JobRecord

OLD = "old"
"""The run decided for the old path."""
NEW = "new"
"""The run decided for the new path."""
NOT_YET = "not yet"
"""The run has not reached the patch's point (on code that asks)."""


@dataclass(frozen=True, slots=True)
class PatchPaths:
    """The runs not finished that the filter chose, by the path of the patch
    they took: ``old`` and ``not_yet`` may still need the old code."""

    change_id: str
    old: list[RunSummary]
    not_yet: list[RunSummary]
    new: list[RunSummary]
    unreadable: list[Unreadable]

    @property
    def may_take_the_old_path(self) -> list[RunSummary]:
        return [*self.old, *self.not_yet]


async def patch_paths(runner: Inspected, change_id: str, chosen: RunFilter) -> PatchPaths:
    """The runs not finished that ``chosen`` takes (its status, when given,
    must be one of the queue's), by the path of patch ``change_id`` each
    took. One GET per queue record, and a LIST per run (its decisions)."""
    if not change_id:
        raise ValueError("a patch's change id must be a non-empty str")
    queued, unreadable = await queued_runs(runner, chosen)
    # A patch's decisions are !patch.<change-id>@1, @2, ...: list them all.
    prefix = step_key(change_id, 1, internal="patch").removesuffix("1")

    async def path_of(record: JobRecord) -> str:
        try:
            incarnation = Envelope.decode(record.payload).incarnation
        except MalformedPayload:
            return NOT_YET
        memos = runner.layout.memos(record.id, incarnation)
        decided: list[bool] = []
        async for info in runner.store.scan(memos + prefix):
            with contextlib.suppress(Exception):  # (one that does not decode decides nothing)
                decided.append(bool(unpack((await runner.store.get(info.key)).data)["patched"]))
        if not decided:
            return NOT_YET
        return OLD if not all(decided) else NEW

    paths = await bounded(path_of(record) for _, record in queued)
    by: dict[str, list[RunSummary]] = {OLD: [], NEW: [], NOT_YET: []}
    for (row, _), path in zip(queued, paths, strict=True):
        by[path].append(row)
    return PatchPaths(change_id, by[OLD], by[NOT_YET], by[NEW], unreadable)

"""The sweep of the index of attributes: entries that name no run.

An entry is written before the run it finds (:mod:`stepstone.records.attributes`),
so a submit killed between the two leaves an entry whose run never came to
be; the sweep of a run removes the entries it knows of, not those. Once an
hour the sweeper walks the index (a LIST per thousand entries) beside the
outcome records (a LIST per thousand runs), and deletes each entry older
than ``ORPHAN_AGE`` whose run has no outcome and no queue record (a GET of
its queue record, for a run without an outcome: a live one, or none; a
queue that cannot look a run up, SQS without an id store, keeps them).
"""

from __future__ import annotations

import contextlib
from typing import Protocol

from stepstone.records.attributes import INDEX, ORPHAN_AGE
from stepstone.records.layout import Layout
from stepstone.runtime import CorruptRecord, QueueError
from stepstone.runtime.clock import Clock
from stepstone.runtime.queue import LeaseQueue
from stepstone.store import NotFound, ObjectStore, PreconditionFailed
from stepstone.store.keys import join

INDEX_SWEEP_EVERY = 3600.0
"""Seconds between two sweeps of the index, at most."""


class Indexed(Protocol):
    """Where runs and their index are kept: a store, a layout in it, their
    queue, a clock (a JobRunner is one)."""

    @property
    def store(self) -> ObjectStore: ...

    @property
    def queue(self) -> LeaseQueue: ...

    @property
    def layout(self) -> Layout: ...

    @property
    def clock(self) -> Clock: ...


async def sweep_index(runs: Indexed, *, older_than: float = ORPHAN_AGE) -> int:
    """Delete the index entries written more than ``older_than`` seconds ago
    (by the store's clock) that name a run with neither an outcome record
    nor a queue record; returns how many."""
    store, layout = runs.store, runs.layout
    cutoff = runs.clock.now() - older_than
    root = join(layout.prefix, INDEX) + "/"
    finished = {layout.run_id_of_outcome(info.key) async for info in store.scan(layout.outcomes())}
    queued: dict[str, bool] = {}
    removed = 0
    async for info in store.scan(root):
        parts = info.key[len(root) :].split("/")
        if info.modified > cutoff or len(parts) != 4 or parts[2] in finished:
            continue
        run_id = parts[2]
        if run_id not in queued:
            try:
                queued[run_id] = await runs.queue.get(run_id) is not None
            except CorruptRecord:
                queued[run_id] = True  # (its record is there, if unreadable)
            except QueueError:
                queued[run_id] = True  # (a queue that cannot say: left, as if live)
        if not queued[run_id]:
            with contextlib.suppress(NotFound, PreconditionFailed):
                await store.delete(info.key, if_match=info.etag)
                removed += 1
    return removed

"""A run's family: the runs that wait for its end, and the children it submitted.

```
waiters/<run_id>            the runs that joined this run as their child
                            after another had submitted it
children/<run_id>/<child>   a child this run submitted (an empty object)
```

The run that creates a child is named in the child's envelope
and woken when the child ends. A run can also join a child it did not create
(``ctx.submit`` of a keyed job that an API, or another parent, submitted
first); nothing in the child names it, so the join records it in the child's
``waiters`` object, and the child's end wakes every run listed there as well.
The join writes before its parent looks at the child's outcome, and the
child's end reads after writing its outcome, so whichever comes first, the
other sees it: no waiter sleeps through its child's end.

Each child a run creates is written under it before the child is enqueued,
so a cancel of the run finds every child that may exist and cancels it with
the run (:mod:`stepstone.execute.cancelling`). Both records go with their
run when retention sweeps it.
"""

from __future__ import annotations

import contextlib

from stepstone.records.codec import pack, unpack
from stepstone.records.envelope import Envelope
from stepstone.records.layout import Layout
from stepstone.runtime.capabilities import Waking
from stepstone.runtime.status import JobStatus
from stepstone.store import AlreadyExists, NotFound, ObjectStore, PreconditionFailed

SWAP_TRIES = 20
"""Compare-and-swap rounds a join makes to add itself to a run's waiters."""


class Family:
    """The waiters and children records of runs under one layout in one store."""

    def __init__(self, store: ObjectStore, layout: Layout) -> None:
        self.store = store
        self.layout = layout

    async def add_waiter(self, run_id: str, waiter: str) -> None:
        """Record that ``waiter`` waits for the end of ``run_id``."""
        key = self.layout.waiters(run_id)
        for _ in range(SWAP_TRIES):
            try:
                stored = await self.store.get(key)
            except NotFound:
                with contextlib.suppress(AlreadyExists):
                    await self.store.put_if_absent(key, _encode([waiter]))
                    return
                continue
            runs = _decode(stored.data)
            if waiter in runs:
                return
            with contextlib.suppress(PreconditionFailed, NotFound):
                await self.store.put_if_match(key, _encode([*runs, waiter]), stored.etag)
                return
        raise RuntimeError(f"run {run_id}: its waiters record kept changing; {waiter} not added")

    async def waiters(self, run_id: str) -> list[str]:
        """The runs that joined ``run_id`` and wait for its end (not its creator)."""
        try:
            stored = await self.store.get(self.layout.waiters(run_id))
        except NotFound:
            return []
        return _decode(stored.data)

    async def wake_waiters(
        self, waking: Waking, run_id: str, envelope: Envelope | None, *, succeeded: bool
    ) -> None:
        """Tell every run waiting for ``run_id``, which has ended, the parent
        that created it and every run that joined it: a waiter that awaits
        other children too is woken once the last of them has ended (its
        wait counts them: ``Wait.pending``), or at once when this one did
        not succeed, which may end its wait (``ctx.gather`` raises the first
        failure). Only a keyed run can be joined, so only its waiters record
        is read."""
        waiting = [] if envelope is None or envelope.parent is None else [envelope.parent]
        if envelope is not None and envelope.key is not None:
            waiting += [w for w in await self.waiters(run_id) if w not in waiting]
        arrived = run_id if succeeded else None
        for waiter in waiting:
            await waking.wake(waiter, JobStatus.WAITING_FOR_CHILDREN, arrived=arrived)

    async def add_child(self, parent: str, child: str) -> None:
        """Record that ``parent`` submits ``child`` (before it does)."""
        with contextlib.suppress(AlreadyExists):
            await self.store.put_if_absent(self.layout.child(parent, child), b"")

    async def children(self, parent: str) -> list[str]:
        """The children ``parent`` submitted (or was about to), by id."""
        prefix = self.layout.children(parent)
        return [info.key[len(prefix) :] async for info in self.store.scan(prefix)]


def _encode(runs: list[str]) -> bytes:
    return pack({"runs": runs})


def _decode(data: bytes) -> list[str]:
    """The run ids a waiters record lists; none when it lists none readable
    (the waiters then look again after ``wait_recheck``)."""
    try:
        runs = unpack(data)["runs"]
    except Exception:
        return []
    if not isinstance(runs, list):
        return []
    return [run for run in runs if isinstance(run, str)]

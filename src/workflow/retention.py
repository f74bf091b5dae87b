"""The retention sweep: a finished run's records go after the window.

It walks ``outcomes/`` (a LIST per thousand runs) and takes the objects'
own modification time from the listing, so deciding costs no GET. For each
run past the window it deletes the memos and events of every incarnation,
the progress record, and last the outcome: a sweep cut short leaves the
outcome, so a resubmission still answers from it, and the next sweep
finishes the job.

A sweep runs in each worker process every ``interval`` (by the runner's
clock; a FakeClock moving past it wakes the sweeper). Several processes
sweeping at once is harmless: every delete is idempotent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Protocol

from stepstone.runtime.clock import Clock, subscribe
from stepstone.store import ObjectStore

from .layout import Layout

log = logging.getLogger("stepstone.retention")


class Runs(Protocol):
    """Where runs are kept: a store, a layout in it, a clock (a JobRunner is one)."""

    @property
    def store(self) -> ObjectStore: ...

    @property
    def layout(self) -> Layout: ...

    @property
    def clock(self) -> Clock: ...


class Sweeper:
    """Sweeps ``runs`` every ``interval`` seconds of their clock."""

    def __init__(self, runs: Runs, retention: float, *, interval: float | None = None) -> None:
        if retention <= 0:
            raise ValueError(f"retention must be positive seconds, got {retention}")
        self.runs = runs
        self.retention = retention
        self.interval = interval if interval is not None else min(max(retention / 10, 1.0), 300.0)
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._unsubscribe: Callable[[], None] = lambda: None

    def start(self) -> None:
        self._wake = asyncio.Event()
        self._unsubscribe = subscribe(self.runs.clock, self._wake.set)
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="stepstone-sweeper")

    async def stop(self) -> None:
        self._unsubscribe()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        clock = self.runs.clock
        next_at = clock.now()
        while True:
            if clock.now() >= next_at:
                try:
                    swept = await sweep(self.runs, self.retention)
                    if swept:
                        log.info("retention sweep removed %d finished run(s)", swept)
                except Exception as exc:
                    log.warning("retention sweep failed (will try again): %s", exc)
                next_at = clock.now() + self.interval
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(0.01, next_at - clock.now()))


async def sweep(runs: Runs, retention: float) -> int:
    """Remove every run that finished more than ``retention`` seconds ago; returns how many."""
    store, layout = runs.store, runs.layout
    cutoff = runs.clock.now() - retention
    swept = 0
    # Removing as it goes keeps memory flat however many runs expire; it is
    # safe because the listing pages by start-after on keys, not by offset.
    async for info in store.scan(layout.outcomes()):
        if info.modified <= cutoff:
            await remove_run(runs, layout.run_id_of_outcome(info.key))
            swept += 1
    return swept


async def remove_run(runs: Runs, run_id: str) -> None:
    """Delete a run's memos and events, its progress, and its outcome last."""
    store, layout = runs.store, runs.layout
    keys = [info.key async for info in store.scan(layout.memos(run_id))]
    keys += [info.key async for info in store.scan(layout.events(run_id))]
    await asyncio.gather(*(store.delete(key) for key in keys))
    await store.delete(layout.progress(run_id))
    await store.delete(layout.outcome(run_id))

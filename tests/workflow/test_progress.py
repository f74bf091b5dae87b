"""A run's progress record is its current attempt's: a zombie (its lease
lapsed and another worker took the run over) cannot overwrite it."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from wf_support import wait_until

from stepstone import Job, JobContext, JobRunner
from stepstone.records.outcome import OutcomeRecord
from stepstone.records.run_records import progress_value
from stepstone.store import MemoryStore
from stepstone.testing import FakeClock

DEADLINE = 10.0


class Gates:
    def __init__(self) -> None:
        self.zombie_started = asyncio.Event()
        self.wake_zombie = asyncio.Event()
        self.starts = 0


class ReportsWho(Job[int]):
    """Its first start stalls (a stopped worker), then reports progress and
    ends; its second (the takeover, on the same attempt) reports its own and
    ends first."""

    NAME: ClassVar[str] = "test.reports-who"

    async def run(self, ctx: JobContext) -> int:
        gates = ctx.state(Gates)
        gates.starts += 1
        start = gates.starts
        if start == 1:
            gates.zombie_started.set()
            await gates.wake_zombie.wait()
        ctx.progress({"by start": start})
        return start


def runner(store: MemoryStore, clock: FakeClock, gates: Gates, **kwargs: Any) -> JobRunner:
    return JobRunner(
        store, clock=clock, jobs=[ReportsWho], state=[gates], poll_interval=0.05, **kwargs
    )


async def test_a_zombie_does_not_overwrite_the_progress_of_the_worker_that_took_over(
    store: MemoryStore, clock: FakeClock
) -> None:
    gates = Gates()
    behind = FakeClock(clock.now())  # the zombie's clock never sees its lease lapse
    zombie = runner(store, behind, gates, lease=10, heartbeat=0)
    async with zombie:
        handle = await zombie.submit(ReportsWho())
        await wait_until(gates.zombie_started.is_set, DEADLINE)
        clock.advance(30)
        async with runner(store, clock, gates) as owner:
            assert await owner.handle(handle.id, ReportsWho).result(timeout=DEADLINE) == 2
        gates.wake_zombie.set()
        await wait_until(lambda: zombie.worker.stats.lost == 1, DEADLINE)

    outcome = (await store.get(owner.layout.outcome(handle.id))).data
    incarnation = OutcomeRecord.decode(outcome).incarnation
    stored = await store.get(owner.layout.progress(handle.id, incarnation))
    assert progress_value(stored.data) == {"by start": 2}, "the zombie overwrote the progress"

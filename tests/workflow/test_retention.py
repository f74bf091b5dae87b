"""The retention sweep and purge: a swept run is gone as a whole, and the sweep
keeps up with a busy store."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ClassVar

import pytest
from wf_jobs import Counters
from wf_support import wait_until

from stepstone import Job, JobContext, JobFailed, JobRunner, JobStatus, Permanent
from stepstone.ops.actions import purge
from stepstone.records.retention import REMOVE_AT_ONCE, sweep
from stepstone.store import MemoryStore, ObjectInfo
from stepstone.testing import FakeClock

BOTH_SUBMIT_ORDERS = True  # (conftest: keyed submits also in a remote store's order)

MakeRunner = Callable[..., JobRunner]
RUNS = 100
DEADLINE = 10.0
DAY_SECONDS = 86_400.0


class SlowDeletes(MemoryStore):
    """A MemoryStore whose deletes take a turn of the event loop, as every
    store's do (a round trip, a flush), counting those in flight at once."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock.now)
        self.in_flight = 0
        self.most_in_flight = 0

    async def delete(self, key: str, *, if_match: str | None = None) -> None:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0)
            await super().delete(key, if_match=if_match)
        finally:
            self.in_flight -= 1


async def test_expired_runs_are_removed_many_at_a_time(clock: FakeClock) -> None:
    """One run after another, a sweep removes fewer runs a second than a busy
    worker finishes, falls behind for good, and the store keeps growing."""
    store = SlowDeletes(clock)
    runner = JobRunner(store, clock=clock)
    for n in range(RUNS):
        run_id = f"{n:032x}"
        await store.put(runner.layout.memo(run_id, "0" * 16, "step"), b"memo")
        await store.put(runner.layout.outcome(run_id), b"outcome")
    clock.advance(61)
    assert await sweep(runner, retention=60) == RUNS
    assert [info.key async for info in store.scan("memos/")] == []
    assert store.most_in_flight == REMOVE_AT_ONCE  # one delete at a time per run


class FailsFirst(Job[int]):
    """Keyed; its first run fails for good, any later one succeeds."""

    NAME: ClassVar[str] = "test.fails-first"
    n: int

    def idempotency_key(self) -> str:
        return f"fails-first:{self.n}"

    async def run(self, ctx: JobContext) -> int:
        if ctx.state(Counters).hit(f"fails-first:{self.n}") == 1:
            raise Permanent("the first run fails")
        return self.n


@pytest.mark.parametrize("how", ["retention", "purge"])
async def test_a_swept_dead_run_is_gone_as_a_whole_and_its_key_runs_again(
    make_runner: MakeRunner, clock: FakeClock, how: str
) -> None:
    async with make_runner(
        jobs=[FailsFirst], retention=60 if how == "retention" else None
    ) as runner:
        first = await runner.submit(FailsFirst(n=1))
        with pytest.raises(JobFailed):
            await first.result(timeout=DEADLINE)
        record = await runner.queue.get(first.id)
        assert record is not None and record.status is JobStatus.DEAD
        clock.advance(61)
        if how == "purge":
            assert await purge(runner, older_than=60) == [first.id]

        async def swept() -> bool:
            gone = await runner.outcome(first.id, int) is None
            return gone and await runner.queue.get(first.id) is None

        await wait_until(swept, DEADLINE)
        again = await runner.submit(FailsFirst(n=1))
        assert again.newly_submitted and again.id == first.id
        assert await again.result(timeout=DEADLINE) == 1


class HeldListing(MemoryStore):
    """A MemoryStore whose first listing of outcomes waits for ``release``:
    a sweep round caught in the middle."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock.now)
        self.listing = asyncio.Event()
        self.release = asyncio.Event()

    async def list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int = 1000
    ) -> list[ObjectInfo]:
        if prefix == "outcomes/" and not self.release.is_set():
            self.listing.set()
            await self.release.wait()
        return await super().list(prefix, start_after=start_after, limit=limit)


async def test_a_clock_moved_during_a_sweep_round_brings_the_next_round_at_once(
    clock: FakeClock,
) -> None:
    """The sweeper wakes when its clock moves; a move while a round is under
    way (its cutoff taken before it) must bring the next round due at once,
    not an interval (up to five minutes) later."""
    store = HeldListing(clock)
    runner = JobRunner(store, clock=clock, retention=DAY_SECONDS)
    async with runner:
        await asyncio.wait_for(store.listing.wait(), DEADLINE)  # the first round, held
        await store.put(runner.layout.outcome("a" * 32), b"an outcome")
        clock.advance(2 * DAY_SECONDS)
        store.release.set()

        async def tombstoned() -> bool:
            return (await store.get(runner.layout.outcome("a" * 32))).data != b"an outcome"

        await wait_until(tombstoned, timeout=DEADLINE)

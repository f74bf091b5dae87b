"""A swept run is gone as a whole: its key runs again, and nothing of the
swept run (a zombie's late outcome above all) answers the next run."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from wf_jobs import Counters, Keyed, KeyedStep
from wf_support import wait_until

from stepstone import Job, JobContext, JobRunner
from stepstone.ops.actions import purge
from stepstone.records.envelope import Envelope
from stepstone.records.outcome import Tombstone, decode_outcome_key
from stepstone.records.retention import remove_run
from stepstone.store import MemoryStore, ObjectStore
from stepstone.testing import FakeClock

DEADLINE = 10.0


class CountedZombie(Job[int]):
    """One step whose value is how many times any run of it has executed the
    step; the first execution stalls on the Counters gate (a stopped worker)."""

    NAME: ClassVar[str] = "test.counted-zombie"

    def idempotency_key(self) -> str:
        return "counted-zombie"

    async def run(self, ctx: JobContext) -> int:
        counters = ctx.state(Counters)

        async def count() -> int:
            n = counters.hit("executions")
            if n == 1:
                counters.started.set()
                await counters.gate.wait()
            return n

        return await ctx.step("count", count)


@pytest.fixture(params=["memory", "real_s3"])
def swept_store(request: pytest.FixtureRequest) -> ObjectStore:
    """The store of the scenarios that need no look inside it: a MemoryStore,
    and a real S3 server (CI: Ceph RGW 16, whose DeleteObject ignores
    If-Match, so every fenced delete there goes through a husk)."""
    store: ObjectStore = request.getfixturevalue(
        "store" if request.param == "memory" else "real_s3_store"
    )
    return store


def runner(store: ObjectStore, clock: FakeClock, counters: Counters, **kwargs: Any) -> JobRunner:
    """A runner on the shared store (each with its own StoreQueue over it, as
    separate processes have) and the given clock."""
    kwargs.setdefault("poll_interval", 0.05)
    return JobRunner(store, clock=clock, state=[counters], retry_backoff=0.0, **kwargs)


@pytest.mark.parametrize("resumes", ["before the resubmit", "after the resubmit"])
async def test_a_zombie_of_a_swept_run_does_not_answer_the_keys_next_run(
    swept_store: ObjectStore, clock: FakeClock, counters: Counters, resumes: str
) -> None:
    """A worker stalls inside the step (no heartbeat, its clock behind: it
    never learns its lease lapsed); another worker takes the run over and
    finishes it; the run is purged; the key is submitted again; the zombie
    wakes and finishes. The next run runs its step and answers with its own
    value, not the zombie's."""
    store = swept_store
    behind = FakeClock(clock.now())
    zombie = runner(store, behind, counters, jobs=[CountedZombie], lease=10, heartbeat=0)
    async with zombie:
        await zombie.submit(CountedZombie())
        await wait_until(counters.started.is_set, DEADLINE)
        clock.advance(30)  # the lease lapsed, on every clock but the zombie's
        async with runner(store, clock, counters, jobs=[CountedZombie]) as owner:
            first = await owner.submit(CountedZombie())
            assert await first.result(timeout=DEADLINE) == 2
        await remove_run(owner, first.id)

        api = runner(store, clock, counters)
        if resumes == "before the resubmit":
            counters.gate.set()
            await wait_until(lambda: zombie.worker.stats.lost == 1, DEADLINE)
        second = await api.submit(CountedZombie())
        assert second.newly_submitted and second.id == first.id
        if resumes == "after the resubmit":
            counters.gate.set()
            await wait_until(lambda: zombie.worker.stats.lost == 1, DEADLINE)

    async with runner(store, clock, counters, jobs=[CountedZombie]):
        assert await second.result(timeout=DEADLINE) == 3, "the zombie's outcome answered"
    assert counters.counts["executions"] == 3


async def test_a_swept_run_leaves_a_tombstone_that_answers_nothing_and_goes_a_window_later(
    store: MemoryStore, clock: FakeClock, counters: Counters
) -> None:
    async with runner(store, clock, counters, jobs=[KeyedStep], retention=60) as worker:
        first = await worker.submit(KeyedStep(n=1))
        assert await first.result(timeout=DEADLINE) == 1
        key = worker.layout.outcome(first.id)
        record = await worker.outcome(first.id, int)
        assert record is not None

        clock.advance(61)
        await wait_until(lambda: _holds_tombstone(store, key), DEADLINE)
        tombstone = decode_outcome_key(store._objects[key].data)
        assert isinstance(tombstone, Tombstone) and tombstone.run_id == first.id
        assert await worker.outcome(first.id, int) is None
        assert await worker.status(first.id) is None
        assert [i async for i in store.scan(worker.layout.memos(first.id))] == []

        clock.advance(61)
        await wait_until(lambda: key not in store._objects, DEADLINE)

        # The key runs again, and its outcome is its own.
        again = await worker.submit(KeyedStep(n=1))
        assert again.newly_submitted
        assert await again.result(timeout=DEADLINE) == 2


def _holds_tombstone(store: MemoryStore, key: str) -> bool:
    entry = store._objects.get(key)
    return entry is not None and isinstance(decode_outcome_key(entry.data), Tombstone)


async def test_the_keys_next_run_replaces_the_tombstone_with_its_outcome(
    swept_store: ObjectStore, clock: FakeClock, counters: Counters
) -> None:
    store = swept_store
    async with runner(store, clock, counters, jobs=[KeyedStep]) as worker:
        first = await worker.submit(KeyedStep(n=2))
        assert await first.result(timeout=DEADLINE) == 1
        await remove_run(worker, first.id)
        second = await worker.submit(KeyedStep(n=2))
        assert second.newly_submitted
        assert await second.result(timeout=DEADLINE) == 2
        outcome = await worker.handle(second.id, KeyedStep).poll()
        assert outcome is not None and outcome.result == 2


async def test_purge_counts_runs_and_removes_the_tombstones_past_the_age(
    store: MemoryStore, clock: FakeClock, counters: Counters
) -> None:
    async with runner(store, clock, counters, jobs=[Keyed]) as worker:
        handles = [await worker.submit(Keyed(n=n)) for n in range(3)]
        assert [await h.result(timeout=DEADLINE) for h in handles] == [0, 1, 2]
    assert sorted(await purge(worker, 0, dry_run=True)) == sorted(h.id for h in handles)
    assert sorted(await purge(worker, 0)) == sorted(h.id for h in handles)
    keys = [worker.layout.outcome(h.id) for h in handles]
    assert all(_holds_tombstone(store, key) for key in keys)
    assert await purge(worker, 0) == [], "tombstones were counted as runs"
    assert not any(key in store._objects for key in keys)
    state = await worker.status(handles[0].id)
    assert state is None


async def test_a_run_claimed_again_after_it_was_swept_runs_and_records_its_outcome(
    store: MemoryStore, clock: FakeClock, counters: Counters
) -> None:
    """A claim that finds its own run's tombstone (the run was swept while
    its queue record stayed, as a dead run's does until it is retried) began
    after the sweep: the run runs, and its outcome replaces the tombstone."""
    api = runner(store, clock, counters)
    handle = await api.submit(Keyed(n=7))
    queued = await api.queue.get(handle.id)
    assert queued is not None
    incarnation = Envelope.decode(queued.payload).incarnation
    tombstone = Tombstone(handle.id, incarnation, clock.now())
    await store.put(api.layout.outcome(handle.id), tombstone.encode())
    async with runner(store, clock, counters, jobs=[Keyed]):
        assert await handle.result(timeout=DEADLINE) == 7
    assert counters.counts["keyed"] == 1
    outcome = await handle.poll()
    assert outcome is not None and outcome.result == 7

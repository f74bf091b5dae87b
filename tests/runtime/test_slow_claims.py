"""A claim the store is slow to answer costs the jobs already running nothing.

S3 can take seconds over one request (a burst of 409 conflicts on its key
is waited out inside the store), and a claim is such a request. The worker
waits on its claims; the leases of the jobs it runs meanwhile must go on
being renewed, and a claim that landed with part of its lease gone must be
renewed before the rest runs out, or a live worker's job lapses and runs
twice. A StoreQueue over a store that holds the claim's write (FaultyStore's
``hold``), and a FakeClock for the lease.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from test_worker import until

from stepstone.runtime import Attempt, FakeClock, StoreQueue, Worker
from stepstone.store import FaultyStore, MemoryStore

LEASE = 10.0


@dataclass
class Setup:
    clock: FakeClock
    store: FaultyStore
    queue: StoreQueue
    release: asyncio.Event

    def worker(self, heartbeat: float) -> Worker:
        """A worker whose handler runs until ``release`` is set."""

        async def handler(attempt: Attempt) -> None:
            await self.release.wait()

        worker = Worker(
            self.queue, lease=LEASE, heartbeat=heartbeat, poll_interval=0.05, concurrency=2
        )
        worker.register("k", handler)
        return worker

    async def lease_end(self, run_id: str) -> float | None:
        record = await self.queue.get(run_id)
        assert record is not None
        return record.lease_expires_at


@pytest.fixture
async def setup() -> AsyncIterator[Setup]:
    clock = FakeClock()
    store = FaultyStore(MemoryStore(), operations={"put_if_match"})
    yield Setup(clock, store, StoreQueue(store, clock=clock), asyncio.Event())


async def test_leases_are_renewed_while_a_claim_waits_on_the_store(setup: Setup) -> None:
    await setup.queue.enqueue(b"", kind="k", id="a")
    worker = setup.worker(heartbeat=0.01)
    await worker.start()
    let_claim_land = setup.store.hold("queue/jobs/b")  # the claim of b, its swap
    try:
        await until(lambda: worker.in_flight == 1, "a runs")
        await setup.queue.enqueue(b"", kind="k", id="b")
        setup.clock.advance(LEASE * 0.6)  # a's lease runs down while b's claim waits

        async def renewed() -> bool:
            return await setup.lease_end("a") == setup.clock.now() + LEASE

        await until(renewed, "a's lease was renewed, the claim of b still waiting")
        assert worker.in_flight == 1
        let_claim_land()
        await until(lambda: worker.in_flight == 2, "b's claim landed and b runs")
        setup.release.set()
        await until(lambda: worker.stats.succeeded == 2, "both ended")
        assert worker.stats.claimed == 2 and worker.stats.lost == 0
    finally:
        let_claim_land()
        setup.release.set()
        await worker.stop(drain_timeout=0)


async def test_a_claim_that_outlasted_half_its_lease_holds_a_whole_one_as_it_runs(
    setup: Setup,
) -> None:
    """Its lease was set when the claim was sent: it is extended from its
    landing before the job runs, so no other claimer can take it as it starts."""
    let_claim_land = setup.store.hold("queue/jobs/a")
    await setup.queue.enqueue(b"", kind="k", id="a")
    worker = setup.worker(heartbeat=LEASE * 0.9)
    await worker.start()
    try:
        await until(lambda: setup.store.held > 0, "the claim of a was sent")
        setup.clock.advance(LEASE * 0.8)
        let_claim_land()
        await until(lambda: worker.in_flight == 1, "a runs")
        assert await setup.lease_end("a") == setup.clock.now() + LEASE
    finally:
        let_claim_land()
        setup.release.set()
        await worker.stop(drain_timeout=0)


async def test_a_claim_that_landed_late_is_renewed_by_its_margin(setup: Setup) -> None:
    """Less than half its lease gone: no extension, but its first heartbeat
    is due when as little is left as a heartbeat on schedule leaves, not a
    heartbeat after it landed (which would leave less, or none)."""
    let_claim_land = setup.store.hold("queue/jobs/a")
    await setup.queue.enqueue(b"", kind="k", id="a")
    worker = setup.worker(heartbeat=LEASE * 0.49)
    await worker.start()
    try:
        await until(lambda: setup.store.held > 0, "the claim of a was sent")
        setup.clock.advance(LEASE * 0.45)  # a beat leaves 0.51 of it: due 0.4 s after it lands
        let_claim_land()
        await until(lambda: worker.in_flight == 1, "a runs")

        async def renewed() -> bool:
            return await setup.lease_end("a") == setup.clock.now() + LEASE

        await until(renewed, "a's lease was renewed by its margin, not a heartbeat later")
    finally:
        let_claim_land()
        setup.release.set()
        await worker.stop(drain_timeout=0)


async def test_a_worker_never_claims_a_run_whose_renewal_is_under_way(setup: Setup) -> None:
    """The renewal may still land (it is fenced on the version it read); a
    claim of ours would race it and run the job twice in this process."""
    await setup.queue.enqueue(b"", kind="k", id="a")
    worker = setup.worker(heartbeat=0.01)
    await worker.start()
    await until(lambda: worker.in_flight == 1, "a runs")
    let_renewal_land = setup.store.hold("queue/jobs/a")
    try:
        setup.clock.advance(LEASE * 0.5)  # the next beat writes a longer lease, and waits
        await until(lambda: setup.store.held > 0, "a's renewal was sent")
        setup.clock.advance(LEASE)  # a's lease lapsed while its renewal waits
        await setup.queue.enqueue(b"", kind="k", id="b")
        await until(lambda: worker.in_flight == 2, "b runs")
        assert worker.stats.claimed == 2  # a once, b once: a was passed over
        let_renewal_land()
        setup.release.set()
        await until(lambda: worker.stats.succeeded == 2, "both ended")
        assert worker.stats.lost == 0
    finally:
        let_renewal_land()
        setup.release.set()
        await worker.stop(drain_timeout=0)


async def test_a_claim_that_landed_keeps_its_lease_while_the_rest_of_its_batch_waits() -> None:
    """A throttled process sends its writes at its share of the partition,
    seconds each: the claims of one batch land far apart. One that landed
    waits for the others before it is handed out; its lease is extended
    meanwhile, or it would lapse unrenewed and another process claim it."""
    lease = 1.0  # (its claims are looked at every quarter of it, real time)
    clock = FakeClock()
    store = FaultyStore(MemoryStore(), operations={"put_if_match"})
    queue = StoreQueue(store, clock=clock)
    release = asyncio.Event()

    async def handler(attempt: Attempt) -> None:
        await release.wait()

    worker = Worker(queue, lease=lease, heartbeat=lease / 3, poll_interval=0.05, concurrency=2)
    worker.register("k", handler)
    await queue.enqueue(b"", kind="k", id="a")
    await queue.enqueue(b"", kind="k", id="b")
    let_b_land = store.hold("queue/jobs/b")
    await worker.start()
    try:

        async def a_claimed() -> bool:
            record = await queue.get("a")
            return record is not None and record.lease_expires_at is not None

        await until(a_claimed, "the claim of a landed")
        await until(lambda: store.held > 0, "the claim of b was sent")
        first = await queue.get("a")
        assert first is not None and first.lease_expires_at is not None
        clock.advance(lease * 0.6)  # a, not handed out yet, has less than half left

        async def extended() -> bool:
            record = await queue.get("a")
            return record is not None and record.lease_expires_at == clock.now() + lease

        await until(extended, "a's lease was extended while b's claim waits")
        assert worker.in_flight == 0
        let_b_land()
        await until(lambda: worker.in_flight == 2, "both run")
        release.set()
        await until(lambda: worker.stats.succeeded == 2, "both ended")
        assert worker.stats.lost == 0
    finally:
        let_b_land()
        release.set()
        await worker.stop(drain_timeout=0)

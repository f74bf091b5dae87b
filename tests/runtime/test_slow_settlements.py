"""A settlement the store is slow to take is not undone by its own lease's renewals.

The heartbeat renews a lease while its attempt settles, and a renewal is
sent ahead of the process's other writes; a settlement's swap may wait for
its turn (a throttled partition, or a store that takes one write a second
per object). Every renewal that landed meanwhile moved the record past the
version the settlement swaps over: on a store limiting each object, an ack
lost to its own renewals three times was reported "no longer ours", and the
job ran again elsewhere. The changes of one record in one instance take
turns (stepstone.runtime.store_queue.transitions). A StoreQueue over a store
that holds the ack's delete (FaultyStore's ``hold``), counted beneath it.
"""

from __future__ import annotations

import asyncio
from typing import NamedTuple

from test_worker import until

from stepstone.runtime import Delivery, FakeClock, Settlement, StoreQueue
from stepstone.runtime.decision import Ack
from stepstone.store import CountingStore, FaultyStore, MemoryStore

LEASE = 10.0


class Claim(NamedTuple):
    """A run claimed on a StoreQueue whose ``holding`` calls can be held,
    counted beneath the holding (from the claim on)."""

    clock: FakeClock
    counted: CountingStore
    store: FaultyStore
    queue: StoreQueue
    delivery: Delivery

    @classmethod
    async def of(cls, run_id: str, *, holding: str) -> Claim:
        clock = FakeClock()
        counted = CountingStore(MemoryStore())
        store = FaultyStore(counted, operations={holding})
        queue = StoreQueue(store, clock=clock)
        await queue.enqueue(b"", kind="k", id=run_id)
        [delivery] = await queue.claim(1, lease=LEASE)
        counted.reset()
        return cls(clock, counted, store, queue, delivery)


async def test_a_renewal_due_while_the_ack_waits_waits_for_it_and_finds_the_job_settled() -> None:
    clock, counted, store, queue, delivery = await Claim.of("a", holding="delete")

    let_ack_land = store.hold("queue/jobs/a")
    ack = asyncio.create_task(queue.settle(delivery, Ack()))
    await until(lambda: store.held == 1, "the ack's delete waits on the store")
    clock.advance(LEASE * 0.6)  # the heartbeat's renewal is due and would write
    renewal = asyncio.create_task(queue.renew(delivery, LEASE))
    let_ack_land()

    assert await ack is Settlement.ACKED
    assert await renewal is None  # the job is settled: nothing left to renew
    assert await queue.get("a") is None
    # One delete, over the version the claim wrote: the renewal neither
    # landed before it nor wrote after it.
    assert counted.counts["DELETE"] == 1
    assert counted.counts["CONDITIONAL_PUT"] == 0


async def test_a_settlement_behind_a_renewal_swaps_over_the_version_the_renewal_wrote() -> None:
    clock, counted, store, queue, delivery = await Claim.of("a", holding="put_if_match")

    let_renewal_land = store.hold("queue/jobs/a")
    clock.advance(LEASE * 0.6)
    renewal = asyncio.create_task(queue.renew(delivery, LEASE))
    await until(lambda: store.held == 1, "the renewal's swap waits on the store")
    ack = asyncio.create_task(queue.settle(delivery, Ack()))
    let_renewal_land()

    assert await renewal == clock.now() + LEASE
    assert await ack is Settlement.ACKED
    assert counted.counts["CONDITIONAL_PUT"] == 1 and counted.counts["DELETE"] == 1  # none refused
    assert counted.counts["GET"] == 0  # the ack knew the renewal's version: no re-read
    assert await queue.get("a") is None

"""An idle worker on a bucket learns of another process's job from the
doorbell (a HEAD of an object every enqueue rewrites), not at its next
listing: stepstone.runtime.store_queue.doorbell.

Listings are made rare here (an hour apart), so a job found at all was
found by a ring. A second StoreQueue on the bucket stands for another
process (moto S3, as in the contract suite); benchmarks/pickup.py uses real
worker processes.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from stepstone.runtime import Attempt
from stepstone.runtime.store_queue import StoreQueue, doorbell
from stepstone.runtime.store_queue.doorbell import RING_EVERY, Doorbell
from stepstone.runtime.worker import Worker
from stepstone.store import MemoryStore, ObjectStore
from stepstone.testing import wait_until

RARELY = 3600.0
"""Seconds between listings: longer than any test waits."""


async def until(condition: Callable[[], object], what: str, deadline: float = 20.0) -> None:
    await wait_until(condition, timeout=deadline, interval=0.01, message=what)


async def test_an_idle_claimer_lists_when_the_doorbell_rang_and_only_then(
    s3_store: ObjectStore,
) -> None:
    submitter = StoreQueue(s3_store)
    idle = StoreQueue(s3_store, scan_interval=RARELY, idle_scan_max=RARELY)
    assert idle.doorbell.on  # a bucket's queue looks at its doorbell by default
    assert await idle.claim(1, lease=10) == []  # lists (the first claim), learns the bell
    assert (idle.stats.scans, idle.doorbell.looks) == (1, 1)
    await until(lambda: idle.next_look() == 0, "the next look to be due")
    assert await idle.claim(1, lease=10) == []  # nothing rang: a HEAD, no LIST
    assert (idle.stats.scans, idle.doorbell.looks) == (1, 2)
    await submitter.enqueue(b"x", kind="k", id="new-job")
    assert submitter.doorbell.rings == 1
    await until(lambda: idle.next_look() == 0, "the next look to be due")
    [delivery] = await idle.claim(1, lease=10)
    assert delivery.id == "new-job"
    assert idle.stats.scans == 2  # the ring made it list


async def test_an_idle_worker_on_a_bucket_starts_another_process_job_without_its_idle_listing(
    s3_store: ObjectStore,
) -> None:
    submitter = StoreQueue(s3_store)
    queue = StoreQueue(s3_store, scan_interval=RARELY, idle_scan_max=RARELY)
    ran: list[str] = []

    async def handler(attempt: Attempt) -> None:
        ran.append(attempt.run_id)

    worker = Worker(queue, poll_interval=RARELY, worker_id="doorbell-test")
    worker.register("k", handler)
    async with worker:
        await until(lambda: queue.doorbell.looks >= 1, "the worker's first look")
        for n in range(3):
            await submitter.enqueue(b"x", kind="k", id=f"job-{n}")
            await until(lambda n=n: len(ran) == n + 1, f"job {n} to run")
    assert ran == ["job-0", "job-1", "job-2"]


async def test_the_first_look_only_learns_the_bell_and_the_next_comes_soon() -> None:
    """A job submitted just after a worker's first look (an API process that
    waited for it to come up) waits a quarter interval for the next, not a
    whole one: at the start looks come as after work, then back off."""
    bell = Doorbell(MemoryStore(), "queue/doorbell", interval=2.0)
    assert not await bell.rang()  # learns it
    first = bell.seconds_to_look()
    assert first is not None and first <= 0.5
    await until(bell.look_due, "the next look to be due")
    assert not await bell.rang()  # quiet: the gap doubles
    second = bell.seconds_to_look()
    assert second is not None and 0.5 < second <= 1.0


def test_a_queue_off_a_bucket_has_no_doorbell_unless_asked() -> None:
    assert not StoreQueue(MemoryStore()).doorbell.on
    assert StoreQueue(MemoryStore(), doorbell=0.25).doorbell.on
    with pytest.raises(ValueError, match="doorbell must be >= 0"):
        StoreQueue(MemoryStore(), doorbell=-1)


async def test_a_queue_with_the_doorbell_off_neither_rings_nor_looks(
    s3_store: ObjectStore,
) -> None:
    queue = StoreQueue(s3_store, doorbell=0)
    await queue.enqueue(b"x", kind="k", id="a")
    assert await queue.claim(2, lease=10) != []
    assert await queue.claim(2, lease=10) == []
    assert (queue.doorbell.rings, queue.doorbell.looks) == (0, 0)
    assert queue.next_look() is None


class FrozenTime:
    """The doorbell module's ``time``: monotonic time that moves only when
    the test moves it, so "within RING_EVERY of a ring" holds however slow
    the machine is (the trailing ring's timer still runs in real time)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


async def test_a_job_enqueued_just_after_a_ring_is_rung_for_when_that_ring_s_time_is_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The second of two quick submits falls within RING_EVERY of the first's
    ring, after the listing that ring started: a trailing ring, not the next
    listing an hour away, tells the idle claimer of it. A burst still rings
    once for all that came in the window."""
    clock = FrozenTime()
    monkeypatch.setattr(doorbell, "time", clock)
    store = MemoryStore()
    submitter = StoreQueue(store, doorbell=0.25)
    idle = StoreQueue(store, scan_interval=RARELY, idle_scan_max=RARELY, doorbell=0.25)
    assert await idle.claim(1, lease=10) == []  # lists, learns the bell
    await submitter.enqueue(b"x", kind="k", id="first")
    look = idle.next_look()
    assert look is not None and look < RING_EVERY
    clock.now += look  # the next look is due, still within RING_EVERY of the ring
    [first] = await idle.claim(2, lease=10)  # the ring made it list (and came up short)
    for n in range(3):  # within RING_EVERY of that ring: none rings at once
        await submitter.enqueue(b"x", kind="k", id=f"next-{n}")
    assert submitter.doorbell.rings == 1
    await until(lambda: submitter.doorbell.rings == 2, "the trailing ring")
    clock.now += 1  # the next look is due
    assert idle.next_look() == 0
    claimed = [d.id for d in await idle.claim(4, lease=10)]
    assert (first.id, sorted(claimed)) == ("first", ["next-0", "next-1", "next-2"])
    assert idle.stats.scans == 3 and submitter.doorbell.rings == 2
    await submitter.close()
    await idle.close()


async def test_a_queue_closed_with_a_ring_waiting_rings_it_as_it_closes() -> None:
    store = MemoryStore()
    queue = StoreQueue(store, doorbell=0.25)
    await queue.enqueue(b"x", kind="k", id="a")
    etag = (await store.head(f"{queue.prefix}/doorbell")).etag
    await queue.enqueue(b"x", kind="k", id="b")
    await queue.close()
    assert queue.doorbell.rings == 2
    assert (await store.head(f"{queue.prefix}/doorbell")).etag != etag

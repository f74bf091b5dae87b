"""A read of a record answered after this process's own newer write landed
never puts the older version back in the StoreQueue's cache.

Seen as a hang in tests/workflow/test_waits.py on S3, under load: the test
polled the run's status while the worker claimed it; a status GET sent
before the claim landed and answered after it put the unclaimed version
back in the cache. The claim then took its own run for taken by another and
handed nothing out, and the next claim swapped against a version long
gone, lost, and took the run for held elsewhere until its lease lapsed
(for good, on the test's FakeClock). The store here answers one chosen GET
late, with what it read when the GET arrived.
"""

from __future__ import annotations

import asyncio

from stepstone.runtime import Settlement
from stepstone.runtime.decision import Ack
from stepstone.runtime.store_queue import StoreQueue
from stepstone.store import MemoryStore
from stepstone.store.base import StoredObject


class LateRead(MemoryStore):
    """A MemoryStore whose next GET under ``late`` reads at once and answers
    only once ``answer`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.late: str | None = None
        self.read = asyncio.Event()
        self.answer = asyncio.Event()

    async def get(self, key: str) -> StoredObject:
        obj = await super().get(key)
        if self.late is not None and key.startswith(self.late):
            self.late = None
            self.read.set()
            await self.answer.wait()
        return obj


async def test_a_status_read_answered_after_a_claim_landed_leaves_the_claim_in_the_cache() -> None:
    store = LateRead()
    queue = StoreQueue(store)
    await queue.enqueue(b"", kind="k", id="a")
    store.late = "queue/jobs/"
    status = asyncio.create_task(queue.get("a"))
    await asyncio.wait_for(store.read.wait(), 10)  # it read the waiting version
    [delivery] = await queue.claim(1, lease=10)
    store.answer.set()
    record = await status
    assert record is not None and record.lease_expires_at is None  # (as it was when read)
    # The cache still holds the claim: no second claim of it, no race lost to ourselves.
    assert await queue.claim(1, lease=10) == []
    assert queue.stats.lost_races == 0
    assert await queue.settle(delivery, Ack()) is Settlement.ACKED

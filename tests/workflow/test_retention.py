"""The retention sweep: what it removes, and that it keeps up with a busy store."""

from __future__ import annotations

import asyncio

from stepstone import JobRunner
from stepstone.retention import REMOVE_AT_ONCE, sweep
from stepstone.store import MemoryStore
from stepstone.testing import FakeClock

RUNS = 100


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

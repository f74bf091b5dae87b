"""Concurrency slots in a real store (memory, files, S3 on moto): each
SharedObject below is one process's handle, with its own kept copy, so the
races are decided by the store's conditional writes, as across machines."""

from __future__ import annotations

import asyncio
from functools import partial

import pytest

from stepstone.limits import slots
from stepstone.limits.shared import PATIENCE, SharedObject
from stepstone.runtime import FakeClock
from stepstone.runtime.store_queue.records import CorruptRecord
from stepstone.store import MemoryStore, ObjectStore, Throttled
from stepstone.store.counting import CONDITIONAL_PUT, GET, CountingStore

KEY = "slots/k"
Decided = tuple[slots.SlotTable | None, slots.SlotDecision]
GRACE = 60.0


def process(store: ObjectStore, clock: FakeClock) -> SharedObject[slots.SlotTable]:
    return SharedObject(store, KEY, clock, to_fields=slots.to_fields, from_fields=slots.from_fields)


async def acquire(
    table: SharedObject[slots.SlotTable], run: str, *, limit: int = 1, lease: float = 10.0
) -> slots.SlotDecision:
    def change(state: slots.SlotTable | None, now: float) -> Decided:
        decision = slots.acquire(
            state,
            job="t",
            key="k",
            limit=limit,
            run=run,
            token=f"tok-{run}",
            until=now + lease,
            now=now,
            grace=GRACE,
        )
        return decision.table, decision

    return await table.update(change)


async def apply(
    table: SharedObject[slots.SlotTable], decide: partial[slots.SlotDecision]
) -> slots.SlotDecision:
    def change(state: slots.SlotTable | None, now: float) -> Decided:
        decision = decide(state, now=now, grace=GRACE)
        return decision.table, decision

    return await table.update(change)


async def read(store: ObjectStore, clock: FakeClock) -> slots.SlotTable | None:
    """The table as a fresh process finds it."""
    decision = await apply(process(store, clock), partial(slots.forget, run="nobody"))
    return decision.table


@pytest.mark.parametrize(("racers", "limit"), [(8, 1), (10, 3)])
async def test_racing_processes_get_exactly_limit_slots(
    any_store: ObjectStore, racers: int, limit: int
) -> None:
    clock = FakeClock()
    handles = [process(any_store, clock) for _ in range(racers)]
    decisions = await asyncio.gather(
        *(acquire(h, f"run{i}", limit=limit) for i, h in enumerate(handles))
    )
    winners = {f"run{i}" for i, d in enumerate(decisions) if d.held}
    assert len(winners) == limit
    table = await read(any_store, clock)
    assert table is not None
    assert {h.run for h in table.holders} == winners
    assert len(table.waiters) == racers - limit
    # Each loser was told how many were ahead of it when it joined the line.
    assert sorted(d.ahead for d in decisions if not d.held) == list(range(racers - limit))


async def test_a_lapsed_holders_slot_is_taken_over_and_it_can_no_longer_renew_or_release(
    any_store: ObjectStore,
) -> None:
    clock = FakeClock()
    crashed, other = process(any_store, clock), process(any_store, clock)
    assert (await acquire(crashed, "a", lease=10.0)).held
    assert not (await acquire(other, "b")).held
    clock.advance(11.0)
    assert (await acquire(other, "b")).held  # "a" lapsed: dropped
    renewed = await apply(crashed, partial(slots.renew, run="a", token="tok-a", until=99.0))
    assert not renewed.held
    released = await apply(crashed, partial(slots.release, run="a", token="tok-a"))
    assert not released.held
    table = await read(any_store, clock)
    assert table is not None and [h.run for h in table.holders] == ["b"]


async def test_release_is_fenced_by_the_claims_token(any_store: ObjectStore) -> None:
    clock = FakeClock()
    holder, waiter = process(any_store, clock), process(any_store, clock)
    await acquire(holder, "a")
    await acquire(waiter, "b")  # changes the object behind the holder's kept copy
    stale = await apply(holder, partial(slots.release, run="a", token="an-earlier-claim"))
    assert not stale.held and stale.wake == ()
    released = await apply(holder, partial(slots.release, run="a", token="tok-a"))
    assert released.held and released.wake == ("b",)
    assert (await acquire(waiter, "b")).held


async def test_the_object_goes_when_the_last_holder_leaves_and_comes_back_fresh(
    any_store: ObjectStore,
) -> None:
    clock = FakeClock()
    one, two = process(any_store, clock), process(any_store, clock)
    await acquire(one, "a")
    await apply(one, partial(slots.release, run="a", token="tok-a"))
    assert [info.key async for info in any_store.scan("slots/")] == []
    # "two" never saw it go; "one" remembers it gone. Both start again cleanly.
    assert (await acquire(two, "b")).held
    assert not (await acquire(one, "c")).held


async def test_updates_asked_together_in_one_process_go_out_in_one_write() -> None:
    from stepstone.store import MemoryStore

    clock = FakeClock()
    counted = CountingStore(MemoryStore())
    table = process(counted, clock)
    decisions = await asyncio.gather(*(acquire(table, f"run{i}", limit=2) for i in range(20)))
    assert sum(d.held for d in decisions) == 2
    # Twenty runs asking at once: one write (a create: nothing to read first).
    assert counted.counts[CONDITIONAL_PUT] == 1
    assert counted.counts[GET] == 0
    # Asked while a write is in flight: the next write carries them all.
    first = asyncio.ensure_future(acquire(table, "late0", limit=2))
    await asyncio.sleep(0)  # the write of "late0" is under way
    later = await asyncio.gather(*(acquire(table, f"late{i}", limit=2) for i in range(1, 10)))
    await first
    assert not any(d.held for d in later)
    assert counted.counts[CONDITIONAL_PUT] == 3


async def test_an_object_that_does_not_decode_is_reported_with_its_key(
    any_store: ObjectStore,
) -> None:
    await any_store.put(KEY, b"\x93garbage")
    with pytest.raises(CorruptRecord, match=KEY):
        await acquire(process(any_store, FakeClock()), "a")


class RefusingStore(MemoryStore):
    """Refuses the next ``refusals`` writes as too many (Throttled), as a
    store limiting the writes to one object does; each refusal takes
    ``seconds`` of the clock (the store's own tries and their turns)."""

    def __init__(self, clock: FakeClock, refusals: int, seconds: float) -> None:
        super().__init__()
        self.clock, self.refusals, self.seconds = clock, refusals, seconds
        self.tries = 0

    def _refused(self) -> None:
        self.tries += 1
        if self.refusals > 0:
            self.refusals -= 1
            self.clock.advance(self.seconds)
            raise Throttled("SlowDown", key=KEY)

    async def put_if_absent(self, key: str, data: bytes) -> str:
        self._refused()
        return await super().put_if_absent(key, data)

    async def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        self._refused()
        return await super().put_if_match(key, data, etag)


async def test_an_update_the_store_refuses_as_too_many_is_tried_again_until_it_lands() -> None:
    clock = FakeClock()
    store = RefusingStore(clock, refusals=7, seconds=5.0)  # a crowd on a hot object
    decision = await acquire(process(store, clock), "a")
    assert decision.held  # the run waited for its slot, its attempt did not fail
    assert store.tries == 8
    table = await read(store, clock)
    assert table is not None and [h.run for h in table.holders] == ["a"]


async def test_an_update_refused_as_too_many_for_longer_than_its_patience_fails() -> None:
    clock = FakeClock()
    store = RefusingStore(clock, refusals=10**6, seconds=10.0)
    with pytest.raises(Throttled):
        await acquire(process(store, clock), "a")
    assert store.tries == PATIENCE / 10.0  # bounded: then the attempt fails, to be retried
    assert await read(store, clock) is None  # nothing was written

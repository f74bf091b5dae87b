"""A send with a key whose first try failed half way (its key recorded, its
answer lost before the event was written) is delivered by its retry, once."""

from __future__ import annotations

import pytest
from family_jobs import FAMILY_JOBS, TwoAtOnce
from wf_jobs import Counters

from stepstone import JobRunner
from stepstone.store import MemoryStore, StoreUnavailable
from stepstone.store.doubles.faults import FaultyStore
from stepstone.testing import FakeClock, advance


async def test_a_keyed_send_whose_first_try_failed_half_way_is_delivered_once(
    store: MemoryStore, clock: FakeClock, counters: Counters
) -> None:
    faulty = FaultyStore(store, operations=["put_if_absent"])
    api = JobRunner(faulty, clock=clock, jobs=[])
    handle = await api.submit(TwoAtOnce(key="half-way"))
    faulty.fail_next(1, after=True)  # the key's record lands; the send raises
    with pytest.raises(StoreUnavailable):
        await api.send_event(handle.id, "x", "once", key="d")
    assert await api.send_event(handle.id, "x", "once", key="d") is True
    assert await api.send_event(handle.id, "x", "once", key="d") is False
    await advance(clock, 1)
    await api.send_event(handle.id, "x", "then")
    async with JobRunner(store, clock=clock, jobs=FAMILY_JOBS, state=[counters]):
        assert await handle.result(timeout=10) == ["once", "then"]

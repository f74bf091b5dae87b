"""How a StoreQueue paces its listings in a crowd of processes
(runtime.store_queue.pacing): a process that keeps finding the records it
tries for taken by others lists less often and reads only a slice of what
is new, so a fleet's requests per job do not grow with the number of
workers (benchmarks/fleet.py measures it; docs/queue.md)."""

from __future__ import annotations

import random

import pytest

from stepstone.runtime import FakeClock
from stepstone.runtime.store_queue import StoreQueue
from stepstone.runtime.store_queue.pacing import CROWD_WAIT, SLICE_COVER, ScanPacing, in_slice
from stepstone.store import MemoryStore
from stepstone.store.counting import CountingStore


def pacing_on(clock: FakeClock) -> ScanPacing:
    return ScanPacing(scan_interval=1.0, idle_scan_max=5.0, fetch_limit=1000, monotonic=clock.now)


def lists_after(pacing: ScanPacing, clock: FakeClock, seconds: float) -> bool:
    """Whether a claim short of work ``seconds`` after the last listing lists."""
    return pacing.list_first(clock.now() + seconds, True, [])


def test_a_process_that_wins_what_it_tries_for_keeps_its_pace() -> None:
    clock = FakeClock()
    pacing = pacing_on(clock)
    for _ in range(50):
        pacing.tried(won=1, lost=0)
    assert pacing.slice() is None
    pacing.listed(10, changed=True)
    assert not lists_after(pacing, clock, 0.99) and lists_after(pacing, clock, 1.0)


def test_a_process_in_a_crowd_lists_less_often_up_to_a_bound() -> None:
    clock = FakeClock()
    pacing = pacing_on(clock)
    for _ in range(10):
        pacing.tried(won=1, lost=9)  # one in ten: a crowd of about ten
    assert 0.05 < pacing.share < 0.2
    pacing.listed(10, changed=True)
    wait = 1.0 / pacing.share
    assert not lists_after(pacing, clock, 0.99 * wait) and lists_after(pacing, clock, wait)

    for _ in range(50):
        pacing.tried(won=0, lost=10)  # a crowd of hundreds
    clock.advance(60)
    pacing.listed(10, changed=True)
    bound = CROWD_WAIT * 5.0
    assert not lists_after(pacing, clock, 0.99 * bound) and lists_after(pacing, clock, bound)


def test_a_crowds_slices_hold_about_three_times_its_share_of_the_ids() -> None:
    pacing = pacing_on(FakeClock())
    for _ in range(60):
        pacing.tried(won=0, lost=1)
    part = pacing.slice()
    assert part is not None
    # Enough ids that about a thousand fall in a slice this narrow (a share
    # near 0.002): the count's own spread is then 3%, well inside the bound.
    rng = random.Random(7)
    ids = [f"{rng.getrandbits(128):032x}" for _ in range(200_000)]
    held = sum(in_slice(i, part) for i in ids) / len(ids)
    assert held == pytest.approx(SLICE_COVER * pacing.share, rel=0.15)


def test_a_process_left_alone_wins_its_share_back() -> None:
    """Each record won while reading a slice counts as the slice's width:
    a fifth more share a record, until the slice is the whole."""
    pacing = pacing_on(FakeClock())
    for _ in range(40):
        pacing.tried(won=0, lost=1)
    wins = 0
    while pacing.slice() is not None:
        pacing.tried(won=1, lost=0)
        wins += 1
    assert 15 < wins < 25  # from a share of 1.5% (about 65 peers)


async def test_a_record_left_to_others_is_read_when_a_later_listing_shows_it_unchanged() -> None:
    """What keeps a slice from stranding a job: the process whose slice it
    fell in may be gone."""
    clock = FakeClock()
    backing = MemoryStore(clock=clock.now)
    elsewhere = StoreQueue(backing, clock=clock)
    for i in range(10):
        await elsewhere.enqueue(b"", id=f"j{i}")
    store = CountingStore(backing)
    crowded = StoreQueue(store, clock=clock, scan_interval=0.0)
    crowded._pacing.tried(won=0, lost=200)  # it lost all: its slice is next to nothing
    assert await crowded.claim(10, lease=30) == []
    assert store.counts["GET"] == 0  # it read none of them
    got = await crowded.claim(10, lease=30)  # listed again: unchanged, so read and claimed
    assert sorted(d.id for d in got) == [f"j{i}" for i in range(10)]

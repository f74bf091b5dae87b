"""What one refresh of the fleet's pages reads, as docs/operations.md states
it, counted on the store: the workers page one LIST and a GET of each record
written in the last day (older ones not read); the schedules page one LIST,
a GET of each marker and at most two GETs for each last run's state."""

from __future__ import annotations

from worker_records import record

from stepstone import JobRunner
from stepstone.ops.schedules import read_schedules
from stepstone.ops.workers import read_workers
from stepstone.records.layout import Layout
from stepstone.records.schedule_marker import Marker, tick_run_id
from stepstone.runtime.clock import FakeClock
from stepstone.runtime.worker.presence import AGE_OUT
from stepstone.store import MemoryStore
from stepstone.store.counting import GET, LIST, CountingStore

NOW = 1_800_000_000.0


async def test_a_workers_refresh_reads_one_listing_and_the_records_of_the_last_day() -> None:
    clock = FakeClock(NOW - AGE_OUT - 60)
    store = MemoryStore(clock=clock.now)
    for n in range(5):  # written more than a day ago: left to the sweep, unread
        await store.put(*record(f"old-{n}", life=f"{n:04x}", beat=clock.now()))
    clock.advance(AGE_OUT + 60)
    for n in range(40):
        await store.put(*record(f"w-{n}", life=f"{n:04x}", beat=clock.now()))
    counted = CountingStore(store)
    reader = JobRunner(counted, clock=clock)
    counted.reset()
    fleet = await read_workers(reader)
    assert len(fleet.rows) == 40
    assert (counted.counts[LIST], counted.counts[GET], counted.total) == (1, 40, 41)
    await reader.close()


async def test_a_schedules_refresh_reads_at_most_three_records_a_schedule() -> None:
    clock = FakeClock(NOW)
    store = MemoryStore(clock=clock.now)
    layout = Layout()
    for n in range(20):
        name = f"s-{n}"
        marker = Marker(tick=NOW - 60, name=name, run=tick_run_id(name, NOW - 60))
        await store.put(layout.schedule(name), marker.encode())
    counted = CountingStore(store)
    reader = JobRunner(counted, clock=clock)
    counted.reset()
    listed = await read_schedules(reader, [])
    assert len(listed.rows) == 20
    # A GET of each marker, and each last run looked for in outcomes/, then
    # in the queue (neither holds it: the most a schedule costs).
    assert (counted.counts[LIST], counted.counts[GET], counted.total) == (1, 60, 61)
    await reader.close()

"""What a running worker tells the fleet through its record (``workers/``),
as ``stepstone workers`` and the workers page read it
(:mod:`stepstone.ops.workers`): its id, host, pid, capacity and the runs
it holds, live while it beats, stopped after a clean stop, gone after
missed beats; old records swept; a hostile record named and left out, never
breaking the read; two lives under one id shown apart."""

from __future__ import annotations

import math
import os
import socket

import pytest
from wf_jobs import Counters, GatedKeyed
from worker_records import record

from stepstone import JobRunner
from stepstone.ops.workers import read_workers
from stepstone.runtime import MemoryQueue
from stepstone.runtime.clock import FakeClock
from stepstone.runtime.worker.presence import (
    AGE_OUT,
    GONE_AFTER,
    MAX_RECORD_BYTES,
    WorkerRecord,
    holder_digest,
)
from stepstone.store import MemoryStore
from stepstone.store.counting import GET, CountingStore
from stepstone.testing import wait_until

BEAT = 0.05
DEADLINE = 10.0


def runner_on(store: MemoryStore, clock: FakeClock, **options: object) -> JobRunner:
    counters = Counters()
    return JobRunner(
        store,
        jobs=[GatedKeyed],
        state=[counters],
        clock=clock,
        worker_beat=BEAT,
        poll_interval=0.05,
        **options,  # type: ignore[arg-type]
    )


async def keys(store: MemoryStore) -> list[str]:
    return [info.key for info in await store.list("workers/")]


def record_bytes(**changes: object) -> bytes:
    start = 1_700_000_000.0
    fields: dict[str, object] = dict(host="elsewhere", concurrency=4, started=start, beat=start)
    return record(str(changes.pop("id", "w-hand")), **{**fields, **changes})[1]


async def test_a_running_worker_is_live_with_what_it_holds_and_stopped_after_a_clean_stop() -> None:
    store, clock = MemoryStore(), FakeClock(1_700_000_000.0)
    runner = runner_on(store, clock, worker_id="w-one", concurrency=3)
    counters = runner.state_of(Counters)
    async with runner:
        handle = await runner.submit(GatedKeyed(n=1))
        await counters.started.wait()

        async def holds_it() -> bool:
            rows = (await read_workers(runner)).rows
            return bool(rows) and rows[0].record.runs == (handle.id,)

        await wait_until(holds_it, timeout=DEADLINE)
        (row,) = (await read_workers(runner)).rows
        assert row.state == "live"
        assert (row.record.worker_id, row.record.host, row.record.pid) == (
            "w-one",
            socket.gethostname(),
            os.getpid(),
        )
        assert (row.record.concurrency, row.record.held) == (3, 1)
        assert not row.shared_id
        counters.gate.set()
        assert await handle.result(timeout=DEADLINE) == 1
    (row,) = (await read_workers(runner)).rows
    assert row.state == "stopped"
    assert row.record.held == 0 and row.record.runs == ()
    await runner.close()


async def test_a_worker_that_stops_beating_shows_as_gone_after_missed_beats() -> None:
    store, clock = MemoryStore(), FakeClock(1_700_000_000.0)
    key = "workers/" + holder_digest("w-dead@somewhere") + "/00aa"
    every = 30.0
    await store.put(key, record_bytes(id="w-dead", life="00aa", beat=clock.now(), every=every))
    reader = JobRunner(store, clock=clock)
    clock.advance(GONE_AFTER * every)  # two beats missed: not yet
    assert [row.state for row in (await read_workers(reader)).rows] == ["live"]
    clock.advance(1.0)
    assert [row.state for row in (await read_workers(reader)).rows] == ["gone"]
    await reader.close()


async def test_a_start_sweeps_records_aged_out_and_its_own_earlier_lives() -> None:
    clock = FakeClock(1_700_000_000.0)
    store = MemoryStore(clock=clock.now)
    first = runner_on(store, clock, worker_id="w-same")
    async with first:

        async def written() -> bool:
            return bool(await keys(store))

        await wait_until(written, timeout=DEADLINE)
    earlier = await keys(store)
    old = "workers/" + holder_digest("w-old@elsewhere") + "/11bb"
    await store.put(old, record_bytes(id="w-old", life="11bb", beat=clock.now()))
    clock.advance(AGE_OUT + 1)  # the old one's last write is a day behind
    fresh = "workers/" + holder_digest("w-fresh@elsewhere") + "/22cc"
    await store.put(fresh, record_bytes(id="w-fresh", life="22cc", beat=clock.now()))
    again = runner_on(store, clock, worker_id="w-same")
    async with again:

        async def swept() -> bool:
            there = set(await keys(store))
            return old not in there and not there & set(earlier) and fresh in there

        await wait_until(swept, timeout=DEADLINE)
        ids = sorted(row.record.worker_id for row in (await read_workers(again)).rows)
        assert ids == ["w-fresh", "w-same"]
    await first.close()
    await again.close()


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"beat": math.inf}, "beat"),
        ({"beat": math.nan}, "beat"),
        ({"started": 1e20}, "started"),
        ({"pid": 10**12}, "pid"),
        ({"held": -1}, "held"),
        ({"concurrency": 0}, "concurrency"),
        ({"every": math.nan}, "every"),
        ({"id": "w\x1b[2Jx"}, "id"),
        ({"host": "h" * 1000}, "host"),
        ({"runs": ["../../etc"]}, "run id"),
        ({"runs": ["a"] * 51}, "runs"),
        ({"life": "<script>"}, "life"),
        ({"v": 99}, "version"),
    ],
)
async def test_a_record_no_worker_could_write_is_named_and_the_rest_still_read(
    changes: dict[str, object], named: str
) -> None:
    store, clock = MemoryStore(), FakeClock(1_700_000_000.0)
    good = "workers/" + holder_digest("w-good@here") + "/33dd"
    bad = "workers/" + holder_digest("w-bad@here") + "/44ee"
    await store.put(good, record_bytes(id="w-good", life="33dd", beat=clock.now()))
    await store.put(bad, record_bytes(**{"beat": clock.now(), **changes}))
    reader = JobRunner(store, clock=clock)
    fleet = await read_workers(reader)
    assert [row.record.worker_id for row in fleet.rows] == ["w-good"]
    (unreadable,) = fleet.unreadable
    assert unreadable.key == bad and named in unreadable.reason
    await reader.close()


async def test_an_object_too_large_for_a_worker_record_is_named_unread() -> None:
    store, clock = MemoryStore(), FakeClock(1_700_000_000.0)
    counted = CountingStore(store)
    await store.put("workers/ab/cd", b"\x00" * (MAX_RECORD_BYTES + 1))
    reader = JobRunner(counted, clock=clock)
    counted.reset()
    (unreadable,) = (await read_workers(reader)).unreadable
    assert unreadable.key == "workers/ab/cd" and "too large" in unreadable.reason
    assert counted.counts[GET] == 0
    await reader.close()


async def test_garbage_in_a_worker_record_is_named() -> None:
    store, clock = MemoryStore(), FakeClock(1_700_000_000.0)
    await store.put("workers/ab/cd", b"\xc1\xff not msgpack")
    reader = JobRunner(store, clock=clock)
    (unreadable,) = (await read_workers(reader)).unreadable
    assert unreadable.key == "workers/ab/cd" and "not a worker record" in unreadable.reason
    await reader.close()


async def test_two_live_workers_under_one_id_are_each_shown_and_flagged() -> None:
    """A queue that holds no lock on ids lets two processes take one id (so
    does a second host): each has its own record, neither overwrites the other."""
    store, clock = MemoryStore(), FakeClock(1_700_000_000.0)
    queue = MemoryQueue(clock=clock)
    one = runner_on(store, clock, worker_id="w-twin", queue=queue, concurrency=2)
    two = runner_on(store, clock, worker_id="w-twin", queue=queue, concurrency=5)
    async with one, two:

        async def both() -> bool:
            return len((await read_workers(one)).rows) == 2

        await wait_until(both, timeout=DEADLINE)
        rows = (await read_workers(one)).rows
        assert sorted(row.record.concurrency for row in rows) == [2, 5]
        assert all(row.shared_id and row.state == "live" for row in rows)
        assert len({row.key for row in rows}) == 2
    await one.close()
    await two.close()


async def test_no_record_without_a_beat() -> None:
    store, clock = MemoryStore(), FakeClock(1_700_000_000.0)
    runner = JobRunner(store, clock=clock, worker_beat=None)
    async with runner:
        pass
    assert await keys(store) == []
    await runner.close()


def test_a_record_round_trips() -> None:
    record = WorkerRecord.decode(record_bytes(runs=["abc123"], held=7), now=1_700_000_000.0)
    assert WorkerRecord.decode(record.encode(), now=1_700_000_000.0) == record
    assert record.held == 7 and record.runs == ("abc123",)


@pytest.mark.parametrize("beat", [0.0, -1.0, AGE_OUT])
def test_a_beat_that_would_never_show_the_worker_live_is_refused(beat: float) -> None:
    with pytest.raises(ValueError, match="worker record's beat"):
        JobRunner(MemoryStore(), worker_beat=beat)

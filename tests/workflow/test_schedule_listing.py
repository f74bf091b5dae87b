"""What the schedules page reads (:mod:`stepstone.ops.schedules`): each
schedule with how it ticks, its missed-tick policy, its last tick and the
run that tick started, and its next tick; from the markers alone (a view
with no application code) and from the application's definitions; a
schedule nobody runs shown overdue; a marker no scheduler could write named,
never breaking the read. Time is a FakeClock."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from test_schedules import every_five_minutes
from wait_jobs import WAIT_JOBS
from wf_jobs import Counters

from stepstone import JobRunner
from stepstone.ops.schedules import OVERDUE_AFTER, read_schedules
from stepstone.records.codec import pack
from stepstone.records.layout import Layout
from stepstone.records.schedule_marker import MAX_MARKER_BYTES, decode_marker, tick_run_id
from stepstone.schedules import SCHEDULE_CLOCK_SKEW
from stepstone.store import MemoryStore
from stepstone.testing import FakeClock, advance, wait_until

START = datetime(2026, 3, 2, 12, 0, tzinfo=UTC).timestamp()  # on a 5-minute tick
LAYOUT = Layout()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START + 10)


async def test_a_schedule_that_ran_shows_its_last_tick_its_run_and_its_next_tick(
    make_runner: Callable[..., JobRunner], store: MemoryStore, clock: FakeClock, counters: Counters
) -> None:
    schedule = every_five_minutes(missed="all")
    async with make_runner(jobs=WAIT_JOBS, schedules=[schedule]) as runner:
        await wait_until(lambda: _marked(store), message="the schedule's marker")
        first = (await read_schedules(runner, [])).rows
        # First seen: no tick yet, carried since (about) now.
        assert [(row.name, row.last_tick, row.last_run) for row in first] == [("five", None, None)]
        assert first[0].since == START + 10 - SCHEDULE_CLOCK_SKEW
        await advance(clock, 300)
        tick = START + 300
        await wait_until(lambda: counters.counts[f"tick:{_iso(tick)}"] == 1, message="the tick")
        await wait_until(lambda: _succeeded(runner, tick_run_id("five", tick)), message="its end")
    bare = JobRunner(store, clock=clock)  # a view with no application code
    (row,) = (await read_schedules(bare, [])).rows
    assert (row.name, row.spec, row.missed) == ("five", "every 0:05:00", "all")
    assert (row.last_tick, row.next_tick) == (tick, tick + 300)
    assert (row.last_run, row.run_state) == (schedule.run_id(_at(tick)), "succeeded")
    assert not row.in_app and not row.overdue
    # Nobody carries it any more: past its next tick, it is overdue.
    clock.advance(300 + OVERDUE_AFTER + 1)
    (row,) = (await read_schedules(bare, [])).rows
    assert row.overdue
    await bare.close()


async def test_the_application_defines_what_its_schedules_do_before_they_first_run(
    store: MemoryStore, clock: FakeClock
) -> None:
    runner = JobRunner(store, clock=clock, schedules=[every_five_minutes()])  # not started
    (row,) = (await read_schedules(runner, runner.scheduler.schedules)).rows
    assert (row.name, row.spec, row.missed, row.in_app) == ("five", "every 0:05:00", "latest", True)
    assert (row.last_tick, row.last_run) == (None, None)
    assert row.next_tick == START + 300 and not row.overdue
    await runner.close()


async def test_a_marker_from_before_markers_said_more_shows_its_tick(
    store: MemoryStore, clock: FakeClock
) -> None:
    await store.put(LAYOUT.schedule("old one"), pack({"tick": START}))
    reader = JobRunner(store, clock=clock)
    (row,) = (await read_schedules(reader, [])).rows
    assert (row.name, row.spec, row.last_tick, row.run_state) == ("old one", None, START, None)
    assert row.last_run == tick_run_id("old one", START)  # looked for: not there
    await reader.close()


@pytest.mark.parametrize(
    ("marker", "named"),
    [
        ({"tick": math.inf}, "its tick"),
        ({"tick": START, "next": math.nan}, "next"),
        ({"tick": START, "missed": "sometimes"}, "missed"),
        ({"tick": START, "run": "../x"}, "run"),
        ({"tick": START, "name": "a\x1b[2Jb"}, "name"),
        ({"tick": START, "spec": 7}, "spec"),
        ({"tick": START, "first": "yes"}, "first"),
    ],
)
async def test_a_marker_no_scheduler_could_write_is_named_and_the_rest_still_read(
    store: MemoryStore, clock: FakeClock, marker: dict[str, object], named: str
) -> None:
    await store.put(LAYOUT.schedule("bad"), pack(marker))
    await store.put(LAYOUT.schedule("good"), pack({"tick": START, "name": "good"}))
    reader = JobRunner(store, clock=clock)
    listed = await read_schedules(reader, [])
    assert [row.name for row in listed.rows] == ["good"]
    (bad,) = listed.unreadable
    assert bad.key == LAYOUT.schedule("bad") and named in bad.reason
    await reader.close()


async def test_an_object_too_large_for_a_marker_is_named_unread(
    store: MemoryStore, clock: FakeClock
) -> None:
    await store.put(LAYOUT.schedule("huge"), b"\x00" * (MAX_MARKER_BYTES + 1))
    reader = JobRunner(store, clock=clock)
    listed = await read_schedules(reader, [])
    assert listed.rows == [] and "too large" in listed.unreadable[0].reason
    await reader.close()


def test_a_marker_decodes_what_it_encodes() -> None:
    with pytest.raises(ValueError, match="not a schedule marker"):
        decode_marker(pack([1, 2]), now=START)


async def _marked(store: MemoryStore) -> bool:
    return bool(await store.list(LAYOUT.schedules()))


async def _succeeded(runner: JobRunner, run_id: str) -> bool:
    state = await runner.status(run_id)
    return state is not None and state.status.value == "succeeded"


def _at(tick: float) -> datetime:
    return datetime.fromtimestamp(tick, UTC)


def _iso(tick: float) -> str:
    return _at(tick).isoformat()

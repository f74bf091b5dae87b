"""Schedules and clocks that disagree: every tick runs once while the
workers' clocks are within SCHEDULE_CLOCK_SKEW of each other, whatever the
interval; a worker that sees a schedule's marker further in its future
says so. Time is two FakeClocks moved together, one ahead of the other."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
from wait_jobs import WAIT_JOBS, Tick
from wf_jobs import Counters

from stepstone import JobRunner, Schedule
from stepstone.runtime import StoreQueue
from stepstone.schedules import SCHEDULE_CLOCK_SKEW
from stepstone.store import MemoryStore, NotFound
from stepstone.testing import FakeClock, advance, wait_until

START = datetime(2026, 3, 2, 12, 0, tzinfo=UTC).timestamp()
TICKS = 30


def every_second() -> Schedule:
    return Schedule("second", every=timedelta(seconds=1), job=lambda t: Tick(at=t.isoformat()))


def runner_on(store: MemoryStore, clock: FakeClock, counters: Counters) -> JobRunner:
    queue = StoreQueue(store, clock=clock, scan_interval=0.0)
    return JobRunner(
        store,
        queue=queue,
        clock=clock,
        jobs=WAIT_JOBS,
        schedules=[every_second()],
        state=[counters],
        poll_interval=0.05,
    )


async def _marked(runner: JobRunner) -> bool:
    try:
        await runner.store.head(runner.layout.schedule("second"))
    except NotFound:
        return False
    return True


def ran(counters: Counters) -> set[float]:
    return {
        datetime.fromisoformat(name.removeprefix("tick:")).timestamp()
        for name in counters.counts
        if name.startswith("tick:")
    }


@pytest.mark.parametrize("ahead_first", [False, True], ids=["on-time-first", "ahead-first"])
async def test_a_worker_ahead_by_less_than_the_bound_drops_no_tick(ahead_first: bool) -> None:
    """Every second, one worker's clock 2.5 s ahead of the other's: each tick
    from the schedule's start on runs once (none dropped, none twice)."""
    assert SCHEDULE_CLOCK_SKEW >= 2.5
    on_time, ahead = FakeClock(START), FakeClock(START + 2.5)
    store, counters = MemoryStore(clock=on_time.now), Counters()
    first, second = (ahead, on_time) if ahead_first else (on_time, ahead)
    async with runner_on(store, first, counters) as one:
        await wait_until(lambda: _marked(one), timeout=10)
        async with runner_on(store, second, counters):
            for n in range(1, TICKS + 1):
                await advance(on_time, 1)
                await advance(ahead, 1)
                await wait_until(lambda n=n: START + n in ran(counters), timeout=10)
    assert all(count == 1 for count in counters.counts.values()), counters.counts
    assert {START + n for n in range(1, TICKS + 1)} <= ran(counters)
    assert max(ran(counters)) <= START + TICKS + 2.5  # the ahead worker's, no later


async def test_a_marker_from_further_in_the_future_is_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ahead, behind = FakeClock(START + SCHEDULE_CLOCK_SKEW + 30), FakeClock(START)
    store, counters = MemoryStore(clock=behind.now), Counters()
    async with runner_on(store, ahead, counters) as one:
        await wait_until(lambda: _marked(one), timeout=10)
    with caplog.at_level(logging.WARNING, logger="stepstone.schedules"):
        async with runner_on(store, behind, counters):
            await wait_until(lambda: "ahead of this process's clock" in caplog.text, timeout=10)
    warned = [r for r in caplog.records if "ahead of this process's clock" in r.getMessage()]
    assert len(warned) == 1 and "'second'" in warned[0].getMessage()

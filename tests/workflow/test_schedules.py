"""Schedules: a job at every tick, once per tick across processes, missed
ticks as the schedule says. Time is a FakeClock."""

from __future__ import annotations

import logging
import math
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from wait_jobs import WAIT_JOBS, Tick
from wf_jobs import Counters

from stepstone import JobRunner, Schedule
from stepstone.records.codec import pack
from stepstone.records.layout import Layout
from stepstone.schedules import MAX_CATCH_UP, SCHEDULE_CLOCK_SKEW, next_ticks
from stepstone.store import MemoryStore
from stepstone.testing import FakeClock, advance, wait_until

START = datetime(2026, 3, 2, 12, 0, tzinfo=UTC).timestamp()  # a Monday, on a 5-minute tick


def every_five_minutes(missed: str = "latest") -> Schedule:
    return Schedule(
        "five",
        every=timedelta(minutes=5),
        job=lambda tick: Tick(at=tick.isoformat()),
        missed=missed,  # type: ignore[arg-type]
    )


def ticks_run(counters: Counters) -> dict[str, int]:
    return {k.removeprefix("tick:"): v for k, v in counters.counts.items() if k.startswith("tick:")}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START + 10)


async def test_each_tick_runs_once_across_two_runners(
    make_runner: Callable[..., JobRunner], clock: FakeClock, counters: Counters
) -> None:
    schedule = every_five_minutes()
    async with (
        make_runner(jobs=WAIT_JOBS, schedules=[schedule]) as first,
        make_runner(jobs=WAIT_JOBS, schedules=[schedule]),
    ):
        await wait_until(lambda: _marked(first, schedule), message="the schedule's marker")
        for n in range(1, 4):
            await advance(clock, 300)
            await wait_until(lambda n=n: len(ticks_run(counters)) == n, message=f"tick {n}")
    assert all(count == 1 for count in ticks_run(counters).values()), ticks_run(counters)
    assert sorted(ticks_run(counters)) == [
        datetime.fromtimestamp(START + 300 * n, UTC).isoformat() for n in range(1, 4)
    ]


@pytest.mark.parametrize(("missed", "expected"), [("latest", 1), ("all", 12), ("skip", 0)])
async def test_ticks_missed_while_no_worker_ran(
    make_runner: Callable[..., JobRunner],
    clock: FakeClock,
    counters: Counters,
    missed: str,
    expected: int,
) -> None:
    schedule = every_five_minutes(missed)
    async with make_runner(jobs=WAIT_JOBS, schedules=[schedule]) as runner:
        await wait_until(lambda: _marked(runner, schedule), message="the schedule's marker")
    await advance(clock, 3600)  # an hour with no worker: 12 ticks
    async with make_runner(jobs=WAIT_JOBS, schedules=[schedule]) as runner:
        await wait_until(lambda: _marker_at(runner, schedule, START + 3600), message="caught up")
        await wait_until(lambda: len(ticks_run(counters)) == expected, message="missed ticks ran")
        await advance(clock, 300)  # and the next tick runs, whatever missed= says
        await wait_until(lambda: len(ticks_run(counters)) == expected + 1, message="next tick")
    if missed == "latest":
        latest = datetime.fromtimestamp(START + 3600, UTC).isoformat()
        assert min(ticks_run(counters)) == latest


@pytest.mark.parametrize("missed", ["latest", "skip"])
async def test_every_tick_a_worker_was_up_for_runs_even_if_it_looks_late(
    make_runner: Callable[..., JobRunner], clock: FakeClock, counters: Counters, missed: str
) -> None:
    """A worker that was up but looked late (a stalled event loop, a slow
    store, a failed look) finds several ticks due: none of them was missed."""
    schedule = every_five_minutes(missed)
    async with make_runner(jobs=WAIT_JOBS, schedules=[schedule]) as runner:
        await wait_until(lambda: _marked(runner, schedule), message="the schedule's marker")
        await advance(clock, 900)  # three ticks come due before the scheduler looks again
        await wait_until(lambda: len(ticks_run(counters)) == 3, message="all three ticks")
    assert sorted(ticks_run(counters)) == [
        datetime.fromtimestamp(START + 300 * n, UTC).isoformat() for n in range(1, 4)
    ]


def test_cron_ticks_follow_the_time_zone_and_its_dst() -> None:
    schedule = Schedule(
        "morning", cron="0 9 * * *", timezone="Europe/Paris", job=lambda t: Tick(at=str(t))
    )
    before_dst = datetime(2026, 3, 28, 12, 0, tzinfo=UTC).timestamp()
    ticks = next_ticks(schedule, before_dst, 2)
    assert [t.isoformat() for t in ticks] == [
        "2026-03-29T09:00:00+02:00",  # DST began that night: 07:00 UTC
        "2026-03-30T09:00:00+02:00",
    ]


def test_a_schedule_refuses_what_it_cannot_run() -> None:
    with pytest.raises(ValueError, match="exactly one of cron= or every="):
        Schedule("x", job=lambda t: Tick(at=""))
    with pytest.raises(ValueError, match="bad cron"):
        Schedule("x", cron="61 * * * *", job=lambda t: Tick(at=""))
    with pytest.raises(ValueError, match="positive"):
        Schedule("x", every=timedelta(0), job=lambda t: Tick(at=""))


async def _marked(runner: JobRunner, schedule: Schedule) -> bool:
    return await runner.scheduler.last_tick(schedule) is not None


async def _marker_at(runner: JobRunner, schedule: Schedule, at: float) -> bool:
    return await runner.scheduler.last_tick(schedule) == at


def _walked(schedule: Schedule, after: float, until: float) -> list[datetime]:
    """The ticks in (after, until], the newest MAX_CATCH_UP, found by walking each one."""
    found: list[datetime] = []
    for tick in schedule.ticks_after(after):
        if tick.timestamp() > until:
            return found[-MAX_CATCH_UP:]
        found.append(tick)
    raise AssertionError("unreachable")


@pytest.mark.parametrize(
    "schedule",
    [
        every_five_minutes(),
        Schedule("sec", every=timedelta(seconds=1), job=lambda tick: Tick(at="")),
        Schedule("odd", every=timedelta(seconds=7.3), job=lambda tick: Tick(at="")),
        Schedule("cron", cron="*/5 * * * *", job=lambda tick: Tick(at="")),
        Schedule("paris", cron="30 2 * * *", timezone="Europe/Paris", job=lambda tick: Tick(at="")),
    ],
    ids=lambda schedule: schedule.name,
)
@pytest.mark.parametrize(
    ("back", "length"), [(0, 0), (0, 1), (10, 300), (299, 300), (600, 86_400 * 2)]
)
def test_the_ticks_due_are_those_a_walk_finds(
    schedule: Schedule, back: float, length: float
) -> None:
    """Counted (``every``) or read backwards (cron), the ticks due since a
    marker are the ones a walk over every tick finds, DST days included."""
    for after in (START - back, datetime(2026, 3, 29, 0, 0, 0, 300, tzinfo=UTC).timestamp()):
        until = after + length
        assert schedule.ticks_between(after, until) == _walked(schedule, after, until)


def test_an_old_marker_is_caught_up_without_walking_the_ticks_skipped() -> None:
    """A marker 300 years old on a schedule of every second: the 100 ticks
    due come at once (walking 9.5 billion ticks would take hours)."""
    script = (
        "from datetime import timedelta\n"
        "from stepstone import Schedule\n"
        "s = Schedule('sec', every=timedelta(seconds=1), job=print)\n"
        f"ticks = s.ticks_between(-6e9, {START})\n"
        f"assert [t.timestamp() for t in ticks] == [{START} - n for n in range(99, -1, -1)]\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()


@pytest.mark.parametrize(
    "tick", [math.inf, math.nan, 1e20, -1e12, START + 10 * 365 * 86_400, "soon", None]
)
async def test_a_marker_that_could_not_be_real_is_repaired_and_the_schedule_fires(
    make_runner: Callable[..., JobRunner],
    store: MemoryStore,
    clock: FakeClock,
    counters: Counters,
    caplog: pytest.LogCaptureFixture,
    tick: object,
) -> None:
    """A marker holding NaN, inf, a time centuries off or ten years ahead,
    or no number at all, is set to now with a warning naming it; the
    schedule's next tick runs."""
    schedule = every_five_minutes()
    key = Layout("").schedule(schedule.name)
    await store.put(key, pack({"tick": tick}) if tick is not None else b"\xc1 garbage")
    caplog.set_level(logging.WARNING, logger="stepstone.schedules")
    async with make_runner(jobs=WAIT_JOBS, schedules=[schedule]) as runner:
        repaired = START + 10 - SCHEDULE_CLOCK_SKEW  # as for a schedule first seen
        await wait_until(lambda: _marker_at(runner, schedule, repaired), message="repaired")
        await advance(clock, 300)
        await wait_until(lambda: len(ticks_run(counters)) == 1, message="the next tick")
    assert any(key in record.getMessage() for record in caplog.records), caplog.text

"""Schedule policies: overlap (skip, buffer one, buffer all, cancel the
running one, allow all), the catch-up window, pause and resume kept in the
store, backfill. Each tick runs once across two runners, on every store.
Time is a FakeClock; a tick's run stays live until the test lets it go."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from schedule_jobs import SCHEDULE_JOBS, HeldTick
from wait_jobs import WAIT_JOBS, Tick
from wf_jobs import Counters

from stepstone import JobRunner, Schedule
from stepstone.errors import ScheduleRefused
from stepstone.records.outcome import OutcomeRecord, decode_outcome_key
from stepstone.runtime.status import JobStatus
from stepstone.schedule_overlap import Overlap
from stepstone.schedules import BUFFER_LOOK, MAX_BACKFILL, SCHEDULE_CLOCK_SKEW, Backfilled
from stepstone.store import NotFound
from stepstone.testing import FakeClock, advance, wait_until

START = datetime(2026, 3, 2, 12, 0, tzinfo=UTC).timestamp()  # on a 5-minute tick
FIVE = 300.0
STORES = ["memory-queue", "store-queue", "files"]
FLEET_STORES = [*STORES, "s3"]


def tick(n: int) -> str:
    """The n-th tick after START, as the job gets it."""
    return datetime.fromtimestamp(START + FIVE * n, UTC).isoformat()


def held(overlap: Overlap, **kwargs: object) -> Schedule:
    return Schedule(
        "held",
        every=timedelta(minutes=5),
        job=lambda at: HeldTick(at=at.isoformat()),
        overlap=overlap,
        **kwargs,  # type: ignore[arg-type]
    )


def started(counters: Counters) -> dict[str, int]:
    return {
        k.removeprefix("start:"): v for k, v in counters.counts.items() if k.startswith("start:")
    }


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START + 10)


def on(stores: list[str]) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("make_runner", stores, indirect=True)


async def _outcome(runner: JobRunner, run_id: str) -> OutcomeRecord | None:
    try:
        stored = await runner.store.get(runner.layout.outcome(run_id))
    except NotFound:
        return None
    found = decode_outcome_key(stored.data)
    return found if isinstance(found, OutcomeRecord) else None


async def _let_go(runner: JobRunner, schedule: Schedule, counters: Counters) -> None:
    """Let every started run that is still live end, and wait for their outcomes."""
    run_ids = [schedule.run_id(datetime.fromisoformat(at)) for at in started(counters)]
    for run_id in run_ids:
        if await _outcome(runner, run_id) is None:
            await runner.send_event(run_id, "done")
    for run_id in run_ids:
        await wait_until(lambda r=run_id: _ended(runner, r), message=f"run {run_id} ended")


async def _ended(runner: JobRunner, run_id: str) -> bool:
    return await _outcome(runner, run_id) is not None


async def _marker_at(runner: JobRunner, schedule: Schedule, at: float) -> bool:
    return await runner.scheduler.last_tick(schedule) == at


# What each policy starts: when tick 2 and tick 3 come while tick 1's run is
# live, and after the runs are let go one by one.
AT_TICK_2 = {
    "allow_all": [1, 2],
    "skip": [1],
    "buffer_one": [1],
    "buffer_all": [1],
    "cancel_other": [1, 2],
}
AT_TICK_3 = {
    "allow_all": [1, 2, 3],
    "skip": [1],
    "buffer_one": [1],
    "buffer_all": [1],
    "cancel_other": [1, 2, 3],
}
LET_GO = {
    "allow_all": [1, 2, 3],
    "skip": [1],
    "buffer_one": [1, 2],
    "buffer_all": [1, 2, 3],
    "cancel_other": [1, 2, 3],
}
CANCELLED = {"cancel_other": [1, 2]}
SKIPPED_WHY = {
    "skip": "overlap skip",
    "buffer_one": "overlap buffer_one",
}


@on(FLEET_STORES)
@pytest.mark.parametrize("overlap", list(LET_GO))
async def test_each_policy_runs_each_tick_once_across_two_runners(
    make_runner: Callable[..., JobRunner],
    clock: FakeClock,
    counters: Counters,
    overlap: Overlap,
) -> None:
    schedule = held(overlap)
    jobs = [*WAIT_JOBS, *SCHEDULE_JOBS]
    async with (
        make_runner(jobs=jobs, schedules=[schedule]) as first,
        make_runner(jobs=jobs, schedules=[schedule]),
    ):
        await wait_until(lambda: _marker_at(first, schedule, START + 10 - SCHEDULE_CLOCK_SKEW))
        await advance(clock, FIVE)
        await wait_until(lambda: sorted(started(counters)) == [tick(1)], message="tick 1")
        for n, expected in ((2, AT_TICK_2), (3, AT_TICK_3)):
            await advance(clock, FIVE)
            await wait_until(lambda n=n: _marker_at(first, schedule, START + FIVE * n))
            want = [tick(k) for k in expected[overlap]]
            await wait_until(lambda w=want: sorted(started(counters)) == w, message=f"tick {n}")
        marker = await first.scheduler.marker(schedule.name)
        assert marker is not None
        if overlap in SKIPPED_WHY:
            assert marker.skipped_tick == START + FIVE * 3
            assert SKIPPED_WHY[overlap] in (marker.skipped_why or ""), marker.skipped_why
        want = [tick(k) for k in LET_GO[overlap]]
        while sorted(started(counters)) != want:  # each run let go, a buffered tick starts
            count = len(started(counters))
            await _let_go(first, schedule, counters)
            await advance(clock, BUFFER_LOOK)
            await wait_until(lambda c=count: len(started(counters)) > c, message="buffered tick")
        await _let_go(first, schedule, counters)
        for k in CANCELLED.get(overlap, []):
            ended = await _outcome(first, schedule.run_id(datetime.fromisoformat(tick(k))))
            assert ended is not None and ended.status is JobStatus.CANCELLED, (k, ended)
        # Nothing is live any more: the next tick starts, whatever the policy.
        await advance(clock, FIVE)
        await wait_until(lambda: tick(4) in started(counters), message="tick 4")
        await _let_go(first, schedule, counters)
    assert all(count == 1 for count in started(counters).values()), started(counters)
    assert sorted(started(counters)) == [*want, tick(4)]


@on(STORES)
async def test_buffer_one_starts_its_tick_as_soon_as_the_live_run_ends(
    make_runner: Callable[..., JobRunner], clock: FakeClock, counters: Counters
) -> None:
    """The buffered tick starts within BUFFER_LOOK of the live run's end,
    not at the schedule's next tick."""
    schedule = held("buffer_one")
    async with make_runner(jobs=SCHEDULE_JOBS, schedules=[schedule]) as runner:
        await wait_until(lambda: _marker_at(runner, schedule, START + 10 - SCHEDULE_CLOCK_SKEW))
        await advance(clock, FIVE)
        await wait_until(lambda: tick(1) in started(counters), message="tick 1")
        await advance(clock, FIVE)
        await wait_until(lambda: _buffered(runner, schedule, (START + 2 * FIVE,)))
        await _let_go(runner, schedule, counters)
        await advance(clock, BUFFER_LOOK)
        await wait_until(lambda: tick(2) in started(counters), message="the buffered tick")
        assert await _buffered(runner, schedule, ())
        await _let_go(runner, schedule, counters)


async def _buffered(runner: JobRunner, schedule: Schedule, ticks: tuple[float, ...]) -> bool:
    marker = await runner.scheduler.marker(schedule.name)
    return marker is not None and marker.buffered == ticks


@on(STORES)
@pytest.mark.parametrize(
    ("missed", "window", "after", "expected"),
    [
        ("all", timedelta(minutes=20), 3600, [9, 10, 11, 12]),  # the last 20 minutes
        ("all", None, 3600, list(range(1, 13))),  # no window: every tick missed
        ("latest", timedelta(minutes=20), 3600, [12]),
        ("latest", timedelta(minutes=2), 3800, []),  # the latest is older than the window
        ("skip", timedelta(hours=2), 3600, []),
    ],
)
async def test_the_catch_up_window_bounds_the_ticks_missed_that_run(
    make_runner: Callable[..., JobRunner],
    clock: FakeClock,
    counters: Counters,
    missed: str,
    window: timedelta | None,
    after: float,
    expected: list[int],
) -> None:
    schedule = Schedule(
        "five",
        every=timedelta(minutes=5),
        job=lambda at: Tick(at=at.isoformat()),
        missed=missed,  # type: ignore[arg-type]
        catch_up_window=window,
    )
    async with make_runner(jobs=WAIT_JOBS, schedules=[schedule]) as runner:
        await wait_until(lambda: _marker_at(runner, schedule, START + 10 - SCHEDULE_CLOCK_SKEW))
    await advance(clock, after)  # no worker: 12 ticks missed
    async with make_runner(jobs=WAIT_JOBS, schedules=[schedule]) as runner:
        await wait_until(lambda: _marker_at(runner, schedule, START + 3600), message="caught up")
        want = sorted(tick(n) for n in expected)
        await wait_until(lambda: sorted(_ticks(counters)) == want, message="missed ticks")
        marker = await runner.scheduler.marker(schedule.name)
        assert marker is not None
        if len(expected) < 12:
            assert marker.skipped_why is not None and "missed" in marker.skipped_why
    assert all(count == 1 for count in _ticks(counters).values())


def _ticks(counters: Counters) -> dict[str, int]:
    return {k.removeprefix("tick:"): v for k, v in counters.counts.items() if k.startswith("tick:")}


def five_minutes(**kwargs: object) -> Schedule:
    return Schedule(
        "five",
        every=timedelta(minutes=5),
        job=lambda at: Tick(at=at.isoformat()),
        **kwargs,  # type: ignore[arg-type]
    )


@on(FLEET_STORES)
async def test_a_pause_kept_in_the_store_holds_every_worker(
    make_runner: Callable[..., JobRunner], clock: FakeClock, counters: Counters
) -> None:
    """Paused by a process that carries no schedule (an operator's), two
    workers skip its ticks, saying why; resumed, the next tick runs."""
    schedule = five_minutes()
    async with (
        make_runner(jobs=WAIT_JOBS, schedules=[schedule]) as first,
        make_runner(jobs=WAIT_JOBS, schedules=[schedule]),
    ):
        await wait_until(lambda: _marker_at(first, schedule, START + 10 - SCHEDULE_CLOCK_SKEW))
        operator = make_runner()
        assert await operator.scheduler.pause("five", note="the database moves", by="ana")
        assert not await operator.scheduler.pause("five", note="still moving", by="ana")
        for n in (1, 2):
            await advance(clock, FIVE)
            await wait_until(lambda n=n: _marker_at(first, schedule, START + FIVE * n))
        marker = await first.scheduler.marker("five")
        assert marker is not None and marker.paused and marker.note == "still moving"
        assert marker.paused_by == "ana"
        assert marker.skipped_tick == START + 2 * FIVE
        assert marker.skipped_why == "the schedule was paused"
        assert _ticks(counters) == {}
        assert await operator.scheduler.resume("five")
        assert not await operator.scheduler.resume("five")
        await advance(clock, FIVE)
        await wait_until(lambda: list(_ticks(counters)) == [tick(3)], message="tick 3")
    assert _ticks(counters) == {tick(3): 1}


@on(STORES)
@pytest.mark.parametrize("missed", ["all", "latest"])
async def test_ticks_that_came_while_paused_do_not_run_on_resume(
    make_runner: Callable[..., JobRunner], clock: FakeClock, counters: Counters, missed: str
) -> None:
    """Paused and resumed while no worker ran: the ticks of the pause are not
    caught up, whatever ``missed`` says; those after the resume are."""
    schedule = five_minutes(missed=missed)
    async with make_runner(jobs=WAIT_JOBS, schedules=[schedule]) as runner:
        await wait_until(lambda: _marker_at(runner, schedule, START + 10 - SCHEDULE_CLOCK_SKEW))
    operator = make_runner()
    await operator.scheduler.pause("five")
    await advance(clock, 3600)  # 12 ticks, paused
    await operator.scheduler.resume("five")
    await advance(clock, 2 * FIVE)  # 2 ticks missed, not paused
    async with make_runner(jobs=WAIT_JOBS, schedules=[schedule]) as runner:
        await wait_until(lambda: _marker_at(runner, schedule, START + 4200), message="caught up")
        want = [tick(13), tick(14)] if missed == "all" else [tick(14)]
        await wait_until(lambda: sorted(_ticks(counters)) == want, message="ticks after resume")


@on(STORES)
async def test_a_schedule_no_worker_carried_cannot_be_paused_unless_defined(
    make_runner: Callable[..., JobRunner], clock: FakeClock, counters: Counters
) -> None:
    with pytest.raises(ScheduleRefused, match="no schedule 'nope'"):
        await make_runner().scheduler.pause("nope")
    with pytest.raises(ScheduleRefused, match="printable"):
        await make_runner(schedules=[five_minutes()]).scheduler.pause("five", note="a\nb")
    # Defined by the application: paused before any worker carried it.
    schedule = five_minutes()
    await make_runner(schedules=[schedule]).scheduler.pause("five", note="not yet")
    async with make_runner(jobs=WAIT_JOBS, schedules=[schedule]) as runner:
        await advance(clock, FIVE)
        await wait_until(lambda: _marker_at(runner, schedule, START + FIVE), message="tick 1")
    assert _ticks(counters) == {}


@on(STORES)
async def test_a_start_decided_and_cut_short_is_made_by_the_next_look(
    make_runner: Callable[..., JobRunner],
    clock: FakeClock,
    counters: Counters,
) -> None:
    """A process that wrote its decision to start a tick and died before it
    submitted the run: the next process to look submits it (one run)."""
    schedule = held("skip")
    async with make_runner(jobs=SCHEDULE_JOBS, schedules=[schedule]) as runner:
        await wait_until(lambda: _marker_at(runner, schedule, START + 10 - SCHEDULE_CLOCK_SKEW))
        stopped_at = await runner.scheduler.marker(schedule.name)
    assert stopped_at is not None
    one = datetime.fromisoformat(tick(1))
    cut_short = replace(
        stopped_at,
        tick=one.timestamp(),
        first=False,
        latest=schedule.run_id(one),
        latest_tick=one.timestamp(),
        pending=True,
    )
    await runner.store.put(runner.layout.schedule(schedule.name), cut_short.encode())
    await advance(clock, FIVE + 60)
    async with make_runner(jobs=SCHEDULE_JOBS, schedules=[schedule]) as runner:
        await wait_until(lambda: tick(1) in started(counters), message="the start cut short")
        await advance(clock, FIVE)  # tick 2: tick 1's run is live, skipped
        await wait_until(lambda: _marker_at(runner, schedule, START + 2 * FIVE))
        marker = await runner.scheduler.marker(schedule.name)
        assert marker is not None and not marker.pending
        await _let_go(runner, schedule, counters)
    assert started(counters) == {tick(1): 1}


@on(FLEET_STORES)
async def test_backfill_submits_each_tick_once_and_again_nothing(
    make_runner: Callable[..., JobRunner], clock: FakeClock, counters: Counters
) -> None:
    """Ticks the scheduler ran are not run again; a second backfill of the
    same range submits nothing; two backfills at once submit each tick once."""
    schedule = five_minutes()
    async with make_runner(jobs=WAIT_JOBS, schedules=[schedule]) as runner:
        await wait_until(lambda: _marker_at(runner, schedule, START + 10 - SCHEDULE_CLOCK_SKEW))
        for n in (1, 2):
            await advance(clock, FIVE)
            await wait_until(lambda n=n: tick(n) in _ticks(counters), message=f"tick {n}")
        begin = datetime.fromtimestamp(START - 3 * FIVE, UTC)
        end = datetime.fromtimestamp(START + 2 * FIVE, UTC)
        first, second = await _both(
            runner.scheduler.backfill("five", begin, end),
            make_runner(schedules=[schedule]).scheduler.backfill("five", begin, end),
        )
        submitted = sorted(first.submitted + second.submitted)
        assert [at.timestamp() for at, _ in submitted] == [
            START + FIVE * n for n in (-3, -2, -1, 0)
        ]
        want = sorted(tick(n) for n in range(-3, 3))
        await wait_until(lambda: sorted(_ticks(counters)) == want, message="backfilled ticks")
        again = await runner.scheduler.backfill("five", begin, end)
        assert again.submitted == []
        assert [at.timestamp() for at, _ in again.existing] == [
            START + FIVE * n for n in range(-3, 3)
        ]
    assert all(count == 1 for count in _ticks(counters).values()), _ticks(counters)


async def _both(
    one: Awaitable[Backfilled], other: Awaitable[Backfilled]
) -> tuple[Backfilled, Backfilled]:
    return await asyncio.gather(one, other)


@on(["memory-queue"])
async def test_backfill_refuses_what_it_cannot_do(
    make_runner: Callable[..., JobRunner], clock: FakeClock
) -> None:
    scheduler = make_runner(schedules=[five_minutes()]).scheduler
    now = datetime.fromtimestamp(clock.now(), UTC)
    with pytest.raises(ScheduleRefused, match="not defined by this application"):
        await make_runner().scheduler.backfill("five", now - timedelta(hours=1), now)
    with pytest.raises(ScheduleRefused, match="still to come"):
        await scheduler.backfill("five", now, now + timedelta(hours=1))
    with pytest.raises(ScheduleRefused, match="before its start"):
        await scheduler.backfill("five", now, now - timedelta(hours=1))
    with pytest.raises(ScheduleRefused, match=f"more than {MAX_BACKFILL} ticks"):
        await scheduler.backfill("five", now - timedelta(days=30), now)

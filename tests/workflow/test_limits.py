"""Concurrency keys and rate limits in a runner (MemoryQueue and StoreQueue
on one MemoryStore, a FakeClock): at most ``concurrency_limit`` runs of a key
at once, a full key holding up nobody else, waiting that spends no attempt,
starts kept to a rate. Across processes: test_limits_multiprocess.py."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, ClassVar

import pytest
from limit_jobs import (
    LIMIT_JOBS,
    Blocker,
    OneAtATime,
    Paced,
    PacedPerKey,
    SleepsHoldingKey,
    SlowlyPaced,
    ThreeAtATime,
    Tracker,
)

from stepstone import Job, JobContext, JobRunner, JobStatus, RateLimit
from stepstone.testing import FakeClock, advance, wait_until


@pytest.fixture
def tracker(clock: FakeClock) -> Tracker:
    return Tracker(clock)


@pytest.fixture
def make_limited(
    make_runner: Callable[..., JobRunner], tracker: Tracker
) -> Callable[..., JobRunner]:
    def make(**kwargs: Any) -> JobRunner:
        kwargs.setdefault("jobs", LIMIT_JOBS)
        kwargs.setdefault("state", [tracker])
        return make_runner(**kwargs)

    return make


async def status_of(runner: JobRunner, job_id: str) -> JobStatus | None:
    state = await runner.status(job_id)
    return None if state is None else state.status


async def test_runs_of_a_key_stay_within_its_limit_and_waiting_spends_no_attempt(
    make_limited: Callable[..., JobRunner], tracker: Tracker
) -> None:
    async with make_limited(concurrency=16) as runner:
        handles = [await runner.submit(OneAtATime(key=k, n=i)) for i in range(8) for k in "ab"]
        handles += [await runner.submit(ThreeAtATime(key="c", n=i)) for i in range(12)]
        outcomes = [await h.join(timeout=20) for h in handles]
    assert all(o.ok for o in outcomes), [o.error for o in outcomes if not o.ok]
    assert {o.attempts for o in outcomes} == {1}  # max_attempts is 1: no wait may spend one
    assert tracker.peak == {"a": 1, "b": 1, "c": 3}


async def test_a_full_key_holds_up_no_other_key(
    make_limited: Callable[..., JobRunner], tracker: Tracker
) -> None:
    # Two worker slots: the blocker takes one. Were a run that finds its key
    # full to wait in its slot, the first of them would take the other slot,
    # the rest would never be claimed, and the run of key "b" could not start.
    async with make_limited(concurrency=2) as runner:
        blocker = await runner.submit(Blocker(key="a"))
        await wait_until(lambda: tracker.inside["a"] == 1, message="the blocker runs")
        waiting = [await runner.submit(Blocker(key="a", n=i)) for i in range(1, 6)]
        for handle in waiting:
            await wait_until(
                lambda h=handle: _is(runner, h.id, JobStatus.WAITING_FOR_SLOT),
                message="each waits for the key, holding no worker",
            )
        state = await runner.status(waiting[-1].id)
        assert state is not None and state.waiting_for is not None
        assert state.waiting_for.startswith("key 'a'")
        other = await runner.submit(OneAtATime(key="b", n=7))
        assert await other.result(timeout=10) == 7
        assert tracker.inside["a"] == 1
        tracker.release.set()
        results = [await h.result(timeout=10) for h in [blocker, *waiting]]
    assert results == [f"a{i}" for i in range(6)]
    assert tracker.peak["a"] == 1


async def test_a_run_that_suspends_gives_its_slot_back(
    make_limited: Callable[..., JobRunner], clock: FakeClock, tracker: Tracker
) -> None:
    async with make_limited(concurrency=4) as runner:
        sleeper = await runner.submit(SleepsHoldingKey(key="a", seconds=60))
        await wait_until(
            lambda: _is(runner, sleeper.id, JobStatus.SLEEPING), message="the sleeper sleeps"
        )
        assert await (await runner.submit(OneAtATime(key="a", n=1))).result(timeout=10) == 1
        await advance(clock, 61)
        assert await sleeper.result(timeout=10) == "slept"


async def test_a_run_expired_for_its_lapsed_leases_frees_its_slot(
    make_limited: Callable[..., JobRunner], clock: FakeClock, tracker: Tracker
) -> None:
    # No heartbeat: the blocker's lease lapses when the clock passes it, as if
    # its worker had died; with max_lapses=1, the takeover expires it.
    async with make_limited(concurrency=4, heartbeat=0, lease=30, max_lapses=1) as runner:
        stuck = await runner.submit(Blocker(key="a"))
        await wait_until(lambda: tracker.inside["a"] == 1, message="the blocker runs")
        after = await runner.submit(Blocker(key="a", n=1))
        await wait_until(
            lambda: _is(runner, after.id, JobStatus.WAITING_FOR_SLOT), message="it waits"
        )
        await advance(clock, 31)
        outcome = await stuck.join(timeout=10)
        assert not outcome.ok and outcome.error is not None
        assert outcome.error.reason == "expired"
        # Woken by the expiry, not by the hour-long safety net.
        await wait_until(lambda: len(tracker.started) == 2, message="the next run starts")
        tracker.release.set()
        assert await after.result(timeout=10) == "a1"


async def test_a_lost_wake_keeps_a_free_slot_waiting_no_longer_than_a_lease(
    make_limited: Callable[..., JobRunner],
    clock: FakeClock,
    tracker: Tracker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The holder's release is written, the wake that should follow is lost
    # (as when its worker is killed between the two): the slot is free, and
    # the first run in line must find it by itself about a lease later, not
    # at the hour-long safety net.
    async with make_limited(concurrency=4, lease=30) as runner:
        holder = await runner.submit(Blocker(key="a"))
        await wait_until(lambda: tracker.inside["a"] == 1, message="the holder runs")
        first_in_line = await runner.submit(Blocker(key="a", n=1))
        await wait_until(
            lambda: _is(runner, first_in_line.id, JobStatus.WAITING_FOR_SLOT), message="it waits"
        )

        async def lost(run_id: str, waiting_for: JobStatus) -> bool:
            return True  # answered as sent; never arrives

        monkeypatch.setattr(runner.queue, "wake", lost)
        tracker.release.set()
        assert await holder.result(timeout=10) == "a0"
        await advance(clock, 31)
        assert await first_in_line.result(timeout=10) == "a1"


async def test_starts_keep_to_the_rate_limit(
    make_limited: Callable[..., JobRunner], clock: FakeClock, tracker: Tracker
) -> None:
    async with make_limited(concurrency=8) as runner:
        t0 = clock.now()
        handles = [await runner.submit(Paced(n=i)) for i in range(5)]
        for started in range(1, 6):
            await wait_until(lambda n=started: len(tracker.started) >= n, message="a start")  # type: ignore[misc]
            assert len(tracker.started) == started  # nobody ahead of their start
            await advance(clock, 0.5)
        outcomes = [await h.join(timeout=10) for h in handles]
    assert sorted(o.result - t0 for o in outcomes if o.result is not None) == [
        0.0,
        0.5,
        1.0,
        1.5,
        2.0,
    ]
    assert {o.attempts for o in outcomes} == {1}


async def test_a_rate_limit_key_gives_each_key_its_own_rate(
    make_limited: Callable[..., JobRunner], clock: FakeClock, tracker: Tracker
) -> None:
    async with make_limited(concurrency=8) as runner:
        t0 = clock.now()
        handles = [await runner.submit(PacedPerKey(key=k, n=i)) for i in range(2) for k in "xy"]
        await wait_until(lambda: len(tracker.started) == 2, message="one start per key")
        await advance(clock, 1.0)
        starts = [await h.result(timeout=10) - t0 for h in handles]
    # Whichever of its two runs a key started first, it started the other a second later.
    assert sorted(starts[0::2]) == sorted(starts[1::2]) == [0.0, 1.0]


async def test_a_run_waiting_for_its_start_shows_it(
    make_limited: Callable[..., JobRunner], clock: FakeClock, tracker: Tracker
) -> None:
    async with make_limited(concurrency=8) as runner:
        await runner.submit(Paced(n=0))
        await wait_until(lambda: len(tracker.started) == 1, message="the first starts")
        second = await runner.submit(Paced(n=1))
        await wait_until(
            lambda: _is(runner, second.id, JobStatus.RATE_LIMITED), message="it waits for its start"
        )
        state = await runner.status(second.id)
        assert state is not None and state.waiting_for is not None
        assert state.waiting_for.startswith("rate limited until ")
        assert state.run_at == clock.now() + 0.5
        await advance(clock, 0.5)
        await second.result(timeout=10)


async def test_a_run_that_sleeps_after_its_start_does_not_take_another(
    make_limited: Callable[..., JobRunner], clock: FakeClock, tracker: Tracker
) -> None:
    # One start a minute: the sleeper's start is t0, the next run's t0 + 60; a
    # start the sleeper took again on resuming would be t0 + 120.
    async with make_limited(concurrency=8) as runner:
        t0 = clock.now()
        sleeper = await runner.submit(SlowlyPaced(n=0, sleep=5.0))
        await wait_until(lambda: _is(runner, sleeper.id, JobStatus.SLEEPING), message="it sleeps")
        later = await runner.submit(SlowlyPaced(n=1))
        await wait_until(
            lambda: _is(runner, later.id, JobStatus.RATE_LIMITED), message="rate limited"
        )
        await advance(clock, 5.0)
        assert await sleeper.result(timeout=10) == t0  # it went on at once
        await advance(clock, 55.0)
        assert await later.result(timeout=10) == t0 + 60.0


class BadLimit(Job[None]):
    NAME: ClassVar[str] = "limits.bad-limit"
    concurrency_limit: ClassVar[int] = 0

    async def run(self, ctx: JobContext) -> None:
        return None


class BadRate(Job[None]):
    NAME: ClassVar[str] = "limits.bad-rate"
    rate_limit: ClassVar[Any] = 10

    async def run(self, ctx: JobContext) -> None:
        return None


class NumberKey(Job[None]):
    NAME: ClassVar[str] = "limits.number-key"
    max_attempts: ClassVar[int] = 1

    def concurrency_key(self) -> str:
        return 42  # type: ignore[return-value]

    async def run(self, ctx: JobContext) -> None:
        return None


async def test_a_key_that_is_not_a_string_fails_the_run_saying_so() -> None:
    async with JobRunner("memory://", jobs=[NumberKey]) as runner:
        outcome = await (await runner.submit(NumberKey())).join(timeout=10)
    assert outcome.error is not None
    assert "NumberKey.concurrency_key() must return a str or None" in outcome.error.message


def test_a_runner_refuses_limits_that_make_no_sense() -> None:
    with pytest.raises(ValueError, match="concurrency_limit"):
        JobRunner("memory://", jobs=[BadLimit])
    with pytest.raises(TypeError, match="RateLimit"):
        JobRunner("memory://", jobs=[BadRate])
    assert RateLimit(100, per=timedelta(seconds=1)).interval == 0.01


async def _is(runner: JobRunner, job_id: str, status: JobStatus) -> bool:
    return await status_of(runner, job_id) is status


async def test_a_slot_is_held_a_lease_past_its_runs_lease(
    make_limited: Callable[..., JobRunner], clock: FakeClock, tracker: Tracker
) -> None:
    # Room for the slot's renewal, which follows the lease's and may wait for
    # the key object's turn on a store that takes a write a second to it: a
    # slot held only as long as the lease lapses under a live run there.
    from stepstone.limits import slots
    from stepstone.limits.shared import SharedObject

    async with make_limited(concurrency=4, lease=30) as runner:
        blocker = await runner.submit(Blocker(key="a"))
        await wait_until(lambda: tracker.inside["a"] == 1, message="the blocker runs")
        state = await runner.status(blocker.id)
        assert state is not None and state.lease_expires_at is not None
        (key,) = [o.key for o in await runner.store.list("") if "/slots/" in f"/{o.key}"]
        table = SharedObject(
            runner.store, key, clock, to_fields=slots.to_fields, from_fields=slots.from_fields
        )
        held = await table.update(lambda s, now: (s, s))
        assert held is not None and [h.run for h in held.holders] == [blocker.id]
        assert held.holders[0].until == pytest.approx(state.lease_expires_at + 30)
        tracker.release.set()
        assert await blocker.result(timeout=10) == "a0"

"""Durable waits: a run sleeps, waits for an event or for its children
holding no worker, and resumes where it left off.

Time is a FakeClock: a 30-day sleep takes as long as the test's bookkeeping.
Every runner here has concurrency 1, so a job that finishes while another
waits proves the waiting one gave its slot back. Each scenario runs on the
MemoryQueue, and on the StoreQueue over memory, a real directory and moto's S3.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from wait_jobs import (
    WAIT_JOBS,
    Approval,
    AwaitsApproval,
    KeyMaker,
    Parent,
    Quick,
    Sleeper,
    SyncWaiter,
    TwoEvents,
)
from wf_jobs import Counters
from wf_support import ON_EVERY_STORE

from stepstone import EventRefused, JobRunner, JobStatus
from stepstone.testing import FakeClock, advance, run_job, wait_until

pytestmark = ON_EVERY_STORE

DAY = 86_400.0


@pytest.fixture
def make_waiter(make_runner: Callable[..., JobRunner]) -> Callable[..., JobRunner]:
    def make(**kwargs: object) -> JobRunner:
        kwargs.setdefault("jobs", WAIT_JOBS)
        kwargs.setdefault("concurrency", 1)
        return make_runner(**kwargs)

    return make


async def status_of(runner: JobRunner, job_id: str) -> JobStatus | None:
    state = await runner.status(job_id)
    return None if state is None else state.status


async def test_a_30_day_sleep_holds_no_worker_and_resumes_once(
    make_waiter: Callable[..., JobRunner], clock: FakeClock, counters: Counters
) -> None:
    async with make_waiter() as runner:
        sleeper = await runner.submit(Sleeper(key="a", seconds=30 * DAY))
        await wait_until(lambda: status_of(runner, sleeper.id), message="submitted")
        await wait_until(
            lambda: _is(runner, sleeper.id, JobStatus.SLEEPING), message="the sleeper suspends"
        )
        state = await runner.status(sleeper.id)
        assert state is not None and state.waiting_for is not None
        assert state.waiting_for.startswith("until ")
        # concurrency=1: this runs only because the sleeper gave its slot back
        assert await run_job(runner, Quick(tag="b")) == "b"

        await advance(clock, 30 * DAY - 1)
        assert await status_of(runner, sleeper.id) is JobStatus.SLEEPING
        await advance(clock, 1)
        assert await sleeper.result(timeout=10) == "before-after"
    assert counters.counts["before:a"] == 1
    assert counters.counts["after:a"] == 1


async def test_a_restart_sleeps_until_the_recorded_wake_time_not_again(
    make_waiter: Callable[..., JobRunner], clock: FakeClock, counters: Counters
) -> None:
    async with make_waiter() as first:
        handle = await first.submit(Sleeper(key="r", seconds=100))
        await wait_until(lambda: _is(first, handle.id, JobStatus.SLEEPING), message="asleep")
    await advance(clock, 60)
    async with make_waiter() as second:  # a new process; 40 s of the sleep are left
        await wait_until(lambda: _is(second, handle.id, JobStatus.SLEEPING), message="still asleep")
        await advance(clock, 40)
        assert await second.handle(handle.id, Sleeper).result(timeout=10) == "before-after"
    assert counters.counts["before:r"] == 1


async def test_an_event_wakes_the_waiting_run_and_arrives_typed(
    make_waiter: Callable[..., JobRunner], clock: FakeClock, counters: Counters
) -> None:
    async with make_waiter() as runner:
        handle = await runner.submit(AwaitsApproval(order="o-1"))
        await wait_until(
            lambda: _is(runner, handle.id, JobStatus.WAITING_FOR_EVENT), message="waiting"
        )
        state = await runner.status(handle.id)
        assert state is not None and state.waiting_for == "approval"
        assert await run_job(runner, Quick(tag="meanwhile")) == "meanwhile"
        sender = make_waiter(jobs=[])  # no worker: an API process
        approval = Approval(approved=True, by="ada")
        await sender.send_event(AwaitsApproval(order="o-1"), "approval", approval)
        assert await handle.result(timeout=10) == "approved by ada"
    assert counters.counts["approval-run:o-1"] == 2  # ran, suspended, resumed


async def test_an_event_sent_before_the_wait_is_kept(
    make_waiter: Callable[..., JobRunner],
) -> None:
    api = make_waiter(jobs=[])
    handle = await api.submit(AwaitsApproval(order="early"))
    await api.send_event(handle.id, "approval", {"approved": False, "by": "bob"})
    async with make_waiter():
        assert await handle.result(timeout=10) == "refused by bob"


async def test_a_wait_times_out_with_none_on_the_clock(
    make_waiter: Callable[..., JobRunner], clock: FakeClock
) -> None:
    async with make_waiter() as runner:
        handle = await runner.submit(AwaitsApproval(order="late", timeout=3600))
        await wait_until(lambda: _is(runner, handle.id, JobStatus.WAITING_FOR_EVENT))
        await advance(clock, 3600)
        assert await handle.result(timeout=10) == "timed out"
        with pytest.raises(EventRefused, match="finished"):
            await runner.send_event(handle.id, "approval", {"approved": True, "by": "x"})


async def test_each_event_is_taken_once_in_the_order_sent(
    make_waiter: Callable[..., JobRunner], clock: FakeClock
) -> None:
    api = make_waiter(jobs=[])
    handle = await api.submit(TwoEvents(key="k"))
    await api.send_event(handle.id, "ping", "one")
    await advance(clock, 1)
    await api.send_event(handle.id, "ping", "two")
    async with make_waiter():
        assert await handle.result(timeout=10) == ["one", "two"]


async def test_sending_to_an_unknown_run_is_refused(make_waiter: Callable[..., JobRunner]) -> None:
    api = make_waiter(jobs=[])
    with pytest.raises(EventRefused, match="no live run"):
        await api.send_event("ab" * 32, "approval", None)
    with pytest.raises(TypeError, match="idempotency key"):
        await api.send_event(Quick(tag="x"), "approval", None)


async def test_a_parent_with_ten_children_completes_on_one_slot(
    make_waiter: Callable[..., JobRunner], counters: Counters
) -> None:
    async with make_waiter() as runner:
        total = await run_job(runner, Parent(children=10), timeout=30)
    assert total == sum(i * i for i in range(10))
    assert all(counters.counts[f"child:{i}"] == 1 for i in range(10))


async def test_a_failed_child_reaches_its_parent_as_job_failed(
    make_waiter: Callable[..., JobRunner],
) -> None:
    async with make_waiter() as runner:
        total = await run_job(runner, Parent(children=3, failing=(1,)), timeout=30)
    assert total == 0 + 4 - 1000


async def test_an_outside_key_is_the_same_on_every_attempt(
    make_waiter: Callable[..., JobRunner],
) -> None:
    async with make_waiter() as runner:
        first_charge, first_refund, charge, refund = await run_job(runner, KeyMaker())
    assert (charge, refund) == (first_charge, first_refund)
    assert charge != refund


async def _is(runner: JobRunner, job_id: str, status: JobStatus) -> bool:
    return await status_of(runner, job_id) is status


async def test_a_synchronous_job_sleeps_and_waits_through_ctx_sync(
    make_waiter: Callable[..., JobRunner], clock: FakeClock, counters: Counters
) -> None:
    async with make_waiter() as runner:
        handle = await runner.submit(SyncWaiter(key="s"))
        await wait_until(lambda: _is(runner, handle.id, JobStatus.SLEEPING), message="asleep")
        await advance(clock, 60)
        await wait_until(
            lambda: _is(runner, handle.id, JobStatus.WAITING_FOR_EVENT), message="waiting"
        )
        await runner.send_event(handle.id, "word", "hello")
        assert await handle.result(timeout=10) == "slept, then heard hello"
    assert counters.counts["sync-first:s"] == 1

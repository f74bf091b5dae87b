"""Singleton keys: what a submit does when a run of its key is live, by
policy (queue, skip, cancel_running, skip_newest), in a runner (MemoryQueue
and StoreQueue on a MemoryStore). Across processes, with workers SIGKILLed:
test_singleton_multiprocess.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from singleton_jobs import SINGLETON_JOBS, CancelSync, Gates, NewestSync, SkipSync, Sync

from stepstone import JobCancelled, JobRunner, JobStatus
from stepstone.limits.shared import SharedObject
from stepstone.records import singleton_runs as rules
from stepstone.records.layout import Layout, limit_digest
from stepstone.runtime.store_queue.records import CorruptRecord
from stepstone.store import MemoryStore
from stepstone.testing import FakeClock, wait_until


@pytest.fixture
def gates() -> Gates:
    return Gates()


@pytest.fixture
def make_singleton(make_runner: Callable[..., JobRunner], gates: Gates) -> Callable[..., JobRunner]:
    def make(**kwargs: Any) -> JobRunner:
        kwargs.setdefault("jobs", SINGLETON_JOBS)
        kwargs.setdefault("state", [gates])
        return make_runner(**kwargs)

    return make


def started(gates: Gates, n: int) -> Callable[[], bool]:
    return lambda: (n, "start") in [(m, what) for _, m, what in gates.noted]


async def test_skip_joins_the_live_run_and_a_submit_after_it_ends_starts_one(
    make_singleton: Callable[..., JobRunner], gates: Gates
) -> None:
    async with make_singleton() as runner:
        live = await runner.submit(SkipSync(n=1))
        await wait_until(started(gates, 1))
        joined = [await runner.submit(SkipSync(n=n)) for n in (2, 3)]
        assert [h.id for h in joined] == [live.id, live.id]
        assert not any(h.newly_submitted for h in joined)
        other_key = await runner.submit(SkipSync(account="acct-2", n=9))
        assert other_key.id != live.id
        gates.open(1, 9)
        assert [await h.result(timeout=10) for h in (live, *joined)] == ["ran 1"] * 3
        after = await runner.submit(SkipSync(n=4))
        assert after.id != live.id and after.newly_submitted
        gates.open(4)
        assert await after.result(timeout=10) == "ran 4"
    assert [n for _, n, what in gates.noted if what == "start"] == [1, 9, 4]


async def test_cancel_running_cancels_the_live_run_and_starts_once_it_stopped(
    make_singleton: Callable[..., JobRunner], gates: Gates
) -> None:
    async with make_singleton() as runner:
        first = await runner.submit(CancelSync(n=1))
        await wait_until(started(gates, 1))
        second = await runner.submit(CancelSync(n=2))
        assert second.id != first.id
        with pytest.raises(JobCancelled):
            await first.result(timeout=10)
        await wait_until(started(gates, 2))
        gates.open(2)
        assert await second.result(timeout=10) == "ran 2"
    assert [(n, what) for _, n, what in gates.noted] == [
        (1, "start"),
        (1, "stopped"),
        (2, "start"),
        (2, "end"),
    ]


async def test_skip_newest_records_the_new_run_cancelled_naming_the_live_one(
    make_singleton: Callable[..., JobRunner], gates: Gates
) -> None:
    async with make_singleton() as runner:
        live = await runner.submit(NewestSync(n=1))
        await wait_until(started(gates, 1))
        newest = await runner.submit(NewestSync(n=2))
        assert newest.id != live.id
        outcome = await newest.join(timeout=1)
        assert outcome.status is JobStatus.CANCELLED and outcome.error is not None
        assert f"skipped: run {live.id}" in outcome.error.message
        recorded = await runner.outcome(newest.id, str)
        assert recorded is not None and recorded.status is JobStatus.CANCELLED
        gates.open(1)
        assert await live.result(timeout=10) == "ran 1"
        after = await runner.submit(NewestSync(n=3))
        gates.open(3)
        assert await after.result(timeout=10) == "ran 3"
    assert [n for _, n, what in gates.noted if what == "start"] == [1, 3]


async def test_queue_runs_each_in_turn(
    make_singleton: Callable[..., JobRunner], gates: Gates
) -> None:
    async with make_singleton() as runner:
        first = await runner.submit(Sync(n=1))
        await wait_until(started(gates, 1))
        second = await runner.submit(Sync(n=2))

        async def waiting() -> bool:
            state = await runner.status(second.id)
            return state is not None and state.status is JobStatus.WAITING_FOR_SLOT

        await wait_until(waiting)
        gates.open(1, 2)
        assert [await first.result(timeout=10), await second.result(timeout=10)] == [
            "ran 1",
            "ran 2",
        ]
    assert [(n, what) for _, n, what in gates.noted] == [
        (1, "start"),
        (1, "end"),
        (2, "start"),
        (2, "end"),
    ]


async def test_a_dead_live_run_is_not_joined(
    make_singleton: Callable[..., JobRunner], gates: Gates
) -> None:
    async with make_singleton() as runner:
        live = await runner.submit(SkipSync(n=1))
        await wait_until(started(gates, 1))
        assert await runner.cancel(live.id)
        after = await runner.submit(SkipSync(n=2))
        assert after.id != live.id
        gates.open(2)
        assert await after.result(timeout=10) == "ran 2"


async def test_a_live_run_its_submitter_did_not_enqueue_is_enqueued_by_the_next(
    make_singleton: Callable[..., JobRunner], gates: Gates, store: MemoryStore, clock: FakeClock
) -> None:
    # What a submit that died between its write and its enqueue leaves.
    live_run = SharedObject(
        store,
        Layout().singleton(limit_digest(SkipSync.NAME, "acct-1")),
        clock,
        to_fields=rules.to_fields,
        from_fields=rules.from_fields,
    )
    orphan = "cd" * 16
    data = SkipSync(n=1).model_dump_json().encode()
    await live_run.update(
        lambda state, now: rules.start(
            state, job=SkipSync.NAME, key="acct-1", run=orphan, data=data, replacing=False, now=now
        )
    )
    async with make_singleton() as runner:
        joined = await runner.submit(SkipSync(n=2))
        assert joined.id == orphan
        gates.open(1)
        assert await joined.result(timeout=10) == "ran 1"


def test_a_stored_object_that_is_no_live_run_is_named() -> None:
    with pytest.raises(CorruptRecord, match="singletons/x"):
        rules.from_fields(
            {"job": "j", "key": "k", "run": "r", "since": 1, "input": 3}, "singletons/x"
        )


async def test_a_singleton_type_with_a_limit_above_one_is_refused() -> None:
    class Wide(SkipSync):
        NAME = "singleton-wide"
        concurrency_limit = 2

    runner = JobRunner(MemoryStore(), jobs=[Wide])
    with pytest.raises(ValueError, match="concurrency_limit is 1"):
        await runner.submit(Wide(n=1))
    await runner.close()

"""Attempt history: each claim of a run, recorded as it ends (the settling one
in the outcome record), read back in order by runner.history."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import pytest
from wait_jobs import Sleeper
from wf_jobs import Counters
from wf_support import wait_until

from stepstone import (
    AttemptInfo,
    AttemptResult,
    Job,
    JobContext,
    JobRunner,
    JobStatus,
    Permanent,
)
from stepstone.ops.actions import purge, retry
from stepstone.records.outcome import Tombstone, decode_outcome_key
from stepstone.store import MemoryStore, NotFound
from stepstone.testing import FakeClock, advance

MakeRunner = Callable[..., JobRunner]


class FailsTwice(Job[int]):
    NAME: ClassVar[str] = "test.history.fails-twice"
    tag: str = ""

    async def run(self, ctx: JobContext) -> int:
        if ctx.attempt < 3:
            raise ConnectionError(f"refused on attempt {ctx.attempt}")
        return ctx.attempt


class DiesOnce(Job[int]):
    """Fails for good the first time it runs; succeeds when run again."""

    NAME: ClassVar[str] = "test.history.dies-once"

    async def run(self, ctx: JobContext) -> int:
        if ctx.state(Counters).hit("dies-once") == 1:
            raise Permanent("not today")
        return 1


class Waits(Job[int]):
    NAME: ClassVar[str] = "test.history.waits"

    async def run(self, ctx: JobContext) -> int:
        ctx.state(Counters).started.set()
        await ctx.state(Counters).gate.wait()
        return 1


async def attempt_keys(store: MemoryStore, runner: JobRunner) -> list[str]:
    prefix = runner.layout.attempts("").rstrip("/")
    return [info.key async for info in store.scan(prefix)]


async def test_each_claim_is_recorded_with_its_worker_times_and_error(
    make_runner: MakeRunner,
) -> None:
    async with make_runner(jobs=[FailsTwice]) as runner:
        handle = await runner.submit(FailsTwice())
        assert await handle.result(timeout=10) == 3
        history = await runner.history(handle.id)

    assert [(a.claim, a.number, a.result) for a in history] == [
        (1, 1, AttemptResult.FAILED),
        (2, 2, AttemptResult.FAILED),
        (3, 3, AttemptResult.SUCCEEDED),
    ]
    for attempt in history:
        assert (attempt.worker, attempt.host, attempt.pid) == (
            runner.worker.worker_id,
            socket.gethostname(),
            os.getpid(),
        )
        assert attempt.claimed_at is not None and attempt.ended_at is not None
        assert attempt.claimed_at <= attempt.ended_at
    first = history[0]
    assert first.error_type == "ConnectionError"
    assert first.message == "ConnectionError: refused on attempt 1"
    assert first.traceback is not None and 'raise ConnectionError(f"refused' in first.traceback
    assert history[2].error_type is None and history[2].message is None


async def test_only_the_claims_the_outcome_does_not_describe_write_a_record(
    make_runner: MakeRunner, store: MemoryStore
) -> None:
    async with make_runner(jobs=[FailsTwice, Sleeper]) as runner:
        handle = await runner.submit(FailsTwice())
        await handle.result(timeout=10)
        assert len(await attempt_keys(store, runner)) == 2  # the two failures, not the success
        quick = await runner.submit(Sleeper(key="no-sleep", seconds=0))
        assert await quick.result(timeout=10) == "before-after"
        assert len(await attempt_keys(store, runner)) == 2  # a first-time success: none


async def test_a_dead_run_ends_its_history_with_the_outcome_error(
    make_runner: MakeRunner,
) -> None:
    async with make_runner(jobs=[FailsTwice], max_attempts=2) as runner:
        handle = await runner.submit(FailsTwice())
        outcome = await handle.join(timeout=10)
        history = await runner.history(handle.id)
    assert outcome.status is JobStatus.FAILED
    assert [a.result for a in history] == [AttemptResult.FAILED, AttemptResult.DEAD]
    dead = history[-1]
    assert dead.message == "exhausted: ConnectionError: refused on attempt 2"
    assert dead.traceback is not None and dead.worker == runner.worker.worker_id


async def test_a_durable_sleep_is_a_claim_of_its_own(
    make_runner: MakeRunner, clock: FakeClock
) -> None:
    async with make_runner(jobs=[Sleeper]) as runner:
        handle = await runner.submit(Sleeper(key="h", seconds=600))
        await wait_until(lambda: runner.worker.stats.suspended == 1)
        await advance(clock, 600)
        assert await handle.result(timeout=10) == "before-after"
        history = await runner.history(handle.id)
    assert [(a.claim, a.number, a.result) for a in history] == [
        (1, 1, AttemptResult.SUSPENDED),
        (2, 1, AttemptResult.SUCCEEDED),  # a sleep spends no attempt
    ]
    assert history[0].message is not None and history[0].message.startswith("sleeping: until ")


async def test_a_drain_a_lost_lease_and_a_cancel_each_say_so(
    make_runner: MakeRunner, clock: FakeClock, counters: Counters
) -> None:
    drained = make_runner(jobs=[Waits], drain_timeout=0.05)
    async with drained:
        handle = await drained.submit(Waits())
        await wait_until(counters.started.is_set)
    counters.started.clear()

    stalled = make_runner(jobs=[Waits], concurrency=1, lease=10, heartbeat=0, drain_timeout=5)
    async with stalled:
        await wait_until(counters.started.is_set)
        clock.advance(30)  # its lease lapses while it waits
        counters.started.clear()
        async with make_runner(jobs=[Waits], lease=10, heartbeat=0) as other:
            await wait_until(counters.started.is_set)
            assert await other.cancel(handle.id)
            counters.gate.set()
            await wait_until(lambda: other.worker.stats.cancelled == 1)
        await wait_until(lambda: stalled.worker.stats.lost == 1)
        history = await stalled.history(handle.id)
    assert [(a.claim, a.result) for a in history] == [
        (1, AttemptResult.RELEASED),
        (2, AttemptResult.LOST),  # the stalled worker: another took the run over
        (3, AttemptResult.CANCELLED),  # the cancel ended it while it ran
    ]
    assert [a.worker for a in history] == [
        drained.worker.worker_id,
        stalled.worker.worker_id,
        other.worker.worker_id,
    ]


async def test_history_off_writes_no_records_and_reads_gaps(make_runner: MakeRunner) -> None:
    async with make_runner(jobs=[FailsTwice], history=False) as runner:
        handle = await runner.submit(FailsTwice())
        await handle.result(timeout=10)
        history = await runner.history(handle.id)
    assert [(a.claim, a.result) for a in history] == [
        (1, AttemptResult.UNRECORDED),
        (2, AttemptResult.UNRECORDED),
        (3, AttemptResult.SUCCEEDED),
    ]


async def test_an_unknown_run_has_no_history(runner: JobRunner) -> None:
    assert await runner.history("0" * 32) == []


async def test_a_retried_dead_run_keeps_the_claim_it_died_in(
    make_runner: MakeRunner, counters: Counters
) -> None:
    async with make_runner(jobs=[DiesOnce]) as runner:
        handle = await runner.submit(DiesOnce())
        assert (await handle.join(timeout=10)).status is JobStatus.FAILED
        await wait_until(lambda: runner.worker.stats.dead == 1)
        assert await retry(runner, handle.id) is None
        assert await runner.handle(handle.id, DiesOnce).result(timeout=10) == 1
        history = await runner.history(handle.id)
    assert [(a.claim, a.result) for a in history] == [
        (1, AttemptResult.DEAD),
        (2, AttemptResult.SUCCEEDED),
    ]
    assert history[0].message == "permanent: Permanent: not today"


async def test_retention_and_purge_remove_the_history_with_the_run(
    make_runner: MakeRunner, store: MemoryStore, clock: FakeClock
) -> None:
    async with make_runner(jobs=[FailsTwice], retention=60, sweep_interval=1) as runner:
        swept = await runner.submit(FailsTwice(tag="swept"))
        await swept.result(timeout=10)
        assert len(await attempt_keys(store, runner)) == 2
        await advance(clock, 120)
        # The sweep deletes a run's attempts first and tombstones its outcome
        # last: wait for the whole of it, or the purge below finds the rest.
        await wait_until(lambda: _swept(store, runner, swept.id))

    async with make_runner(jobs=[FailsTwice]) as runner:
        handle = await runner.submit(FailsTwice(tag="purged"))
        await handle.result(timeout=10)
    assert len(await attempt_keys(store, runner)) == 2
    clock.advance(3600)
    assert await purge(runner, 60) == [handle.id]
    assert await attempt_keys(store, runner) == []


async def _swept(store: MemoryStore, runner: JobRunner, run_id: str) -> bool:
    if await attempt_keys(store, runner):
        return False
    try:
        stored = await store.get(runner.layout.outcome(run_id))
    except NotFound:
        return True
    return isinstance(decode_outcome_key(stored.data), Tombstone)


SPAWN = mp.get_context("spawn")
CRASH = "STEPSTONE_TEST_CRASH_IN_RUN"


class CrashesOnce(Job[int]):
    NAME: ClassVar[str] = "test.history.crashes-once"

    async def run(self, ctx: JobContext) -> int:
        if os.environ.get(CRASH):
            os._exit(3)  # as a SIGKILL would: nothing after this runs
        return ctx.attempt


def _worker_that_crashes(root: str) -> None:
    os.environ[CRASH] = "1"

    async def main() -> None:
        async with JobRunner(root, jobs=[CrashesOnce], lease=1.0, poll_interval=0.05):
            await asyncio.sleep(60)

    asyncio.run(main())


@pytest.mark.slow
async def test_a_claim_whose_worker_died_reads_unrecorded(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    submitter = JobRunner(str(root))
    handle = await submitter.submit(CrashesOnce())
    child = SPAWN.Process(target=_worker_that_crashes, args=(str(root),))
    child.start()
    await asyncio.to_thread(child.join, 60)
    assert child.exitcode == 3

    async with JobRunner(str(root), jobs=[CrashesOnce], poll_interval=0.05) as worker:
        # Taken over on the attempt its dead worker began: a lapse costs none.
        assert await worker.handle(handle.id, CrashesOnce).result(timeout=30) == 1
        history = await worker.history(handle.id)
    assert [(a.claim, a.number, a.result) for a in history] == [
        (1, None, AttemptResult.UNRECORDED),
        (2, 1, AttemptResult.SUCCEEDED),
    ]
    assert history[1].pid == os.getpid()
    await submitter.close()


def test_attempt_info_is_a_frozen_value() -> None:
    info = AttemptInfo(1, 1, AttemptResult.FAILED, claimed_at=10.0, ended_at=12.5)
    assert info.seconds == 2.5
    with pytest.raises(AttributeError):
        info.result = AttemptResult.DEAD  # type: ignore[misc]

"""Cancelling a job while it runs: it stops soon, says so, and its handle says cancelled.

Stopping costs nothing per job on the hot path. A runner that cancels a job
its own worker runs stops the attempt directly. An attempt cancelled from
elsewhere (another runner on the store, as another process would be) finds
out at its worker's cancellation check, one read of the run's outcome every
``cancel_check`` seconds once it has run that long; failing that, at its next
lease renewal. Each scenario runs on the MemoryQueue and on the StoreQueue.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any, ClassVar

import pytest
from wf_support import wait_until

from stepstone import Job, JobCancelled, JobContext, JobRunner
from stepstone.execute.ending import RunEnding
from stepstone.ops.reads import list_memos

STOPPED_WITHIN = 5.0
"""Seconds a stop may take in these tests: far under a heartbeat of the default
lease (20 s), and above a cancel check (1 s) on a loaded machine."""


class Hangs(Job[str]):
    """Says it started, then waits for ever (until cancelled)."""

    NAME: ClassVar[str] = "cancel.hangs"
    started: ClassVar[asyncio.Event | None] = None
    stopped: ClassVar[asyncio.Event | None] = None

    async def run(self, ctx: JobContext) -> str:
        assert Hangs.started is not None and Hangs.stopped is not None
        Hangs.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            Hangs.stopped.set()
            raise
        return "never"


class SyncSteps(Job[int]):
    """A synchronous job of five steps; the first waits for ``gate``."""

    NAME: ClassVar[str] = "cancel.sync_steps"
    executed: ClassVar[list[int]] = []
    gate: ClassVar[threading.Event] = threading.Event()
    ended: ClassVar[threading.Event] = threading.Event()
    ended_with: ClassVar[list[BaseException]] = []

    def run(self, ctx: JobContext) -> int:  # type: ignore[override]
        try:
            for i in range(5):
                ctx.sync.step(f"s{i}", SyncSteps.work, i)
        except BaseException as exc:
            SyncSteps.ended_with.append(exc)
            raise
        finally:
            SyncSteps.ended.set()
        return 5

    @staticmethod
    def work(i: int) -> int:
        SyncSteps.executed.append(i)
        SyncSteps.gate.wait(30)
        return i


@pytest.fixture(autouse=True)
def fresh_jobs() -> None:
    Hangs.started, Hangs.stopped = asyncio.Event(), asyncio.Event()
    SyncSteps.executed = []
    SyncSteps.gate = threading.Event()
    SyncSteps.ended = threading.Event()
    SyncSteps.ended_with = []


def said(caplog: pytest.LogCaptureFixture, job_id: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if getattr(r, "run_id", None) == job_id]


async def test_a_job_cancelled_by_its_own_runner_stops_at_once(
    make_runner: Callable[..., JobRunner], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="stepstone")
    runner = make_runner(jobs=[Hangs], cancel_check=None)  # no checks: the direct path alone
    async with runner:
        handle = await runner.submit(Hangs())
        assert Hangs.started is not None and Hangs.stopped is not None
        await asyncio.wait_for(Hangs.started.wait(), STOPPED_WITHIN)
        assert await runner.cancel(handle.id)
        await asyncio.wait_for(Hangs.stopped.wait(), STOPPED_WITHIN)
        with pytest.raises(JobCancelled):
            await handle.result(timeout=STOPPED_WITHIN)
        await wait_until(lambda: runner.worker.in_flight == 0)
    assert (runner.worker.stats.cancelled, runner.worker.stats.lost) == (1, 0)
    messages = said(caplog, handle.id)
    assert any("cancelled while running" in m for m in messages), messages
    assert not any("lease lost" in m for m in messages), messages


async def test_a_job_cancelled_from_elsewhere_stops_at_its_next_cancel_check(
    make_runner: Callable[..., JobRunner], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="stepstone")
    worker_side = make_runner(jobs=[Hangs])  # cancel_check 1 s, heartbeat 20 s
    elsewhere = make_runner(jobs=[Hangs])  # never started: submits and cancels only
    async with worker_side:
        handle = await elsewhere.submit(Hangs())
        assert Hangs.started is not None and Hangs.stopped is not None
        await asyncio.wait_for(Hangs.started.wait(), STOPPED_WITHIN)
        assert not elsewhere.worker.cancel_running(handle.id)  # not running there
        assert await elsewhere.cancel(handle.id)
        await asyncio.wait_for(Hangs.stopped.wait(), STOPPED_WITHIN)
        with pytest.raises(JobCancelled):
            await handle.result(timeout=STOPPED_WITHIN)
        with pytest.raises(JobCancelled):  # and a handle where it ran
            await worker_side.handle(handle.id, Hangs).result(timeout=STOPPED_WITHIN)
        await wait_until(lambda: worker_side.worker.in_flight == 0)
    assert (worker_side.worker.stats.cancelled, worker_side.worker.stats.lost) == (1, 0)
    messages = said(caplog, handle.id)
    assert any("cancelled while running" in m for m in messages), messages
    assert not any("lease lost" in m for m in messages), messages


async def test_without_checks_the_heartbeat_notices_and_the_log_still_says_cancelled(
    make_runner: Callable[..., JobRunner], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="stepstone")
    worker_side = make_runner(jobs=[Hangs], cancel_check=None, lease=1.5)  # beats every 0.5 s
    elsewhere = make_runner(jobs=[Hangs])
    async with worker_side:
        handle = await elsewhere.submit(Hangs())
        assert Hangs.started is not None and Hangs.stopped is not None
        await asyncio.wait_for(Hangs.started.wait(), STOPPED_WITHIN)
        assert await elsewhere.cancel(handle.id)
        await asyncio.wait_for(Hangs.stopped.wait(), STOPPED_WITHIN)
        await wait_until(lambda: worker_side.worker.in_flight == 0)
    assert (worker_side.worker.stats.cancelled, worker_side.worker.stats.lost) == (1, 0)
    messages = said(caplog, handle.id)
    assert any("cancelled while running" in m for m in messages), messages
    assert not any("lease lost" in m for m in messages), messages


async def test_a_synchronous_job_stops_at_its_next_step(
    make_runner: Callable[..., JobRunner],
) -> None:
    runner = make_runner(jobs=[SyncSteps])
    async with runner:
        handle = await runner.submit(SyncSteps())
        await wait_until(lambda: SyncSteps.executed == [0])
        assert await runner.cancel(handle.id)
        SyncSteps.gate.set()  # the step under way finishes; the next one must not start
        await wait_until(SyncSteps.ended.is_set)
        with pytest.raises(JobCancelled):
            await handle.result(timeout=STOPPED_WITHIN)
    assert SyncSteps.executed == [0]
    [error] = SyncSteps.ended_with
    assert isinstance(error, asyncio.CancelledError) and "cancelled" in str(error)
    memos = await list_memos(runner, handle.id)
    assert [memo.step for memo in memos] == ["s0"], "the step that ran is recorded"


async def test_jobs_shorter_than_the_cancel_check_cost_no_read(
    make_runner: Callable[..., JobRunner], monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []
    runner = make_runner(jobs=[Quick], cancel_check=1.0)
    checks = RunEnding.is_cancelled

    async def counting(ending: RunEnding, delivery: Any) -> bool:
        asked.append(delivery.id)
        return await checks(ending, delivery)

    monkeypatch.setattr(RunEnding, "is_cancelled", counting)
    async with runner:
        handles = [await runner.submit(Quick(n=n)) for n in range(20)]
        assert [await h.result(timeout=STOPPED_WITHIN) for h in handles] == list(range(20))
    assert asked == []


class Quick(Job[int]):
    NAME: ClassVar[str] = "cancel.quick"
    n: int

    async def run(self, ctx: JobContext) -> int:
        return self.n

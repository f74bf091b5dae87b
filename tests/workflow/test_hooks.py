"""on_settled hooks: called once the outcome has landed, before the ack, at
least once per run; a hook's failure is logged and changes nothing."""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing as mp
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hook_jobs import (
    CRASH_IN_HOOK,
    HOOK_LOG,
    HOOK_RELEASE,
    HOOKS_ENTERED,
    RUN_LOG,
    HangsInHook,
    IgnoresCancel,
    Settles,
)
from wf_jobs import Adder, Counters, SyncJob
from wf_support import wait_until

from stepstone import Job, JobContext, JobRunner, JobStatus, Outcome, Permanent
from stepstone.execute import hooks
from stepstone.testing import FakeClock

MakeRunner = Callable[..., JobRunner]

heard: list[tuple[str, Any]] = []
"""What the job types' hooks below heard, in order."""


@pytest.fixture(autouse=True)
def _clear() -> Iterator[None]:
    heard.clear()
    HOOKS_ENTERED.clear()
    HOOK_RELEASE.clear()
    yield
    HOOK_RELEASE.set()  # the hooks that never return, let go


@pytest.fixture
def short_hook_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hooks, "HOOK_TIMEOUT", 0.2)


class Greets(Job[str]):
    NAME: ClassVar[str] = "test.hooks.greets"
    who: str

    async def run(self, ctx: JobContext) -> str:
        return f"hello {self.who}"

    async def on_settled(self, outcome: Outcome[str]) -> None:
        heard.append(("job", (self.who, outcome)))


class Refuses(Job[int]):
    NAME: ClassVar[str] = "test.hooks.refuses"

    async def run(self, ctx: JobContext) -> int:
        raise Permanent("no")

    @classmethod
    def on_settled(cls, outcome: Outcome[int]) -> None:  # a plain one: run in a thread
        heard.append(("classmethod", outcome))


class Gated(Job[int]):
    NAME: ClassVar[str] = "test.hooks.gated"

    async def run(self, ctx: JobContext) -> int:
        ctx.state(Counters).started.set()
        await ctx.state(Counters).gate.wait()
        return 1


class HookRaises(Job[int]):
    NAME: ClassVar[str] = "test.hooks.raises"

    async def run(self, ctx: JobContext) -> int:
        return 7

    async def on_settled(self, outcome: Outcome[int]) -> None:
        raise RuntimeError("the alerting service is down")


async def test_both_hooks_hear_the_outcome_after_it_is_recorded_and_before_the_ack(
    make_runner: MakeRunner,
) -> None:
    seen_then: list[tuple[bool, bool]] = []

    async def runner_hook(outcome: Outcome[Any]) -> None:
        recorded = await runner.outcome(outcome.id, Any) is not None
        queued = await runner.queue.get(outcome.id) is not None
        seen_then.append((recorded, queued))
        heard.append(("runner", outcome))

    runner = make_runner(jobs=[Greets], on_settled=runner_hook)
    async with runner:
        handle = await runner.submit(Greets(who="Ada"))
        assert await handle == "hello Ada"
        await wait_until(lambda: len(heard) == 2)
        await wait_until(lambda: runner.worker.stats.succeeded == 1)

    (first, (who, job_outcome)), (second, runner_outcome) = heard
    assert (first, second) == ("job", "runner")  # the job type's, then the runner's
    assert who == "Ada"  # a method hook gets the run's input as self
    assert job_outcome == runner_outcome
    assert (job_outcome.id, job_outcome.kind) == (handle.id, "test.hooks.greets")
    assert (job_outcome.status, job_outcome.result) == (JobStatus.SUCCEEDED, "hello Ada")
    assert seen_then == [(True, True)]  # the outcome had landed; the queue entry not yet gone
    assert await runner.queue.get(handle.id) is None


async def test_a_failed_run_calls_a_plain_classmethod_hook_with_its_error(
    make_runner: MakeRunner,
) -> None:
    async with make_runner(jobs=[Refuses]) as runner:
        outcome = await (await runner.submit(Refuses())).join(timeout=5)
        await wait_until(lambda: len(heard) == 1)
    [(which, hooked)] = heard
    assert which == "classmethod"
    assert hooked == outcome and hooked.status is JobStatus.FAILED
    assert hooked.error is not None and hooked.error.message == "Permanent: no"


async def test_a_failing_hook_is_logged_with_the_job_id_and_changes_nothing(
    make_runner: MakeRunner, caplog: pytest.LogCaptureFixture
) -> None:
    def runner_hook(outcome: Outcome[Any]) -> None:
        raise ValueError("bad hook")

    caplog.set_level(logging.ERROR, logger="stepstone")
    async with make_runner(jobs=[HookRaises], on_settled=runner_hook) as runner:
        handle = await runner.submit(HookRaises())
        assert await handle == 7
        await wait_until(lambda: runner.worker.stats.succeeded == 1)
        await wait_until(lambda: len(caplog.records) == 2)
        state = await handle.status()
    assert state is not None and state.status is JobStatus.SUCCEEDED
    assert await runner.queue.get(handle.id) is None  # acked, not retried
    job_failure, runner_failure = caplog.records
    assert "HookRaises.on_settled failed: RuntimeError: the alerting service is down" in (
        job_failure.getMessage()
    )
    assert "the runner's on_settled failed: ValueError: bad hook" in runner_failure.getMessage()
    assert [getattr(r, "run_id", None) for r in caplog.records] == [handle.id, handle.id]


async def test_a_cancel_calls_the_hooks_in_the_cancelling_process(
    make_runner: MakeRunner, counters: Counters
) -> None:
    cancelled: list[Outcome[Any]] = []
    async with make_runner(jobs=[Gated], on_settled=cancelled.append) as runner:
        handle = await runner.submit(Gated())
        await wait_until(counters.started.is_set)
        assert await handle.cancel()
        counters.gate.set()
    [outcome] = cancelled
    assert (outcome.id, outcome.status) == (handle.id, JobStatus.CANCELLED)


async def test_hooks_run_again_when_another_worker_settles_an_already_recorded_run(
    make_runner: MakeRunner, clock: FakeClock
) -> None:
    """Worker A records the outcome, then stalls in its hook past its lease
    (before its ack); worker B claims the run, finds the outcome, settles it
    without running the job, and calls the hooks too: at least once, here twice."""
    release = asyncio.Event()
    calls: list[tuple[str, Outcome[Any]]] = []

    async def stalls(outcome: Outcome[Any]) -> None:
        calls.append(("A", outcome))
        await release.wait()

    async def settles(outcome: Outcome[Any]) -> None:
        calls.append(("B", outcome))

    a = make_runner(
        jobs=[Adder], on_settled=stalls, concurrency=1, lease=10, heartbeat=0, drain_timeout=5
    )
    b = make_runner(jobs=[Adder], on_settled=settles, lease=10, heartbeat=0)
    async with a:
        handle = await a.submit(Adder(a=1, b=2))
        await wait_until(lambda: len(calls) == 1)
        clock.advance(30)  # A's lease lapses while it sits in its hook
        async with b:
            await wait_until(lambda: len(calls) == 2)
            await wait_until(lambda: b.worker.stats.succeeded == 1)
        release.set()
        await wait_until(lambda: a.worker.stats.lost == 1)  # A's late ack changes nothing
    assert [who for who, _ in calls] == ["A", "B"]
    assert calls[0][1] == calls[1][1]  # the one recorded outcome, twice
    assert calls[0][1].result == 3 and calls[0][1].id == handle.id


@pytest.mark.usefixtures("short_hook_timeout")
async def test_plain_hooks_that_never_return_starve_no_job(make_runner: MakeRunner) -> None:
    """Two plain hooks hung for good (an HTTP call without a timeout) on a
    worker of capacity 2: once they are past their timeout their runs are
    settled, and a synchronous job still gets a thread to run in."""
    async with make_runner(jobs=[HangsInHook, SyncJob], concurrency=2) as runner:
        for n in (1, 2):
            await runner.submit(HangsInHook(n=n))
        await wait_until(lambda: sorted(HOOKS_ENTERED) == [1, 2])
        await wait_until(lambda: runner.worker.stats.succeeded == 2)
        handle = await runner.submit(SyncJob(n=20))
        assert await handle.result(timeout=20) == 41


@pytest.mark.usefixtures("short_hook_timeout")
async def test_an_async_hook_that_swallows_its_cancellation_is_left_to_finish_alone(
    make_runner: MakeRunner, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="stepstone")
    async with make_runner(jobs=[IgnoresCancel], concurrency=1) as runner:
        handle = await runner.submit(IgnoresCancel())
        await wait_until(lambda: runner.worker.stats.succeeded == 1, timeout=20)
        assert await runner.queue.get(handle.id) is None  # acked while the hook still waits
        assert not HOOK_RELEASE.is_set() and HOOKS_ENTERED == [1]
        HOOK_RELEASE.set()
    [logged] = caplog.records
    assert "IgnoresCancel.on_settled ran past 0.2s" in logged.getMessage()
    assert "left to finish alone" in logged.getMessage()


SPAWN = mp.get_context("spawn")


def _worker_whose_hook_never_returns(root: str) -> None:
    hooks.HOOK_TIMEOUT = 0.2

    async def main() -> None:
        async with JobRunner(root, jobs=[HangsInHook], poll_interval=0.05) as runner:
            handle = await runner.submit(HangsInHook(n=1))
            assert await handle.result(timeout=30) == 1
            await wait_until(lambda: runner.worker.stats.succeeded == 1, timeout=30)

    asyncio.run(main())  # then the interpreter exits, its hook still waiting


@pytest.mark.slow
async def test_a_hook_that_never_returns_does_not_stop_its_worker_from_exiting(
    tmp_path: Path,
) -> None:
    child = SPAWN.Process(target=_worker_whose_hook_never_returns, args=(str(tmp_path),))
    child.start()
    await asyncio.to_thread(child.join, 60)
    if child.exitcode is None:
        child.kill()
        child.join()
    assert child.exitcode == 0, "the worker process did not exit: its hook's thread held it"


def _worker_that_crashes_in_its_hook(root: str) -> None:
    os.environ[CRASH_IN_HOOK] = "1"

    async def main() -> None:
        async with JobRunner(root, jobs=[Settles], lease=1.0, poll_interval=0.05):
            await asyncio.sleep(60)  # until the hook ends the process

    asyncio.run(main())


@pytest.mark.slow
async def test_hooks_run_again_after_a_crash_between_the_outcome_write_and_the_ack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "store"
    root.mkdir()
    hook_log, run_log = tmp_path / "hooks.log", tmp_path / "runs.log"
    monkeypatch.setenv(HOOK_LOG, str(hook_log))
    monkeypatch.setenv(RUN_LOG, str(run_log))
    submitter = JobRunner(str(root))
    handle = await submitter.submit(Settles(n=21))
    child = SPAWN.Process(target=_worker_that_crashes_in_its_hook, args=(str(root),))
    child.start()
    await asyncio.to_thread(child.join, 60)
    assert child.exitcode == 3, "the worker did not stop in its hook"
    assert await submitter.queue.get(handle.id) is not None  # recorded, never acked

    async with JobRunner(str(root), jobs=[Settles], poll_interval=0.05) as worker:
        assert await worker.handle(handle.id, Settles).result(timeout=30) == 42
        await wait_until(lambda: worker.worker.stats.succeeded == 1, timeout=30)
    calls = [json.loads(line) for line in hook_log.read_text().splitlines()]
    assert [call["pid"] for call in calls] == [child.pid, os.getpid()]
    assert {(call["id"], call["n"], call["result"]) for call in calls} == {(handle.id, 21, 42)}
    assert run_log.read_text().splitlines() == [str(child.pid)]  # the job itself ran once
    await submitter.close()

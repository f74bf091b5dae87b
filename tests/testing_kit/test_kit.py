"""The testing kit, used the way an application's tests would use it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kit_jobs import Calls, Checkout, Echo, flaky_quote

from stepstone import JobFailed, JobRunner, Permanent, SubmitOptions
from stepstone.runtime import FakeClock
from stepstone.store import ObjectStore
from stepstone.testing import advance, fail_once, run_job, run_job_outcome, wait_until

calls = Calls()


@pytest.fixture(autouse=True)
def _fresh() -> None:
    calls.counts.clear()
    flaky_quote.reset()


@pytest.mark.stepstone(jobs=[Checkout], state=[calls])
async def test_a_step_that_fails_once_is_retried_and_earlier_steps_replay(
    stepstone_memory_runner: JobRunner,
) -> None:
    outcome = await run_job_outcome(stepstone_memory_runner, Checkout(sku="abc"), timeout=10)
    assert outcome.ok and outcome.result == 300
    assert outcome.attempts == 2, "the injected failure did not cost an attempt"
    assert flaky_quote.calls == 2
    assert calls.counts["reserve"] == 1, "the step before the failure ran again"


async def test_fail_once_keeps_sync_and_async_and_can_fail_more() -> None:
    async def fetch(x: int) -> int:
        return x + 1

    flaky = fail_once(fetch, times=2, error=ConnectionError("down"))
    for _ in range(2):
        with pytest.raises(ConnectionError):
            await flaky(1)
    assert await flaky(1) == 2 and flaky.calls == 3
    flaky.reset()
    with pytest.raises(ConnectionError):
        await flaky(1)

    def plain(x: int) -> int:
        return x * 2

    once = fail_once(plain)
    with pytest.raises(RuntimeError, match=r"injected failure in .*plain"):
        once(2)
    assert once(2) == 4


@pytest.mark.stepstone(jobs=[Echo], max_attempts=1)
async def test_the_marker_passes_runner_options(stepstone_memory_runner: JobRunner) -> None:
    assert stepstone_memory_runner.max_attempts == 1
    assert await run_job(stepstone_memory_runner, Echo(text="hi")) == "HI"


@pytest.mark.stepstone(jobs=[Echo])
async def test_a_scheduled_job_runs_when_the_clock_moves(
    stepstone_memory_runner: JobRunner, stepstone_clock: FakeClock
) -> None:
    due = datetime.fromtimestamp(stepstone_clock.now(), UTC) + timedelta(hours=2)
    handle = await stepstone_memory_runner.submit(Echo(text="later"), SubmitOptions(run_at=due))

    async def scheduled() -> bool:
        state = await handle.status()
        return state is not None and state.status == "scheduled"

    await wait_until(scheduled, timeout=5)
    await advance(stepstone_clock, 2 * 3600)
    assert await handle.result(timeout=10) == "LATER"


@pytest.mark.stepstone(jobs=[Echo])
async def test_run_job_says_why_a_job_did_not_finish(
    stepstone_memory_runner: JobRunner, stepstone_clock: FakeClock
) -> None:
    due = datetime.fromtimestamp(stepstone_clock.now(), UTC) + timedelta(days=1)
    with pytest.raises(AssertionError, match=r"it is scheduled .*advance\(\)"):
        await run_job(
            stepstone_memory_runner,
            Echo(text="x"),
            timeout=0.3,
            options=SubmitOptions(run_at=due),
        )


async def test_run_job_on_a_runner_nobody_started_says_so() -> None:
    runner = JobRunner("memory://", jobs=[Echo], poll_interval=0.05)
    with pytest.raises(AssertionError, match=r"it is ready after 0 attempt.*is a runner started"):
        await run_job(runner, Echo(text="alone"), timeout=0.2)


@pytest.mark.stepstone(jobs=[Echo])
async def test_run_job_raises_what_the_job_failed_with(
    stepstone_memory_runner: JobRunner,
) -> None:
    class Refuses(Echo):
        NAME = "kit.refuses"

        async def run(self, ctx: Any) -> str:
            raise Permanent("not today")

    stepstone_memory_runner.register(Refuses)
    with pytest.raises(JobFailed, match="not today"):
        await run_job(stepstone_memory_runner, Refuses(text="x"))
    outcome = await run_job_outcome(stepstone_memory_runner, Refuses(text="y"))
    assert not outcome.ok and outcome.error is not None and outcome.error.reason == "permanent"


@pytest.mark.slow
@pytest.mark.stepstone(jobs=[Checkout], state=[calls])
async def test_the_s3_runner_runs_on_a_bucket(
    stepstone_runner: JobRunner, stepstone_s3_store: ObjectStore
) -> None:
    handle = await stepstone_runner.submit(Checkout(sku="abcd"))
    assert await handle.result(timeout=30) == 400
    assert (await handle.join()).attempts == 2
    assert stepstone_runner.store is stepstone_s3_store
    keys = [info.key async for info in stepstone_s3_store.scan("")]
    assert f"outcomes/{handle.id}" in keys
    assert any(key.startswith(f"memos/{handle.id}/") for key in keys)

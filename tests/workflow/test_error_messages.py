"""Errors that say what is wrong: each names the job, the step or the object
at fault, and is one of stepstone's documented, catchable errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import pytest
from wf_jobs import Counters, MemoThenFail
from wf_support import wait_until

from stepstone import InvalidRunId, Job, JobContext, JobFailed, JobRunner, JobStatus
from stepstone.records.codec import pack
from stepstone.testing import FakeClock

MakeRunner = Callable[..., JobRunner]
DEADLINE = 10.0


@pytest.mark.parametrize("memo", [b"\xc1 garbage", pack("not an int")])
async def test_replaying_a_memo_that_does_not_decode_fails_naming_the_step_and_key(
    make_runner: MakeRunner, clock: FakeClock, counters: Counters, memo: bytes
) -> None:
    """The first attempt records its step and fails; the memo is spoiled
    before the retry, which cannot replay it (nor run the step again)."""
    runner = make_runner(jobs=[MemoThenFail], retry_backoff=10.0, retry_jitter=0.0)
    async with runner:
        handle = await runner.submit(MemoThenFail(seed=4))

        async def retry_scheduled() -> bool:
            record = await runner.queue.get(handle.id)
            return record is not None and record.status is JobStatus.SCHEDULED

        await wait_until(retry_scheduled, DEADLINE)
        [info] = [info async for info in runner.store.scan(runner.layout.memos(handle.id))]
        await runner.store.put(info.key, memo)
        clock.advance(11)
        with pytest.raises(JobFailed) as failed:
            await handle.result(timeout=DEADLINE)
    assert failed.value.reason == "permanent"
    assert failed.value.error_type == "stepstone.errors.CorruptMemo"
    message = failed.value.message
    assert "'expensive'" in message and info.key in message and MemoThenFail.NAME in message
    assert counters.counts["expensive"] == 1, "the step ran again"


class IntKeyed(Job[int]):
    NAME: ClassVar[str] = "test.int-keyed"

    def idempotency_key(self) -> str:
        return 42  # type: ignore[return-value]

    async def run(self, ctx: JobContext) -> int:
        return 1


async def test_an_idempotency_key_that_is_not_a_str_is_refused_at_submit(
    make_runner: MakeRunner,
) -> None:
    runner = make_runner()
    with pytest.raises(TypeError, match=r"test\.int-keyed.*IntKeyed.*returned a int, 42"):
        await runner.submit(IntKeyed())
    assert (await runner.queue.counts())[JobStatus.READY] == 0


@pytest.mark.parametrize("job_id", ["not-an-id", "ABCDEF0123", "", "../../etc", "a" * 65])
async def test_status_of_a_malformed_id_raises_invalid_job_id_before_reading(
    make_runner: MakeRunner, job_id: str
) -> None:
    runner = make_runner()
    with pytest.raises(InvalidRunId):
        await runner.status(job_id)
    with pytest.raises(InvalidRunId):
        runner.handle(job_id, IntKeyed)
    with pytest.raises(ValueError):  # InvalidRunId is one, for an API's 400
        await runner.cancel(job_id)

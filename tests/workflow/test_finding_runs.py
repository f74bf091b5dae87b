"""Runs found by what the user knows: a keyed job names its run for status,
handle, cancel and history; ``runner.runs()`` lists them by status, kind,
age, version and key; a finished run keeps its input, within a bound; a
waiting run's attempt count does not fall, and its last error is one line.
(On the MemoryQueue and the StoreQueue, over a MemoryStore.)"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import ClassVar

import pytest
from wait_jobs import AwaitsApproval
from wf_jobs import Adder, Counters, Keyed
from wf_support import wait_until

from stepstone import Job, JobContext, JobRunner, JobStatus
from stepstone.ops.reads import detail
from stepstone.records.outcome import INPUT_KEPT_BYTES
from stepstone.runtime import FakeClock

MakeRunner = Callable[..., JobRunner]
DEADLINE = 10.0


class Versioned(Job[int]):
    NAME: ClassVar[str] = "test.versioned"
    VERSION: ClassVar[str | None] = "v2"
    n: int

    def idempotency_key(self) -> str:
        return f"orders:eu:{self.n}"

    async def run(self, ctx: JobContext) -> int:
        return self.n


class Big(Job[int]):
    NAME: ClassVar[str] = "test.big"
    blob: str

    async def run(self, ctx: JobContext) -> int:
        return len(self.blob)


async def test_a_keyed_job_names_its_run_for_status_handle_history_and_cancel(
    make_runner: MakeRunner,
) -> None:
    api = make_runner(jobs=[Keyed])  # no worker: the run stays queued
    job = Keyed(n=7)
    handle = await api.submit(job)
    state = await api.status(Keyed(n=7))
    assert state is not None and state.id == handle.id and state.status is JobStatus.READY
    assert api.handle(Keyed(n=7)).id == handle.id
    assert await api.history(Keyed(n=7)) == []
    assert await api.cancel(Keyed(n=7))
    cancelled = await api.status(job)
    assert cancelled is not None and cancelled.status is JobStatus.CANCELLED
    with pytest.raises(TypeError, match="no idempotency key"):
        await api.status(Adder(a=1, b=2))


async def test_runs_lists_by_status_kind_age_version_and_key(
    make_runner: MakeRunner, clock: FakeClock
) -> None:
    async with make_runner(jobs=[Versioned, Adder]) as runner:
        done = await runner.submit(Versioned(n=1))
        assert await done.result(timeout=DEADLINE) == 1
        clock.advance(60)
        plain = await runner.submit(Adder(a=1, b=1))
        assert await plain.result(timeout=DEADLINE) == 2
        since = datetime.fromtimestamp(clock.now() - 30, UTC)

        newest_first = [run.id for run in await runner.runs()]
        assert newest_first == [plain.id, done.id]
        [versioned] = await runner.runs(version="v2")
        assert (versioned.id, versioned.kind, versioned.key) == (
            done.id,
            "test.versioned",
            "orders:eu:1",
        )
        assert [r.id for r in await runner.runs(key_prefix="orders:eu:")] == [done.id]
        assert [r.id for r in await runner.runs(kind="test.adder")] == [plain.id]
        assert [r.id for r in await runner.runs(since=since)] == [plain.id]
        assert [r.id for r in await runner.runs(status="succeeded", limit=1)] == [plain.id]
        assert await runner.runs(status=JobStatus.FAILED) == []


async def test_a_finished_run_keeps_its_input_up_to_a_bound(make_runner: MakeRunner) -> None:
    async with make_runner(jobs=[Big]) as runner:
        small = await runner.submit(Big(blob="x" * 10))
        large = await runner.submit(Big(blob="x" * (INPUT_KEPT_BYTES + 1)))
        assert await small.result(timeout=DEADLINE) == 10
        assert await large.result(timeout=DEADLINE) == INPUT_KEPT_BYTES + 1
        shown = await detail(runner, small.id)
        assert shown.input == {"blob": "x" * 10}
        too_big = await detail(runner, large.id)
        assert too_big.input is None
        assert too_big.outcome is not None
        assert too_big.outcome.input_size is not None
        assert too_big.outcome.input_size > INPUT_KEPT_BYTES  # said, though not kept


async def test_a_waiting_runs_attempt_count_does_not_fall(
    make_runner: MakeRunner, counters: Counters
) -> None:
    """A run that waits for an event is still in its first attempt: 1 while
    it runs, 1 while it waits (the queue gives the attempt back uncounted),
    1 once it has resumed and finished."""
    async with make_runner(jobs=[AwaitsApproval]) as runner:
        handle = await runner.submit(AwaitsApproval(order="o-1"))

        async def waiting() -> bool:
            state = await runner.status(handle.id)
            return state is not None and state.status is JobStatus.WAITING_FOR_EVENT

        await wait_until(waiting, DEADLINE)
        state = await runner.status(handle.id)
        assert state is not None and state.attempts == 1
        [row] = await runner.runs()
        assert row.attempts == 1
        await runner.send_event(handle.id, "approval", {"approved": True, "by": "ann"})
        outcome = await handle.join(timeout=DEADLINE)
        assert outcome.ok and outcome.attempts == 1


async def test_a_resumed_attempt_says_so_in_the_log(
    make_runner: MakeRunner, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="stepstone")
    async with make_runner(jobs=[AwaitsApproval]) as runner:
        handle = await runner.submit(AwaitsApproval(order="o-2"))

        async def waiting() -> bool:
            state = await runner.status(handle.id)
            return state is not None and state.status is JobStatus.WAITING_FOR_EVENT

        await wait_until(waiting, DEADLINE)
        await runner.send_event(handle.id, "approval", {"approved": False, "by": "bo"})
        assert await handle.result(timeout=DEADLINE) == "refused by bo"
    said = [r.getMessage() for r in caplog.records if getattr(r, "run_id", None) == handle.id]
    assert any(m.endswith("attempt 1/3 started (claim 1)") for m in said), said
    assert any(m.endswith("attempt 1/3 resumed (claim 2)") for m in said), said

"""A failed attempt says where it failed: a bounded traceback in the outcome
record and in the queue record's last error, and once in the log with the
job's id and kind."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import ClassVar

import pytest
from wf_support import wait_until

from stepstone import Job, JobContext, JobFailed, JobRunner, JobStatus
from stepstone.runtime.error_text import MAX_MESSAGE_CHARS, MAX_TRACEBACK_CHARS
from stepstone.testing import FakeClock

MakeRunner = Callable[..., JobRunner]
DEADLINE = 10.0


def read_quantity(order: dict[str, int]) -> int:
    return order["qty"]


class MissingQty(Job[int]):
    NAME: ClassVar[str] = "test.missing-qty"

    async def run(self, ctx: JobContext) -> int:
        return read_quantity({"sku": 1})


def descend(depth: int) -> int:
    if depth == 0:
        raise ValueError("the bottom")
    return step_down(depth - 1) + 1


def step_down(depth: int) -> int:  # (alternating frames: Python folds repeated ones)
    return descend(depth) + 1


class Deep(Job[int]):
    NAME: ClassVar[str] = "test.deep"

    def run(self, ctx: JobContext) -> int:  # synchronous, in a thread
        return descend(400)


async def test_a_failed_run_records_where_it_failed(make_runner: MakeRunner) -> None:
    async with make_runner(jobs=[MissingQty], max_attempts=1) as runner:
        handle = await runner.submit(MissingQty())
        outcome = await handle.join(timeout=DEADLINE)
    assert outcome.error is not None and outcome.error.message == "KeyError: 'qty'"
    trace = outcome.error.traceback
    assert trace is not None
    assert trace.startswith("Traceback (most recent call last):")
    assert "in read_quantity" in trace and 'return order["qty"]' in trace
    assert trace.endswith("KeyError: 'qty'")


async def test_a_retried_attempt_leaves_its_traceback_in_the_queue_record(
    make_runner: MakeRunner,
) -> None:
    runner = make_runner(jobs=[MissingQty], retry_backoff=3600.0, retry_jitter=0.0)
    async with runner:
        handle = await runner.submit(MissingQty())

        async def retrying() -> bool:
            record = await runner.queue.get(handle.id)
            return record is not None and record.status is JobStatus.SCHEDULED

        await wait_until(retrying, DEADLINE)
        record = await runner.queue.get(handle.id)
    assert record is not None and record.last_error is not None
    message, _, trace = record.last_error.partition("\n")
    assert message == "KeyError: 'qty'"
    assert "in read_quantity" in trace and trace.endswith("KeyError: 'qty'")
    # A handle's status says what went wrong in one line; the traceback stays
    # where tracebacks are read (the queue record, show, the history).
    state = await handle.status()
    assert state is not None and state.last_error == "KeyError: 'qty'"


async def test_a_deep_traceback_is_cut_to_its_last_frames(
    make_runner: MakeRunner, clock: FakeClock
) -> None:
    runner = make_runner(jobs=[Deep], max_attempts=2, retry_backoff=10.0, retry_jitter=0.0)
    async with runner:
        handle = await runner.submit(Deep())

        async def retrying() -> bool:
            record = await runner.queue.get(handle.id)
            return record is not None and record.status is JobStatus.SCHEDULED

        await wait_until(retrying, DEADLINE)
        record = await runner.queue.get(handle.id)
        assert record is not None and record.last_error is not None
        assert len(record.last_error) <= MAX_MESSAGE_CHARS
        assert record.last_error.endswith("ValueError: the bottom")
        clock.advance(11)
        outcome = await handle.join(timeout=DEADLINE)
    assert outcome.error is not None and outcome.error.traceback is not None
    trace = outcome.error.traceback
    assert len(trace) <= MAX_TRACEBACK_CHARS
    assert trace.startswith("[... earlier frames cut]") and "in descend" in trace
    assert trace.endswith("ValueError: the bottom")


async def test_each_failed_attempt_is_logged_once_with_its_traceback_id_and_kind(
    make_runner: MakeRunner, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="stepstone")
    async with make_runner(jobs=[MissingQty], max_attempts=2) as runner:
        handle = await runner.submit(MissingQty())
        with pytest.raises(JobFailed):
            await handle.result(timeout=DEADLINE)
    with_traces = [r for r in caplog.records if r.exc_info is not None]
    assert len(with_traces) == 2, [r.getMessage() for r in with_traces]  # one per attempt
    for record in with_traces:
        assert record.run_id == handle.id and record.kind == MissingQty.NAME  # type: ignore[attr-defined]
        assert record.exc_info is not None and record.exc_info[0] is KeyError
    assert [r.attempt for r in with_traces] == [1, 2]  # type: ignore[attr-defined]

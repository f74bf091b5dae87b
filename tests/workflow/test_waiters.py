"""Waiters, events and families: every waiter of a run is woken when it
ends, an event is taken once by one wait and wakes only a run waiting for
one, a child's failure reaches its parent at once, and a family lives and
is cancelled together.

Time is a FakeClock. Each scenario runs on the MemoryQueue, and on the
StoreQueue over memory, a real directory and moto's S3.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from family_jobs import FAMILY_JOBS, GoesOnEvent, Tag
from wf_jobs import Counters
from wf_support import ON_EVERY_STORE

from stepstone import JobRunner, JobStatus, SubmitOptions
from stepstone.testing import FakeClock, advance, run_job

pytestmark = ON_EVERY_STORE


@pytest.fixture
def make_family(make_runner: Callable[..., JobRunner]) -> Callable[..., JobRunner]:
    def make(**kwargs: object) -> JobRunner:
        kwargs.setdefault("jobs", FAMILY_JOBS)
        kwargs.setdefault("concurrency", 1)
        return make_runner(**kwargs)

    return make


async def _status(runner: JobRunner, run_id: str) -> JobStatus | None:
    state = await runner.status(run_id)
    return None if state is None else state.status


async def test_an_event_does_not_start_a_run_before_its_run_at(
    make_family: Callable[..., JobRunner], clock: FakeClock, counters: Counters
) -> None:
    async with make_family() as runner:
        later = SubmitOptions(run_at=datetime.fromtimestamp(clock.now() + 20, UTC))
        handle = await runner.submit(GoesOnEvent(key="later"), later)
        await runner.send_event(handle.id, "go", 1)
        # Concurrency 1: had the event made the run due, the worker would have
        # taken it (due earlier) before this one.
        assert await run_job(runner, Tag(tag="after")) == "after"
        assert counters.counts.get("goes:later", 0) == 0
        assert await _status(runner, handle.id) is JobStatus.SCHEDULED
        await advance(clock, 20)
        assert await handle.result(timeout=10) == 1
    assert counters.counts["goes:later"] == 1

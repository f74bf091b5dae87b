from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from wf_jobs import RUNNER_JOBS, Counters

from stepstone import JobRunner
from stepstone.runtime import FakeClock, MemoryQueue
from stepstone.store import MemoryStore, ObjectStore


@pytest.hookimpl(tryfirst=True)  # (before the marks and the fixture's params apply)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """In a module that sets ``BOTH_SUBMIT_ORDERS = True``, every scenario on
    ``make_runner`` runs also with keyed submits in the order a remote store
    gets them (create the record, then look for an outcome)."""
    if getattr(metafunc.module, "BOTH_SUBMIT_ORDERS", False) and (
        "make_runner" in metafunc.fixturenames
    ):
        orders = ["memory-queue", "store-queue", "remote"]
        metafunc.definition.add_marker(
            pytest.mark.parametrize("make_runner", orders, indirect=True)
        )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def counters() -> Counters:
    return Counters()


@pytest.fixture
def store(clock: FakeClock) -> MemoryStore:
    return MemoryStore(clock=clock.now)


@pytest.fixture(params=["memory-queue", "store-queue"])
def make_runner(
    request: pytest.FixtureRequest, store: MemoryStore, clock: FakeClock, counters: Counters
) -> Callable[..., JobRunner]:
    """A runner factory on one store and clock: call it again for a 'restart'.

    Parametrized over the two queues a single process can use, so every
    scenario holds on the MemoryQueue and on the default StoreQueue, over a
    MemoryStore; ``files`` and ``s3`` (wf_support.ON_EVERY_STORE) put the default
    StoreQueue on a real directory or on moto's S3 instead; ``remote`` (in
    modules that set ``BOTH_SUBMIT_ORDERS``) has the MemoryStore say it is remote, so
    that keyed submits take the order they take on S3 (create, then look:
    stepstone.workflow.submitting). The clock is fake on every store: a
    durable store keeps its own modified times, which only order what a
    StoreQueue reads first.
    """
    shared_memory_queue = MemoryQueue(clock=clock)
    on: ObjectStore = store
    if request.param in ("files", "s3", "sqlite"):
        fixtures = {"files": "file_store", "s3": "s3_store", "sqlite": "sqlite_store"}
        on = request.getfixturevalue(fixtures[request.param])
    if request.param == "remote":
        store.remote = True

    def make(**kwargs: Any) -> JobRunner:
        kwargs.setdefault("state", [counters])
        kwargs.setdefault("retry_backoff", 0.0)
        kwargs.setdefault("poll_interval", 0.05)
        if request.param == "memory-queue":
            kwargs.setdefault("queue", shared_memory_queue)
        return JobRunner(on, clock=clock, **kwargs)

    return make


@pytest.fixture
async def runner(make_runner: Callable[..., JobRunner]) -> AsyncIterator[JobRunner]:
    r = make_runner(jobs=RUNNER_JOBS)
    async with r:
        yield r

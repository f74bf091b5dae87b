"""JobThreads: the threads a worker runs synchronous job code in."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from stepstone.runtime import MemoryQueue, Worker
from stepstone.runtime.worker import JobThreads
from stepstone.testing import wait_until

current: contextvars.ContextVar[str] = contextvars.ContextVar("current", default="unset")


async def test_a_call_runs_in_a_named_thread_with_the_callers_context() -> None:
    threads = JobThreads(2, name="test-job")
    current.set("the caller's")

    def look() -> tuple[str, str]:
        return threading.current_thread().name, current.get()

    try:
        name, seen = await threads.call(look)
    finally:
        threads.shutdown(wait=True)
    assert name.startswith("test-job") and seen == "the caller's"


async def test_the_pool_has_as_many_threads_as_its_size_made_at_the_first_call() -> None:
    threads = JobThreads(1)
    threads.resize(3)  # before the first call: the pool is made with 3
    inside = threading.Barrier(3, timeout=5)
    try:
        await asyncio.gather(*(threads.call(inside.wait) for _ in range(3)))
    finally:
        threads.shutdown(wait=True)
    assert threads.size == 3


async def test_a_call_after_a_shutdown_makes_a_new_pool() -> None:
    threads = JobThreads(1)
    assert await threads.call(lambda: 1) == 1
    threads.shutdown(wait=True)
    assert await threads.call(lambda: 2) == 2
    threads.shutdown(wait=True)


def test_a_pool_has_at_least_one_thread() -> None:
    with pytest.raises(ValueError):
        JobThreads(0)
    with pytest.raises(ValueError):
        JobThreads(1).resize(0)


def test_a_workers_capacity_set_before_it_starts_sizes_its_threads() -> None:
    threads = JobThreads(4)
    worker = Worker(MemoryQueue(), concurrency=4, threads=threads)
    worker.concurrency = 8  # the CLI's --concurrency
    assert (worker.concurrency, threads.size) == (8, 8)
    with pytest.raises(ValueError):
        worker.concurrency = 0


async def test_a_worker_runs_plain_handlers_in_the_threads_it_is_given() -> None:
    queue = MemoryQueue()
    threads = JobThreads(2, name="given")
    ran_in: list[str] = []
    worker = Worker(queue, threads=threads, poll_interval=0.05)
    worker.register("k", lambda attempt: ran_in.append(threading.current_thread().name))
    await queue.enqueue(b"", kind="k")
    async with worker:
        await wait_until(lambda: worker.stats.succeeded >= 1, timeout=30, message="the job ran")
    threads.shutdown(wait=True)
    assert len(ran_in) == 1 and ran_in[0].startswith("given")

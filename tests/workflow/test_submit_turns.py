"""A submit lets the event loop run before it returns.

On files (and in memory) a submit is usually answered without waiting for
anything, and a coroutine that never waits never lets another task run: a
loop of awaited submits would hold the event loop until its last submit,
with the jobs it handed to this process's worker waiting behind it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from wf_jobs import RUNNER_JOBS, Adder, Counters, GatedKeyed

from stepstone import JobRunner

pytestmark = pytest.mark.parametrize(
    "make_runner", ["memory-queue", "store-queue", "files"], indirect=True
)

SUBMITS = 50


async def test_each_submit_in_a_loop_lets_another_task_run(
    make_runner: Callable[..., JobRunner],
) -> None:
    turns = 0

    async def count_turns() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    async with make_runner(jobs=RUNNER_JOBS) as runner:
        counter = asyncio.create_task(count_turns())
        await asyncio.sleep(0)
        ran_during: list[int] = []
        handles = []
        for i in range(SUBMITS):
            before = turns
            handles.append(await runner.submit(Adder(a=i, b=1)))
            ran_during.append(turns - before)
        counter.cancel()
        assert min(ran_during) >= 1, ran_during
        assert await asyncio.gather(*handles) == [i + 1 for i in range(SUBMITS)]


async def test_a_job_starts_while_the_loop_that_submitted_it_goes_on_submitting(
    make_runner: Callable[..., JobRunner], counters: Counters
) -> None:
    async with make_runner(jobs=RUNNER_JOBS) as runner:
        gated = await runner.submit(GatedKeyed(n=7))
        submitted = 0
        while not counters.started.is_set() and submitted < SUBMITS:
            await runner.submit(Adder(a=submitted, b=0))
            submitted += 1
        assert counters.started.is_set(), f"not started after {submitted} more submits"
        counters.gate.set()
        assert await gated == 7

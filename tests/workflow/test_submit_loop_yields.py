"""Submits let the event loop run: a loop of awaited submits holds it at most
about ``YIELD_EVERY`` without yielding.

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

import stepstone.submit.loop_yields as loop_yields
from stepstone import JobRunner

pytestmark = pytest.mark.parametrize(
    "make_runner", ["memory-queue", "store-queue", "files"], indirect=True
)

SUBMITS = 200
MAX_HELD = 60
"""Submits in a row that may let nothing run: far more than fit in
``YIELD_EVERY``."""


def _count_loop_passes() -> tuple[list[int], asyncio.Task[None]]:
    passes = [0]

    async def count() -> None:
        while True:
            passes[0] += 1
            await asyncio.sleep(0)

    return passes, asyncio.create_task(count())


async def test_a_loop_of_submits_lets_other_tasks_run_every_few_submits(
    make_runner: Callable[..., JobRunner],
) -> None:
    async with make_runner(jobs=RUNNER_JOBS) as runner:
        passes, counter = _count_loop_passes()
        await asyncio.sleep(0)
        handles, without_a_pass, longest = [], 0, 0
        for i in range(SUBMITS):
            before = passes[0]
            handles.append(await runner.submit(Adder(a=i, b=1)))
            without_a_pass = 0 if passes[0] > before else without_a_pass + 1
            longest = max(longest, without_a_pass)
        counter.cancel()
        # A millisecond holds a few submits (each takes tens of microseconds
        # at the least), never dozens.
        assert longest < MAX_HELD, f"{longest} submits in a row let nothing run"
        assert await asyncio.gather(*handles) == [i + 1 for i in range(SUBMITS)]


async def test_a_submit_past_the_stretch_yields_to_the_loop(
    make_runner: Callable[..., JobRunner], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loop_yields, "YIELD_EVERY", 0.0)  # every stretch is long enough
    async with make_runner(jobs=RUNNER_JOBS) as runner:
        passes, counter = _count_loop_passes()
        await asyncio.sleep(0)
        ran_during = []
        for i in range(20):
            before = passes[0]
            await runner.submit(Adder(a=i, b=1))
            ran_during.append(passes[0] - before)
        counter.cancel()
        assert min(ran_during) >= 1, ran_during


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

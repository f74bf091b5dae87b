"""A run whose code runs concurrently with itself replays each call's own memo.

Each branch of a run (a task its code creates) numbers its calls itself,
and is numbered by its place in the task tree, so which task the event
loop runs first on a retry changes nothing. Every scenario runs many
times with random pauses before and inside the steps (branch_jobs.Jitter),
so both the first attempt and its replay run the branches in random
orders: a memo handed to the wrong call, a step run twice or a false
NonDeterministicReplay fails the test.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from branch_jobs import (
    BRANCH_JOBS,
    CallsAsTasks,
    Deprecated,
    DistinctNames,
    Effects,
    EveryCall,
    Jitter,
    Nested,
    Patched,
    SameNames,
    TwoStages,
)
from wf_support import ON_EVERY_STORE, wait_until

from stepstone import Job, JobRunner, JobStatus
from stepstone.ops.reads import list_memos
from stepstone.records.envelope import Envelope

RUNS = 150
"""Runs of each scenario on the memory store: each a fresh random order."""


def expected(job: Job[Any]) -> list[str]:
    n = job.n  # type: ignore[attr-defined]
    if isinstance(job, Nested):
        return [
            "first",
            "middle",
            *(p for i in range(n) for p in (f"leaf:{i}:0", f"mid:{i}", f"leaf:{i}:1")),
        ]
    if isinstance(job, DistinctNames):
        return [f"fetch-{i}:{i}" for i in range(n)]
    if isinstance(job, TwoStages):
        return [f"save:fetch:{i}" for i in range(n)]
    if isinstance(job, Patched | Deprecated):
        return [f"fetch:{i}:new" for i in range(n)]
    return [f"fetch:{i}" for i in range(n)]


async def run_many(runner: JobRunner, jobs: list[Job[list[str]]]) -> None:
    """Run ``jobs`` (each retried once by its code) and check each result
    and that each step ran once."""
    effects = runner.state_of(Effects)
    handles = [await runner.submit(job) for job in jobs]
    results = await asyncio.gather(*(handle.result(timeout=60) for handle in handles))
    for job, result in zip(jobs, results, strict=True):
        assert result == expected(job), f"seed {job.seed}"  # type: ignore[attr-defined]
    ran_twice = {name: times for name, times in effects.done.items() if times > 1}
    assert not ran_twice, f"steps ran more than once: {ran_twice}"


SCENARIOS = [SameNames, DistinctNames, TwoStages, Nested, CallsAsTasks, Patched, Deprecated]


@pytest.mark.parametrize("job_type", SCENARIOS, ids=lambda t: t.NAME.rpartition(".")[2])
async def test_each_call_of_concurrent_branches_replays_its_own_memo(
    make_runner: Callable[..., JobRunner], job_type: type[SameNames]
) -> None:
    runner = make_runner(jobs=BRANCH_JOBS, state=[Effects(), Jitter()], concurrency=32)
    async with runner:
        await run_many(runner, [job_type(seed=seed) for seed in range(RUNS)])


@ON_EVERY_STORE
@pytest.mark.parametrize("job_type", [SameNames, TwoStages], ids=["same-names", "two-stages"])
async def test_on_every_store_too(
    make_runner: Callable[..., JobRunner], job_type: type[SameNames]
) -> None:
    runner = make_runner(jobs=BRANCH_JOBS, state=[Effects(), Jitter(0.02)], concurrency=8)
    async with runner:
        await run_many(runner, [job_type(seed=seed) for seed in range(12)])


@ON_EVERY_STORE
async def test_a_run_resumed_from_a_durable_wait_replays_every_branch(
    make_runner: Callable[..., JobRunner],
) -> None:
    runner = make_runner(jobs=BRANCH_JOBS, state=[Effects(), Jitter(0.02)])
    async with runner:
        jobs = [Nested(seed=seed, how="event") for seed in range(6)]
        handles = [await runner.submit(job) for job in jobs]

        async def all_waiting() -> bool:
            states = [await runner.status(handle.id) for handle in handles]
            return all(s is not None and s.status is JobStatus.WAITING_FOR_EVENT for s in states)

        await wait_until(all_waiting, timeout=30)
        for handle in handles:
            await runner.send_event(handle.id, "go")
        for job, handle in zip(jobs, handles, strict=True):
            assert await handle.result(timeout=30) == expected(job)
    assert all(times == 1 for times in runner.state_of(Effects).done.values())


async def test_branches_waiting_for_events_each_take_their_own(
    make_runner: Callable[..., JobRunner],
) -> None:
    """Each branch waits for an event of its own name, then sleeps and
    submits a child: the run suspends while any branch waits, and each
    resume replays every branch's calls in their places."""
    runner = make_runner(jobs=BRANCH_JOBS, state=[Effects(), Jitter()])
    async with runner:
        handles = [await runner.submit(EveryCall(seed=seed, n=3)) for seed in range(20)]
        for i in reversed(range(3)):  # (sent in another order than asked for)
            for handle in handles:
                await runner.send_event(handle.id, f"e{i}", f"said{i}")
        for handle in handles:
            result = await handle.result(timeout=60)
            assert result == [f"fetch:{i}/said{i}/child:{i}" for i in range(3)]
    assert all(times == 1 for times in runner.state_of(Effects).done.values())


async def test_branch_memos_are_keyed_by_their_place_in_the_task_tree(
    make_runner: Callable[..., JobRunner],
) -> None:
    runner = make_runner(jobs=BRANCH_JOBS, state=[Effects(), Jitter()])
    async with runner:
        handle = await runner.submit(Nested(seed=1, n=2))
        await handle.result(timeout=30)
        memos = await list_memos(runner, handle.id)
    places = sorted(m.step_key for m in memos if m.position is not None)
    # The root: first (1), middle (2); root's tasks 1 and 2: mid (1); their
    # own two tasks each: leaf (1).
    assert places == [
        "#00000001",
        "#00000002",
        "#b1-00000001",
        "#b1.1-00000001",
        "#b1.2-00000001",
        "#b2-00000001",
        "#b2.1-00000001",
        "#b2.2-00000001",
    ]


async def test_a_run_submitted_before_branches_numbers_its_calls_as_it_did(
    make_runner: Callable[..., JobRunner], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An envelope without ``hist`` (written by an earlier release): every
    call takes the run's next position in the order calls start, keyed as
    before branches existed, and the run replays from those memos."""
    encode = Envelope.encode
    monkeypatch.setattr(
        Envelope, "encode", lambda e: encode(dataclasses.replace(e, numbered=False))
    )
    runner = make_runner(jobs=BRANCH_JOBS, state=[Effects(), Jitter()])
    async with runner:
        job = CallsAsTasks(seed=7)
        handle = await runner.submit(job)
        assert await handle.result(timeout=30) == expected(job)
        memos = await list_memos(runner, handle.id)
    assert sorted(m.step_key for m in memos) == [f"#{p:08d}" for p in range(1, 5)]
    assert all(times == 1 for times in runner.state_of(Effects).done.values())

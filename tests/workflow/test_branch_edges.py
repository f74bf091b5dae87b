"""Concurrent branches at the edges: code that really changed, patches asked
in branches, an attempt's tasks when it ends, and deploys that roll.

A "deploy" is a second runner on the same store whose job type has the
same NAME and other code (as in test_versioning.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import ClassVar

import pytest
from wf_jobs import Counters
from wf_support import wait_until

from stepstone import Job, JobContext, JobFailed, JobRunner, JobStatus
from stepstone.ops.reads import detail, list_memos
from stepstone.ops.timeline import current_steps
from stepstone.runtime import MemoryQueue
from stepstone.store import MemoryStore
from stepstone.testing import FakeClock, advance


def hit(ctx: JobContext, name: str) -> Callable[[], str]:
    counters = ctx.state(Counters)

    def effect() -> str:
        counters.hit(name)
        return name

    return effect


async def status_is(runner: JobRunner, run_id: str, status: JobStatus) -> bool:
    state = await runner.status(run_id)
    return state is not None and state.status is status


async def across_a_deploy(
    make_runner: Callable[..., JobRunner], before: type[Job[str]], after: type[Job[str]]
) -> JobFailed | str:
    """A run of ``before``'s code gets to its wait for "go"; ``after`` is
    deployed and resumes it: what it returns, or how it failed."""
    async with make_runner(jobs=[before]) as old:
        handle = await old.submit(before())
        await wait_until(lambda: status_is(old, handle.id, JobStatus.WAITING_FOR_EVENT))
    async with make_runner(jobs=[after]) as new:
        await new.send_event(handle.id, "go")
        try:
            return await new.handle(handle.id, after).result(timeout=10)
        except JobFailed as failed:
            return failed


class Three(Job[str]):
    """Three branches, a step each, then a wait for "go"."""

    NAME: ClassVar[str] = "edges.three"

    async def run(self, ctx: JobContext) -> str:
        async def one(name: str) -> str:
            await asyncio.sleep(0)
            return await ctx.step(name, hit(ctx, name))

        got = await asyncio.gather(one("a"), one("b"), one("c"))
        await ctx.wait_for_event("go")
        return "".join(got)


class ThreeRenamed(Three):
    """The second branch's step renamed."""

    NAME: ClassVar[str] = "edges.three"

    async def run(self, ctx: JobContext) -> str:
        async def one(name: str) -> str:
            await asyncio.sleep(0)
            return await ctx.step(name, hit(ctx, name))

        got = await asyncio.gather(one("a"), one("b2"), one("c"))
        await ctx.wait_for_event("go")
        return "".join(got)


class TwoLeft(Three):
    """The third branch removed."""

    NAME: ClassVar[str] = "edges.three"

    async def run(self, ctx: JobContext) -> str:
        async def one(name: str) -> str:
            await asyncio.sleep(0)
            return await ctx.step(name, hit(ctx, name))

        got = await asyncio.gather(one("a"), one("b"))
        await ctx.wait_for_event("go")
        return "".join(got)


class FourNow(Three):
    """A fourth branch added after the others."""

    NAME: ClassVar[str] = "edges.three"

    async def run(self, ctx: JobContext) -> str:
        async def one(name: str) -> str:
            await asyncio.sleep(0)
            return await ctx.step(name, hit(ctx, name))

        got = await asyncio.gather(one("a"), one("b"), one("c"), one("d"))
        await ctx.wait_for_event("go")
        return "".join(got)


async def test_a_step_renamed_in_one_branch_fails_naming_the_branch(
    make_runner: Callable[..., JobRunner], counters: Counters
) -> None:
    failed = await across_a_deploy(make_runner, Three, ThreeRenamed)
    assert isinstance(failed, JobFailed) and failed.reason == "permanent"
    assert "diverged at position 1 of branch 2" in failed.message
    assert "recorded step 'b', the code now asks for step 'b2'" in failed.message
    assert counters.counts == {"a": 1, "b": 1, "c": 1}, "nothing ran in the recorded step's place"


async def test_a_branch_removed_fails_naming_the_call_it_never_made(
    make_runner: Callable[..., JobRunner], counters: Counters
) -> None:
    failed = await across_a_deploy(make_runner, Three, TwoLeft)
    assert isinstance(failed, JobFailed) and failed.reason == "permanent"
    assert "diverged at position 1 of branch 3" in failed.message
    assert "recorded step 'c'" in failed.message and "ended without making it" in failed.message


async def test_a_branch_added_after_the_others_is_new_code_not_a_divergence(
    make_runner: Callable[..., JobRunner], counters: Counters
) -> None:
    assert await across_a_deploy(make_runner, Three, FourNow) == "abcd"
    assert counters.counts == {"a": 1, "b": 1, "c": 1, "d": 1}


class Loop(Job[int]):
    """A branch calling one step three times, then a wait."""

    NAME: ClassVar[str] = "edges.loop"
    iterations: ClassVar[int] = 3

    async def run(self, ctx: JobContext) -> int:
        async def looping() -> int:
            for i in range(self.iterations):
                await ctx.step("iteration", hit(ctx, f"iteration{i}"))
            return self.iterations

        done = await asyncio.create_task(looping())
        await ctx.wait_for_event("go")
        return done


class ShorterLoop(Loop):
    NAME: ClassVar[str] = "edges.loop"
    iterations: ClassVar[int] = 2


async def test_a_loop_cut_short_in_a_branch_fails_naming_the_iteration_it_never_made(
    make_runner: Callable[..., JobRunner],
) -> None:
    async with make_runner(jobs=[Loop]) as old:
        handle = await old.submit(Loop())
        await wait_until(lambda: status_is(old, handle.id, JobStatus.WAITING_FOR_EVENT))
    async with make_runner(jobs=[ShorterLoop]) as new:
        await new.send_event(handle.id, "go")
        with pytest.raises(JobFailed) as failed:
            await new.handle(handle.id, ShorterLoop).result(timeout=10)
    assert "diverged at position 3 of branch 1" in failed.value.message
    assert "recorded step 'iteration'" in failed.value.message


class PatchInBranch(Job[list[bool]]):
    """Each of two branches makes a step, asks a patch, then the run waits."""

    NAME: ClassVar[str] = "edges.patch-in-branch"

    async def run(self, ctx: JobContext) -> list[bool]:
        async def one(i: int) -> bool:
            await ctx.step(f"s{i}", hit(ctx, f"s{i}"))
            return await ctx.patched("p")

        answers = await asyncio.gather(one(0), one(1))
        await ctx.wait_for_event("go")
        again = await asyncio.gather(one(2), one(3))
        return [*answers, *again]


class BeforePatch(PatchInBranch):
    """The same code before the patch: its branches went past the point."""

    NAME: ClassVar[str] = "edges.patch-in-branch"

    async def run(self, ctx: JobContext) -> list[bool]:
        async def one(i: int) -> bool:
            await ctx.step(f"s{i}", hit(ctx, f"s{i}"))
            await ctx.step(f"after{i}", hit(ctx, f"after{i}"))
            return False

        answers = await asyncio.gather(one(0), one(1))
        await ctx.wait_for_event("go")
        return answers


class AfterPatch(PatchInBranch):
    NAME: ClassVar[str] = "edges.patch-in-branch"

    async def run(self, ctx: JobContext) -> list[bool]:
        async def one(i: int) -> bool:
            await ctx.step(f"s{i}", hit(ctx, f"s{i}"))
            if await ctx.patched("p"):
                await ctx.step(f"new{i}", hit(ctx, f"new{i}"))
                return True
            await ctx.step(f"after{i}", hit(ctx, f"after{i}"))
            return False

        answers = await asyncio.gather(one(0), one(1))
        await ctx.wait_for_event("go")
        return answers


async def test_a_patch_asked_in_branches_answers_the_same_after_the_wait(
    make_runner: Callable[..., JobRunner],
) -> None:
    async with make_runner(jobs=[PatchInBranch]) as runner:
        handle = await runner.submit(PatchInBranch())
        await wait_until(lambda: status_is(runner, handle.id, JobStatus.WAITING_FOR_EVENT))
        await runner.send_event(handle.id, "go")
        assert await handle.result(timeout=10) == [True, True, True, True]


async def test_a_branch_that_went_past_the_patch_point_keeps_the_old_path(
    make_runner: Callable[..., JobRunner], counters: Counters
) -> None:
    async with make_runner(jobs=[BeforePatch]) as old:
        handle = await old.submit(BeforePatch())
        await wait_until(lambda: status_is(old, handle.id, JobStatus.WAITING_FOR_EVENT))
    async with make_runner(jobs=[AfterPatch]) as new:
        await new.send_event(handle.id, "go")
        assert await new.handle(handle.id, AfterPatch).result(timeout=10) == [False, False]
    assert "new0" not in counters.counts and counters.counts["after0"] == 1


class OneFailsOneSteps(Job[str]):
    """One branch fails at once on the first attempt; the other is in a step
    that takes a while, and another branch waits in the job's own code."""

    NAME: ClassVar[str] = "edges.one-fails"
    log: ClassVar[list[str]] = []

    async def run(self, ctx: JobContext) -> str:
        OneFailsOneSteps.log.append(f"attempt {ctx.attempt} began")

        async def fails() -> None:
            await asyncio.sleep(0.01)
            if ctx.attempt == 1:
                raise RuntimeError("the first attempt fails here")

        async def slow() -> str:
            OneFailsOneSteps.log.append(f"slow step began on attempt {ctx.attempt}")
            await asyncio.sleep(0.3)
            OneFailsOneSteps.log.append("slow step ended")
            return "slow"

        async def idles() -> None:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                OneFailsOneSteps.log.append(f"idle branch of attempt {ctx.attempt} cancelled")
                raise

        idle = asyncio.create_task(idles())
        _, got = await asyncio.gather(fails(), ctx.step("slow", slow))
        idle.cancel()
        return got


async def test_an_attempt_that_ends_leaves_nothing_of_itself_running(
    make_runner: Callable[..., JobRunner],
) -> None:
    OneFailsOneSteps.log.clear()
    async with make_runner(jobs=[OneFailsOneSteps]) as runner:
        assert await (await runner.submit(OneFailsOneSteps())).result(timeout=10) == "slow"
    # The step under way when the first attempt failed finished (and was
    # recorded) and the idle branch was cancelled, both before the second
    # attempt began; the second replayed the step.
    assert OneFailsOneSteps.log == [
        "attempt 1 began",
        "slow step began on attempt 1",
        "idle branch of attempt 1 cancelled",
        "slow step ended",
        "attempt 2 began",
        "idle branch of attempt 2 cancelled",
    ]


class Versioned(Job[str]):
    """Before the deploy: charge, wait for the shipment, email."""

    NAME: ClassVar[str] = "edges.order"
    order: int

    def idempotency_key(self) -> str:
        return f"order:{self.order}"

    async def run(self, ctx: JobContext) -> str:
        await ctx.step("charge", hit(ctx, f"charge{self.order}"))
        await ctx.wait_for_event("shipped")
        return await ctx.step("email", hit(ctx, f"email{self.order}"))


class VersionedFraud(Versioned):
    """After: a fraud check behind a patch, before the wait."""

    NAME: ClassVar[str] = "edges.order"

    async def run(self, ctx: JobContext) -> str:
        await ctx.step("charge", hit(ctx, f"charge{self.order}"))
        if await ctx.patched("fraud"):
            await ctx.step("fraud", hit(ctx, f"fraud{self.order}"))
        await ctx.wait_for_event("shipped")
        return await ctx.step("email", hit(ctx, f"email{self.order}"))


RUNS = 24


async def test_a_rolling_deploy_loses_no_run(counters: Counters) -> None:
    """Old and new code on one store for a while: runs the new code started
    and an old worker resumes wait for a new worker, and every run ends."""
    store, queue = MemoryStore(), MemoryQueue()

    def runner(job: type[Job[str]], build: str) -> JobRunner:
        return JobRunner(
            store,
            queue=queue,
            jobs=[job],
            state=[counters],
            build_id=build,
            retry_backoff=0.0,
            wait_recheck=0.2,
            poll_interval=0.05,
        )

    old, new = runner(Versioned, "v1"), runner(VersionedFraud, "v2")
    async with old, new:  # the deploy rolls: both run
        handles = [await (old if i % 2 else new).submit(Versioned(order=i)) for i in range(RUNS)]

        async def all_waiting() -> bool:
            states = [await old.status(h.id) for h in handles]
            return all(s is not None and s.status is JobStatus.WAITING_FOR_EVENT for s in states)

        await wait_until(all_waiting, timeout=30)
    async with runner(Versioned, "v1") as old:  # only old workers are left for a while
        for handle in handles:
            await old.send_event(handle.id, "shipped")

        async def settled() -> bool:
            states = [await old.status(h.id) for h in handles]
            return all(
                s is not None and s.status in (JobStatus.SUCCEEDED, JobStatus.WAITING_FOR_VERSION)
                for s in states
            )

        await wait_until(settled, timeout=30)
        waiting = [h for h in handles if await status_is(old, h.id, JobStatus.WAITING_FOR_VERSION)]
        assert waiting, "the runs the new code started wait for a worker that can replay them"
        state = await old.status(waiting[0].id)
        assert state is not None
        assert state.waiting_for == "a worker that can replay it (last advanced by version v2)"
    async with runner(VersionedFraud, "v2") as new:  # the rollout completes
        results = [await new.handle(h.id, VersionedFraud).result(timeout=30) for h in handles]
    assert results == [f"email{i}" for i in range(RUNS)]
    assert all(counters.counts[f"email{i}"] == 1 for i in range(RUNS))


async def test_a_run_nobody_can_replay_fails_after_the_version_window() -> None:
    clock = FakeClock()
    store, queue = MemoryStore(clock=clock.now), MemoryQueue(clock=clock)
    common = {"queue": queue, "clock": clock, "state": [Counters()], "retry_backoff": 0.0}
    async with JobRunner(store, jobs=[VersionedFraud], build_id="v2", **common) as new:
        handle = await new.submit(VersionedFraud(order=1))
        await wait_until(lambda: status_is(new, handle.id, JobStatus.WAITING_FOR_EVENT))
    old = JobRunner(store, jobs=[Versioned], build_id="v1", version_wait=600, **common)
    async with old:  # (no worker of v2 is left)
        await old.send_event(handle.id, "shipped")
        await wait_until(lambda: status_is(old, handle.id, JobStatus.WAITING_FOR_VERSION))
        await advance(clock, 601)
        with pytest.raises(JobFailed) as failed:
            await old.handle(handle.id, Versioned).result(timeout=10)
    assert (
        "version v2 recorded it, and no worker of that version replayed the run within 600 s"
        in (failed.value.message)
    )


async def test_show_lists_branch_calls_in_the_order_they_began_each_with_its_time() -> None:
    # (a real clock: the order is the times' own)
    async with JobRunner(MemoryStore(), jobs=[PatchInBranch], state=[Counters()]) as runner:
        handle = await runner.submit(PatchInBranch())
        await wait_until(lambda: status_is(runner, handle.id, JobStatus.WAITING_FOR_EVENT))
        await runner.send_event(handle.id, "go")
        await handle.result(timeout=10)
        found = await detail(runner, handle.id)
        memos = await list_memos(runner, handle.id)
    steps = current_steps(found)
    places = [(step.memo.branch, step.memo.position, step.memo.step) for step in steps]
    # The root's first two branches' steps, the root's event take, then its
    # next two branches' steps, in the order each began; each branch's
    # patch decision (no place of its own) among them, after its step.
    assert [p for p in places if p[1] is not None] == [
        ((1,), 1, "s0"),
        ((2,), 1, "s1"),
        ((), 1, "a wait for event 'go'"),
        ((3,), 1, "s2"),
        ((4,), 1, "s3"),
    ]
    decisions = [i for i, p in enumerate(places) if p[1] is None]
    assert len(decisions) == 4 and decisions[0] > 0, places
    assert all(step.seconds is not None for step in steps)
    assert len(memos) == len(steps)


class Clocked(Job[str]):
    NAME: ClassVar[str] = "edges.clocked"

    async def run(self, ctx: JobContext) -> str:
        stamp = await ctx.step("stamp", lambda at: at, str(time.monotonic_ns()))
        if ctx.attempt == 1:
            raise RuntimeError("again")
        return str(stamp)


async def test_a_step_replayed_with_other_arguments_says_so_in_show(
    make_runner: Callable[..., JobRunner], caplog: pytest.LogCaptureFixture
) -> None:
    async with make_runner(jobs=[Clocked]) as runner:
        handle = await runner.submit(Clocked())
        await handle.result(timeout=10)
        found = await detail(runner, handle.id)
    [step] = current_steps(found)
    assert step.memo.changed_args == 2
    assert "was called with other arguments than it recorded" in caplog.text

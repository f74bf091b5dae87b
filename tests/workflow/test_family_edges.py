"""A run's family at its edges: a cancel cut short before the children, a
child under a key used for another input, a handle held across a replay."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import pytest
from wf_support import wait_until

from stepstone import Job, JobContext, JobFailed, JobRunner, JobStatus
from stepstone.records.cancels import cancel_run
from stepstone.records.retention import sweep
from stepstone.records.run_records import RunRecords
from stepstone.testing import FakeClock


class Waits(Job[str]):
    NAME: ClassVar[str] = "family.waits"
    n: int = 0

    async def run(self, ctx: JobContext) -> str:
        await ctx.wait_for_event("go")
        return "child"


class Parent(Job[str]):
    NAME: ClassVar[str] = "family.parent"

    async def run(self, ctx: JobContext) -> str:
        child = await ctx.submit(Waits())
        return await child


async def status_is(runner: JobRunner, run_id: str, status: JobStatus) -> bool:
    state = await runner.status(run_id)
    return state is not None and state.status is status


async def parent_with_a_live_child(runner: JobRunner) -> tuple[str, str]:
    """A parent waiting for its child, which waits for an event; then the
    parent's cancel cut short: its outcome recorded, its child not touched."""
    parent = await runner.submit(Parent())
    await wait_until(lambda: status_is(runner, parent.id, JobStatus.WAITING_FOR_CHILDREN))
    [child] = [c async for c in _children(runner, parent.id)]
    await wait_until(lambda: status_is(runner, child, JobStatus.WAITING_FOR_EVENT))
    records = RunRecords(runner.store, runner.layout)
    assert await cancel_run(records, runner.queue, runner.clock, parent.id) is not None
    assert await status_is(runner, child, JobStatus.WAITING_FOR_EVENT), "the cancel was cut short"
    return parent.id, child


async def _children(runner: JobRunner, parent: str):  # type: ignore[no-untyped-def]
    prefix = runner.layout.children(parent)
    async for info in runner.store.scan(prefix):
        yield info.key.rsplit("/", 1)[-1]


async def test_a_cancel_cut_short_before_its_children_is_finished_by_the_next_cancel(
    make_runner: Callable[..., JobRunner],
) -> None:
    async with make_runner(jobs=[Parent, Waits]) as runner:
        parent, child = await parent_with_a_live_child(runner)
        assert not await runner.cancel(parent), "the parent had already ended (cancelled)"
        assert await status_is(runner, child, JobStatus.CANCELLED)
        with pytest.raises(JobFailed) as failed:
            await runner.handle(child, Waits).result(timeout=10)
    assert f"cancelled with its parent {parent}" in failed.value.message


async def test_the_sweep_cancels_the_live_children_of_a_cancelled_run(
    make_runner: Callable[..., JobRunner], clock: FakeClock
) -> None:
    async with make_runner(jobs=[Parent, Waits]) as runner:
        _, child = await parent_with_a_live_child(runner)
        clock.advance(3600)
        assert await sweep(runner, retention=60) >= 1
        assert await status_is(runner, child, JobStatus.CANCELLED)


class Keyed(Job[int]):
    NAME: ClassVar[str] = "family.keyed"
    x: int

    def idempotency_key(self) -> str:
        return "the-key"

    async def run(self, ctx: JobContext) -> int:
        return self.x


class SubmitsKeyed(Job[int]):
    NAME: ClassVar[str] = "family.submits-keyed"

    async def run(self, ctx: JobContext) -> int:
        return await (await ctx.submit(Keyed(x=2)))


async def test_a_child_under_a_key_used_for_another_input_fails_its_parent_at_once(
    make_runner: Callable[..., JobRunner],
) -> None:
    async with make_runner(jobs=[Keyed, SubmitsKeyed], max_attempts=5) as runner:
        assert await (await runner.submit(Keyed(x=1))).result(timeout=10) == 1
        parent = await runner.submit(SubmitsKeyed())
        with pytest.raises(JobFailed) as failed:
            await parent.result(timeout=10)
        state = await runner.status(parent.id)
    assert failed.value.reason == "permanent" and failed.value.error_type == (
        "stepstone.errors.InputMismatch"
    )
    assert "the child job 'family.keyed'" in failed.value.message
    assert "'the-key'" in failed.value.message
    assert state is not None and state.attempts == 1, "no attempt was spent retrying it"


class Counts(Job[int]):
    NAME: ClassVar[str] = "family.counts"
    ran: ClassVar[int] = 0

    async def run(self, ctx: JobContext) -> int:
        Counts.ran += 1
        return Counts.ran


async def test_a_handle_held_here_gives_the_replayed_outcome(
    make_runner: Callable[..., JobRunner],
) -> None:
    Counts.ran = 0
    async with make_runner(jobs=[Counts]) as runner:
        handle = await runner.submit(Counts())
        assert await handle.result(timeout=10) == 1
        await runner.replay(handle.id)
        assert await handle.result(timeout=10) == 2
        assert (await handle.poll()) is not None and (await handle.poll()).unwrap() == 2  # type: ignore[union-attr]

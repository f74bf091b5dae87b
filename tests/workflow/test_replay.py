"""Replaying a run from a step (``runner.replay``): a new incarnation that
keeps the memos before the step and runs from it, the old one's history
kept and linked; refused for a live run."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import pytest
from wf_jobs import Counters
from wf_support import wait_until

from stepstone import Job, JobContext, JobFailed, JobRunner, JobStatus, Permanent
from stepstone.errors import InspectError
from stepstone.ops.reads import detail, list_memos, read_outcome
from stepstone.records.calls import Call
from stepstone.store import FaultyStore, MemoryStore, StoreUnavailable


def effect(ctx: JobContext, name: str) -> Callable[[], str]:
    counters = ctx.state(Counters)

    def run() -> str:
        return f"{name}{counters.hit(name)}"

    return run


class Order(Job[str]):
    """quote, charge, receipt: each step's value counts its runs."""

    NAME: ClassVar[str] = "replay.order"
    order: str
    failing: ClassVar[set[str]] = set()

    def idempotency_key(self) -> str:
        return f"order:{self.order}"

    async def run(self, ctx: JobContext) -> str:
        quote = await ctx.step("quote", effect(ctx, "quote"))
        charge = await ctx.step("charge", effect(ctx, "charge"))
        if "charge" in Order.failing:
            raise Permanent("the card network said no")
        receipt = await ctx.step("receipt", effect(ctx, "receipt"))
        return f"{quote} {charge} {receipt}"


class Approved(Job[str]):
    """A step, a wait for an approval, a step."""

    NAME: ClassVar[str] = "replay.approved"

    def idempotency_key(self) -> str:
        return "approved"

    async def run(self, ctx: JobContext) -> str:
        first = await ctx.step("prepare", effect(ctx, "prepare"))
        by = await ctx.wait_for_event("approval", type=str)
        last = await ctx.step("ship", effect(ctx, "ship"))
        return f"{first} {by} {last}"


class Leaf(Job[str]):
    NAME: ClassVar[str] = "replay.leaf"

    async def run(self, ctx: JobContext) -> str:
        return f"leaf{ctx.state(Counters).hit('leaf')}"


class Tree(Job[str]):
    """A child (no key of its own: its id derived from the run), then a step."""

    NAME: ClassVar[str] = "replay.tree"

    def idempotency_key(self) -> str:
        return "tree"

    async def run(self, ctx: JobContext) -> str:
        child = await ctx.submit(Leaf())
        [leaf] = await ctx.gather(child)
        after = await ctx.step("after", effect(ctx, "after"))
        return f"{leaf} {after}"


@pytest.fixture(autouse=True)
def _nothing_fails() -> None:
    Order.failing.clear()


async def status_is(runner: JobRunner, run_id: str, status: JobStatus) -> bool:
    state = await runner.status(run_id)
    return state is not None and state.status is status


async def test_a_replay_keeps_the_steps_before_it_and_runs_from_it(
    make_runner: Callable[..., JobRunner], counters: Counters
) -> None:
    async with make_runner(jobs=[Order]) as runner:
        handle = await runner.submit(Order(order="o-1"))
        assert await handle.result(timeout=10) == "quote1 charge1 receipt1"
        first = await read_outcome(runner, handle.id)
        replayed = await runner.replay(Order(order="o-1"), from_step="charge")
        assert (replayed.position, replayed.kept_memos) == (2, 1)
        assert replayed.replaced == first.incarnation != replayed.incarnation  # type: ignore[union-attr]
        again = runner.handle(handle.id, Order)
        assert await again.result(timeout=10) == "quote1 charge2 receipt2"
        assert counters.counts == {"quote": 1, "charge": 2, "receipt": 2}
        found = await detail(runner, handle.id)
    # The new incarnation names the one it replays, whose attempts and memos stay.
    assert found.outcome is not None and found.outcome.incarnation == replayed.incarnation
    assert (found.replay_of, found.from_step) == (replayed.replaced, "charge")
    assert [a.result.value for a in found.replaced_history] == ["succeeded"]
    by_incarnation = {
        (m.incarnation, m.position, m.step) for m in await list_memos(runner, handle.id)
    }
    old, new = replayed.replaced, replayed.incarnation
    assert by_incarnation == {
        (old, 1, "quote"),
        (old, 2, "charge"),
        (old, 3, "receipt"),
        (new, 1, "quote"),
        (new, 2, "charge"),
        (new, 3, "receipt"),
    }


async def test_a_replay_from_the_start_runs_every_step_again(
    make_runner: Callable[..., JobRunner], counters: Counters
) -> None:
    async with make_runner(jobs=[Order]) as runner:
        handle = await runner.submit(Order(order="o-2"))
        await handle.result(timeout=10)
        await runner.replay(handle.id)
        assert await runner.handle(handle.id, Order).result(timeout=10) == "quote2 charge2 receipt2"


async def test_a_dead_run_is_replayed_from_the_step_that_failed(
    make_runner: Callable[..., JobRunner], counters: Counters
) -> None:
    Order.failing.add("charge")
    async with make_runner(jobs=[Order]) as runner:
        handle = await runner.submit(Order(order="o-3"))
        with pytest.raises(JobFailed):
            await handle.result(timeout=10)
        Order.failing.clear()  # the fix is deployed
        await runner.replay(handle.id, from_step="charge")
        assert await runner.handle(handle.id, Order).result(timeout=10) == (
            "quote1 charge2 receipt1"
        )
        state = await runner.status(handle.id)
    assert state is not None and state.status is JobStatus.SUCCEEDED


async def test_a_live_run_is_refused_and_left_alone(
    make_runner: Callable[..., JobRunner], counters: Counters
) -> None:
    async with make_runner(jobs=[Approved]) as runner:
        handle = await runner.submit(Approved())
        await wait_until(lambda: status_is(runner, handle.id, JobStatus.WAITING_FOR_EVENT))
        with pytest.raises(InspectError, match="waiting_for_event: a live run cannot be replayed"):
            await runner.replay(handle.id, from_step="prepare")
        await runner.send_event(handle.id, "approval", "ann")
        assert await handle.result(timeout=10) == "prepare1 ann ship1"


async def test_an_unknown_step_is_refused_naming_the_runs_steps(
    make_runner: Callable[..., JobRunner],
) -> None:
    async with make_runner(jobs=[Order]) as runner:
        handle = await runner.submit(Order(order="o-4"))
        await handle.result(timeout=10)
        with pytest.raises(InspectError, match=r"no step 'charge-card'.*'quote', 'charge'"):
            await runner.replay(handle.id, from_step="charge-card")
        with pytest.raises(InspectError, match="no run"):
            await runner.replay("ab" * 32)
        state = await runner.status(handle.id)
    assert state is not None and state.status is JobStatus.SUCCEEDED, "left as it was"


async def test_events_the_kept_steps_did_not_take_are_seen_again(
    make_runner: Callable[..., JobRunner], counters: Counters
) -> None:
    async with make_runner(jobs=[Approved]) as runner:
        handle = await runner.submit(Approved())
        await wait_until(lambda: status_is(runner, handle.id, JobStatus.WAITING_FOR_EVENT))
        await runner.send_event(handle.id, "approval", "ann")
        assert await handle.result(timeout=10) == "prepare1 ann ship1"
        replayed = await runner.replay(handle.id, from_step="ship")
        assert replayed.kept_memos == 2 and replayed.kept_events == 1  # (and its take)
        assert await runner.handle(handle.id, Approved).result(timeout=10) == "prepare1 ann ship2"
        replayed = await runner.replay(handle.id, from_step="prepare")
        assert replayed.kept_memos == 0 and replayed.kept_events == 1
        # No new event: the wait takes the one sent to the replayed incarnation.
        assert await runner.handle(handle.id, Approved).result(timeout=10) == "prepare2 ann ship3"


async def test_a_kept_child_submit_joins_the_child_it_recorded(
    make_runner: Callable[..., JobRunner], counters: Counters
) -> None:
    async with make_runner(jobs=[Tree, Leaf]) as runner:
        handle = await runner.submit(Tree())
        assert await handle.result(timeout=10) == "leaf1 after1"
        [child] = [
            m for m in await list_memos(runner, handle.id) if m.call == Call("child", "replay.leaf")
        ]
        await runner.replay(handle.id, from_step="after")
        assert await runner.handle(handle.id, Tree).result(timeout=10) == "leaf1 after2"
        [*_, again] = [
            m for m in await list_memos(runner, handle.id) if m.call == Call("child", "replay.leaf")
        ]
    assert again.value == child.value
    assert counters.counts["leaf"] == 1, "the child did not run again"


async def test_a_replay_cut_short_before_removing_the_old_outcome_still_happens(
    make_runner: Callable[..., JobRunner], store: MemoryStore, counters: Counters
) -> None:
    """The old outcome could not be removed (the store failed): the worker
    that claims the new incarnation removes it, and the replay runs."""
    async with make_runner(jobs=[Order]) as runner:
        handle = await runner.submit(Order(order="o-5"))
        await handle.result(timeout=10)
        failing = FaultyStore(store, operations={"delete"}, error_rate=1.0, after=0.0)
        operator = JobRunner(failing, queue=runner.queue, jobs=[Order], clock=runner.clock)
        try:
            with pytest.raises(StoreUnavailable):
                await operator.replay(handle.id, from_step="receipt")
        finally:
            await operator.close()
        await wait_until(lambda: counters.counts["receipt"] == 2)
        assert await runner.handle(handle.id, Order).result(timeout=10) == (
            "quote1 charge1 receipt2"
        )


async def test_many_runs_are_replayed_from_code(
    make_runner: Callable[..., JobRunner], counters: Counters
) -> None:
    Order.failing.add("charge")
    async with make_runner(jobs=[Order, Approved]) as runner:
        handles = [await runner.submit(Order(order=f"m-{i}")) for i in range(3)]
        for handle in handles:
            with pytest.raises(JobFailed):
                await handle.result(timeout=10)
        live = await runner.submit(Approved())
        await wait_until(lambda: status_is(runner, live.id, JobStatus.WAITING_FOR_EVENT))
        Order.failing.clear()
        failed = await runner.runs(status="failed", kind="replay.order")
        done = await runner.replay_many([*failed, live.id], from_step="charge")
        assert sorted(done.done) == sorted(h.id for h in handles)
        assert list(done.refused) == [live.id] and "live run" in done.refused[live.id]
        for handle in handles:
            await runner.handle(handle.id, Order).result(timeout=10)
    assert counters.counts == {"quote": 3, "charge": 6, "receipt": 3, "prepare": 1}

"""Runs that outlive a deploy: a run knows its history in order, and a
replay whose call differs from the recorded one fails, naming both, before
anything runs in its place.

A "deploy" is a second runner on the same store and queue whose job type
has the same NAME and other code: the run waits for an event (or sleeps)
under the first, and resumes under the second.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import pytest
from wf_jobs import Counters
from wf_support import wait_until

from stepstone import Job, JobContext, JobFailed, JobRunner, JobStatus
from stepstone.ops.listing import RunFilter
from stepstone.ops.patches import patch_paths
from stepstone.ops.reads import list_memos
from stepstone.records.calls import Call, PositionedMemo
from stepstone.records.codec import unpack
from stepstone.records.layout import position_key, position_of, step_key
from stepstone.testing import FakeClock, advance

NAME = "versioning.order"


class Child(Job[str]):
    NAME: ClassVar[str] = "versioning.child"

    async def run(self, ctx: JobContext) -> str:
        return "child"


class Everything(Job[str]):
    """A step, a sleep, an event wait, a child submit, a step."""

    NAME: ClassVar[str] = "versioning.everything"

    def idempotency_key(self) -> str:
        return "everything"

    async def run(self, ctx: JobContext) -> str:
        first = await ctx.step("first", lambda: "a")
        await ctx.sleep(0)
        said = await ctx.wait_for_event("go", type=str)
        child = await ctx.submit(Child())
        last = await ctx.step("last", lambda: "b")
        return f"{first}{said}{child.id[:4]}{last}"


def hit(ctx: JobContext, name: str) -> Callable[[], str]:
    counters = ctx.state(Counters)

    def effect() -> str:
        counters.hit(name)
        return name

    return effect


class Charge(Job[str]):
    """The code before the deploy: charge, then wait for the shipment."""

    NAME: ClassVar[str] = NAME
    order: str

    def idempotency_key(self) -> str:
        return f"order:{self.order}"

    async def run(self, ctx: JobContext) -> str:
        receipt = await ctx.step("charge", hit(ctx, "charge"))
        await ctx.wait_for_event("shipped")
        return receipt


class ChargeRenamed(Charge):
    """After the deploy: the step is now called charge-card."""

    NAME: ClassVar[str] = NAME

    async def run(self, ctx: JobContext) -> str:
        receipt = await ctx.step("charge-card", hit(ctx, "charge-card"))
        await ctx.wait_for_event("shipped")
        return receipt


class ChargeCatching(Charge):
    """After the deploy: renamed, and the job swallows every error."""

    NAME: ClassVar[str] = NAME

    async def run(self, ctx: JobContext) -> str:
        try:
            receipt = await ctx.step("charge-card", hit(ctx, "charge-card"))
        except Exception:
            receipt = "swallowed"
        await ctx.wait_for_event("shipped")
        return receipt


class Nap(Job[str]):
    """Before the deploy: a step, a sleep, a step."""

    NAME: ClassVar[str] = "versioning.nap"

    def idempotency_key(self) -> str:
        return "nap"

    async def run(self, ctx: JobContext) -> str:
        await ctx.step("wake", hit(ctx, "wake"))
        await ctx.sleep(100)
        return await ctx.step("after", hit(ctx, "after"))


class NapStepped(Nap):
    """After the deploy: a step where the sleep was."""

    NAME: ClassVar[str] = "versioning.nap"

    async def run(self, ctx: JobContext) -> str:
        await ctx.step("wake", hit(ctx, "wake"))
        await ctx.step("email", hit(ctx, "email"))
        return await ctx.step("after", hit(ctx, "after"))


async def status_is(runner: JobRunner, run_id: str, status: JobStatus) -> bool:
    state = await runner.status(run_id)
    return state is not None and state.status is status


async def test_a_run_records_its_calls_in_order(make_runner: Callable[..., JobRunner]) -> None:
    async with make_runner(jobs=[Everything, Child]) as runner:
        handle = await runner.submit(Everything())
        await wait_until(lambda: status_is(runner, handle.id, JobStatus.WAITING_FOR_EVENT))
        await runner.send_event(handle.id, "go", "-")
        result = await handle.result(timeout=10)
    memos = [m for m in await list_memos(runner, handle.id) if m.position is not None]
    # The event wait takes two positions (its take, 3, and its deadline, 4,
    # left empty: it has no timeout).
    assert [(m.position, m.call) for m in memos] == [
        (1, Call("step", "first")),
        (2, Call("sleep", "")),
        (3, Call("event", "go")),
        (5, Call("child", "versioning.child")),
        (6, Call("step", "last")),
    ]
    child_id = memos[3].value
    assert result == f"a-{child_id[:4]}b"


async def test_a_renamed_step_fails_the_replay_naming_both_and_runs_nothing_again(
    make_runner: Callable[..., JobRunner], counters: Counters
) -> None:
    async with make_runner(jobs=[Charge]) as before:
        handle = await before.submit(Charge(order="o-1"))
        await wait_until(lambda: status_is(before, handle.id, JobStatus.WAITING_FOR_EVENT))
    async with make_runner(jobs=[ChargeRenamed]) as after:
        await after.send_event(handle.id, "shipped")
        with pytest.raises(JobFailed) as failed:
            await after.handle(handle.id, ChargeRenamed).result(timeout=10)
    assert failed.value.reason == "permanent"
    assert failed.value.error_type == "stepstone.errors.NonDeterministicReplay"
    message = failed.value.message
    assert handle.id in message and "diverged at position 1" in message
    assert "recorded step 'charge', the code now asks for step 'charge-card'" in message
    assert counters.counts == {"charge": 1}, "neither the old step nor the renamed one ran again"
    [memo] = await list_memos(after, handle.id)
    assert memo.call == Call("step", "charge"), "nothing was recorded in its place"


async def test_a_job_that_catches_the_divergence_still_fails_for_good(
    make_runner: Callable[..., JobRunner], counters: Counters
) -> None:
    async with make_runner(jobs=[Charge]) as before:
        handle = await before.submit(Charge(order="o-2"))
        await wait_until(lambda: status_is(before, handle.id, JobStatus.WAITING_FOR_EVENT))
    async with make_runner(jobs=[ChargeCatching]) as after:
        await after.send_event(handle.id, "shipped")
        with pytest.raises(JobFailed) as failed:
            await after.handle(handle.id, ChargeCatching).result(timeout=10)
    assert failed.value.reason == "permanent"
    assert failed.value.error_type == "stepstone.errors.NonDeterministicReplay"
    assert counters.counts == {"charge": 1}


async def test_a_step_where_a_sleep_was_is_caught_at_the_sleeps_position(
    make_runner: Callable[..., JobRunner], clock: FakeClock, counters: Counters
) -> None:
    async with make_runner(jobs=[Nap]) as before:
        handle = await before.submit(Nap())
        await wait_until(lambda: status_is(before, handle.id, JobStatus.SLEEPING))
    async with make_runner(jobs=[NapStepped]) as after:
        await advance(clock, 100)
        with pytest.raises(JobFailed) as failed:
            await after.handle(handle.id, NapStepped).result(timeout=10)
    assert "at position 2: the run recorded a sleep" in failed.value.message
    assert "asks for step 'email'" in failed.value.message
    assert counters.counts == {"wake": 1}, "the step the new code put there never ran"


async def test_a_run_recorded_before_positions_replays_by_name(
    make_runner: Callable[..., JobRunner], counters: Counters
) -> None:
    """Memos keyed by step name, as stepstone wrote them before positions:
    the replay finds them by name (no divergence), and records what comes
    after by position."""
    async with make_runner(jobs=[Charge]) as before:
        handle = await before.submit(Charge(order="o-3"))
        await wait_until(lambda: status_is(before, handle.id, JobStatus.WAITING_FOR_EVENT))
        [memo] = await list_memos(before, handle.id)
        store = before.store
        positioned = PositionedMemo.decode((await store.get(memo.key)).data)
        legacy = before.layout.memo(handle.id, memo.incarnation, step_key("charge", 1))
        await store.put(legacy, positioned.value)  # the old format: the value, keyed by name
        await store.delete(memo.key)
    async with make_runner(jobs=[Charge]) as after:
        await after.send_event(handle.id, "shipped")
        assert await after.handle(handle.id, Charge).result(timeout=10) == "charge"
    assert counters.counts == {"charge": 1}
    memos = await list_memos(after, handle.id)
    assert [(m.step_key, m.position) for m in memos] == [
        (position_key(2), 2),  # the event wait's take, after the step at position 1
        ("charge", None),
    ]
    assert unpack(PositionedMemo.decode((await store.get(memos[0].key)).data).value)["key"]
    assert position_of(memos[0].step_key) == 2


class Packed(Job[str]):
    """Before the deploy: charge, email, then wait to be packed and shipped."""

    NAME: ClassVar[str] = "versioning.packed"
    order: str

    def idempotency_key(self) -> str:
        return f"packed:{self.order}"

    async def run(self, ctx: JobContext) -> str:
        await ctx.step("charge", hit(ctx, "charge"))
        await ctx.step("email", hit(ctx, "email"))
        await ctx.wait_for_event("packed")
        await ctx.wait_for_event("shipped")
        return "done"


class PackedFraud(Packed):
    """A fraud check added before the email, as it must be: behind a patch."""

    NAME: ClassVar[str] = "versioning.packed"

    async def run(self, ctx: JobContext) -> str:
        await ctx.step("charge", hit(ctx, "charge"))
        if await ctx.patched("fraud-check"):
            await ctx.step("fraud", hit(ctx, "fraud"))
        await ctx.step("email", hit(ctx, "email"))
        await ctx.wait_for_event("packed")
        await ctx.wait_for_event("shipped")
        return "done"


class PackedFraudUnpatched(Packed):
    """The same fraud check, added without a patch."""

    NAME: ClassVar[str] = "versioning.packed"

    async def run(self, ctx: JobContext) -> str:
        await ctx.step("charge", hit(ctx, "charge"))
        await ctx.step("fraud", hit(ctx, "fraud"))
        await ctx.step("email", hit(ctx, "email"))
        await ctx.wait_for_event("packed")
        await ctx.wait_for_event("shipped")
        return "done"


class PackedFraudOnly(Packed):
    """Once no run is on the old path: the patch deprecated."""

    NAME: ClassVar[str] = "versioning.packed"

    async def run(self, ctx: JobContext) -> str:
        await ctx.step("charge", hit(ctx, "charge"))
        await ctx.deprecate_patch("fraud-check")
        await ctx.step("fraud", hit(ctx, "fraud"))
        await ctx.step("email", hit(ctx, "email"))
        await ctx.wait_for_event("packed")
        await ctx.wait_for_event("shipped")
        return "done"


async def waiting_for(runner: JobRunner, run_id: str, event: str) -> None:
    async def there() -> bool:
        state = await runner.status(run_id)
        return (
            state is not None
            and state.status is JobStatus.WAITING_FOR_EVENT
            and state.waiting_for == event
        )

    await wait_until(there)


async def test_a_step_added_without_a_patch_fails_the_runs_already_past_it(
    make_runner: Callable[..., JobRunner], counters: Counters
) -> None:
    async with make_runner(jobs=[Packed]) as before:
        old = await before.submit(Packed(order="p-0"))
        await waiting_for(before, old.id, "packed")
    async with make_runner(jobs=[PackedFraudUnpatched]) as after:
        await after.send_event(old.id, "packed")
        with pytest.raises(JobFailed) as failed:
            await after.handle(old.id, PackedFraudUnpatched).result(timeout=10)
    assert "position 2: the run recorded step 'email'" in failed.value.message
    assert "asks for step 'fraud'" in failed.value.message
    assert counters.counts["fraud"] == 0


async def test_a_patch_keeps_old_runs_on_the_old_path_and_new_runs_on_the_new(
    make_runner: Callable[..., JobRunner], counters: Counters
) -> None:
    async with make_runner(jobs=[Packed]) as before:
        old = await before.submit(Packed(order="p-1"))
        untouched = await before.submit(Packed(order="p-2"))
        await waiting_for(before, old.id, "packed")
        await waiting_for(before, untouched.id, "packed")
    async with make_runner(jobs=[PackedFraud]) as patched:
        new = await patched.submit(PackedFraud(order="p-3"))
        await waiting_for(patched, new.id, "packed")
        for run in (old, new):
            await patched.send_event(run.id, "packed")
            await waiting_for(patched, run.id, "shipped")
        assert counters.counts == {"charge": 3, "email": 3, "fraud": 1}
        # Which runs may still need the old path: the one that took it, and
        # the one that has not been back since the deploy, which went past
        # the patch (its email is after where the new run met it).
        paths = await patch_paths(patched, "fraud-check", RunFilter(kind="versioning.packed"))
        assert [r.id for r in paths.old] == [old.id]
        assert [r.id for r in paths.past] == [untouched.id]
        assert (paths.not_yet, paths.unplaced) == ([], [])
        assert [r.id for r in paths.new] == [new.id]
        assert paths.points == {"versioning.packed": 1}
        await patched.send_event(untouched.id, "packed")
        await patched.send_event(untouched.id, "shipped")
        assert await patched.handle(untouched.id, PackedFraud).result(timeout=10) == "done"
    assert counters.counts == {"charge": 3, "email": 3, "fraud": 1}, "the old run kept the old path"
    # Deprecated: a run on the new path goes on; one on the old path cannot.
    async with make_runner(jobs=[PackedFraudOnly]) as deprecated:
        for run in (old, new):
            await deprecated.send_event(run.id, "shipped")
        assert await deprecated.handle(new.id, PackedFraudOnly).result(timeout=10) == "done"
        with pytest.raises(JobFailed) as failed:
            await deprecated.handle(old.id, PackedFraudOnly).result(timeout=10)
    assert "the run recorded the old path of patch 'fraud-check'" in failed.value.message
    assert counters.counts == {"charge": 3, "email": 3, "fraud": 1}


class LateCheck(Job[str]):
    """A patch after a wait: a run waiting there has not reached it."""

    NAME: ClassVar[str] = "versioning.late-check"
    order: str

    async def run(self, ctx: JobContext) -> str:
        await ctx.step("charge", hit(ctx, "charge"))
        await ctx.wait_for_event("packed")
        if await ctx.patched("late-check"):
            await ctx.step("check", hit(ctx, "check"))
        await ctx.wait_for_event("shipped")
        return "done"


async def test_runs_not_yet_at_a_patch_are_told_from_those_past_it(
    make_runner: Callable[..., JobRunner], counters: Counters
) -> None:
    """``ls --patch``'s split: a run that has not decided is before the
    patch's point or past it, by where the runs of its kind that did met
    it; with none that did, the store cannot say."""
    chosen = RunFilter(kind="versioning.late-check")
    async with make_runner(jobs=[LateCheck]) as runner:
        early = await runner.submit(LateCheck(order="l-1"))
        ahead = await runner.submit(LateCheck(order="l-2"))
        for run in (early, ahead):
            await waiting_for(runner, run.id, "packed")
        paths = await patch_paths(runner, "late-check", chosen)
        assert sorted(r.id for r in paths.unplaced) == sorted([early.id, ahead.id])
        assert (paths.old, paths.past, paths.not_yet, paths.points) == ([], [], [], {})

        await runner.send_event(ahead.id, "packed")
        await waiting_for(runner, ahead.id, "shipped")
        paths = await patch_paths(runner, "late-check", chosen)
        assert [r.id for r in paths.new] == [ahead.id]
        assert [r.id for r in paths.not_yet] == [early.id]  # its wait is before the patch
        assert (paths.past, paths.unplaced) == ([], [])
        assert [r.id for r in paths.may_take_the_old_path] == [early.id]
        assert counters.counts["check"] == 1

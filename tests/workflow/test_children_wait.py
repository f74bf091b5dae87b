"""A parent awaiting N children resumes when what it awaits is over, not
once per child: the last child to end wakes it, or the first failure in
order (``ctx.gather`` raises it as soon as it and every child before it
have ended). Replays are counted exactly: the parent's claims, and its
code's runs. (On the MemoryQueue and the StoreQueue, over a MemoryStore;
the children end when the test sends them their event, so nothing here
races.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import pytest
from wf_jobs import Counters
from wf_support import wait_until

from stepstone import IdempotencyKey, Job, JobContext, JobFailed, JobRunner, JobStatus
from stepstone.ops.reads import detail

MakeRunner = Callable[..., JobRunner]
DEADLINE = 10.0


class Step(Job[str]):
    """Waits for event ``go``; fails for good when its payload says so."""

    NAME: ClassVar[str] = "children.step"
    name: str

    def idempotency_key(self) -> str:
        return f"step:{self.name}"

    async def run(self, ctx: JobContext) -> str:
        said: dict[str, Any] = await ctx.wait_for_event("go")
        if said.get("fail"):
            raise RuntimeError(f"{self.name} failed")
        return self.name


class Fan(Job[list[str]]):
    """Gathers its children, counting each run of its code."""

    NAME: ClassVar[str] = "children.fan"
    names: list[str]

    def idempotency_key(self) -> str:
        return "fan:" + ",".join(self.names)

    async def run(self, ctx: JobContext) -> list[str]:
        ctx.state(Counters).hit("fan")
        handles = [await ctx.submit(Step(name=name)) for name in self.names]
        try:
            return await ctx.gather(*handles)
        except JobFailed as failed:
            return [f"failed: {failed.message}"]


async def status(runner: JobRunner, key: str) -> tuple[JobStatus | None, str | None]:
    state = await runner.status(IdempotencyKey(key))
    return (None, None) if state is None else (state.status, state.waiting_for)


async def until(runner: JobRunner, key: str, wanted: JobStatus, detail: str | None = None) -> None:
    async def there() -> bool:
        now = await status(runner, key)
        return now[0] is wanted and (detail is None or now[1] == detail)

    await wait_until(there, DEADLINE)


async def parent_claims(runner: JobRunner, key: str) -> int:
    """The claims of the parent's run so far: one, and one per resume."""
    record = (await detail(runner, IdempotencyKey(key).run_id)).outcome
    assert record is not None and record.claims is not None
    return record.claims


async def go(runner: JobRunner, name: str, **payload: Any) -> None:
    await runner.send_event(IdempotencyKey(f"step:{name}"), "go", payload)


async def test_a_parent_of_four_children_resumes_once_when_the_last_ends(
    make_runner: MakeRunner, counters: Counters
) -> None:
    names = ["a", "b", "c", "d"]
    async with make_runner(jobs=[Fan, Step]) as runner:
        fan = await runner.submit(Fan(names=names))
        for name in names:
            await until(runner, f"step:{name}", JobStatus.WAITING_FOR_EVENT)
        await until(runner, "fan:a,b,c,d", JobStatus.WAITING_FOR_CHILDREN, "4 of 4 children")
        for name in ("a", "b"):
            await go(runner, name)
            await until(runner, f"step:{name}", JobStatus.SUCCEEDED)
        # Two ended: the parent's wait counts them off, and it sleeps on.
        await until(runner, "fan:a,b,c,d", JobStatus.WAITING_FOR_CHILDREN, "2 of 4 children")
        assert counters.counts["fan"] == 1
        for name in ("c", "d"):
            await go(runner, name)
        assert await fan.result(timeout=DEADLINE) == names
        # Its code ran twice (the first run and one resume), its run was
        # claimed twice: it was not woken by each child (that was 5 and 5).
        assert counters.counts["fan"] == 2
        assert await parent_claims(runner, "fan:a,b,c,d") == 2


async def test_the_first_failure_in_order_ends_the_wait_at_once(
    make_runner: MakeRunner, counters: Counters
) -> None:
    async with make_runner(jobs=[Fan, Step]) as runner:
        fan = await runner.submit(Fan(names=["x", "y"]))
        await until(runner, "fan:x,y", JobStatus.WAITING_FOR_CHILDREN, "2 of 2 children")
        await go(runner, "x", fail=True)
        assert await fan.result(timeout=DEADLINE) == ["failed: RuntimeError: x failed"]
        assert counters.counts["fan"] == 2  # resumed once, by the failure
        # The other child goes on; the parent is not woken by its end.
        assert (await status(runner, "step:y"))[0] is JobStatus.WAITING_FOR_EVENT
        await go(runner, "y")
        await until(runner, "step:y", JobStatus.SUCCEEDED)
        assert counters.counts["fan"] == 2


@pytest.mark.parametrize("second", ["succeeds", "fails"])
async def test_a_failure_after_a_running_child_waits_for_it(
    make_runner: MakeRunner, counters: Counters, second: str
) -> None:
    """The first failure in order is the one raised, on every replay: a
    failure of a later child wakes the parent, which finds an earlier one
    still running and waits on for it (one resume more)."""
    async with make_runner(jobs=[Fan, Step]) as runner:
        fan = await runner.submit(Fan(names=["p", "q"]))
        await until(runner, "fan:p,q", JobStatus.WAITING_FOR_CHILDREN, "2 of 2 children")
        await go(runner, "q", fail=True)
        await until(runner, "step:q", JobStatus.FAILED)
        await until(runner, "fan:p,q", JobStatus.WAITING_FOR_CHILDREN, "1 of 2 children")
        await go(runner, "p", fail=second == "fails")
        expected = "p failed" if second == "fails" else "q failed"
        assert await fan.result(timeout=DEADLINE) == [f"failed: RuntimeError: {expected}"]
        assert counters.counts["fan"] == 3

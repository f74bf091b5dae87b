"""Job types that wait: sleep, events, children (importable by child processes)."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel
from wf_jobs import Counters

from stepstone import Job, JobContext, JobFailed, Permanent


class Sleeper(Job[str]):
    """A step, a durable sleep, a step: the first step must not run again."""

    NAME: ClassVar[str] = "wait.sleeper"
    key: str
    seconds: float

    def idempotency_key(self) -> str:
        return f"sleeper:{self.key}"

    async def run(self, ctx: JobContext) -> str:
        counters = ctx.state(Counters)

        def before() -> str:
            counters.hit(f"before:{self.key}")
            return "before"

        def after() -> str:
            counters.hit(f"after:{self.key}")
            return "after"

        first = await ctx.step("before", before)
        await ctx.sleep(self.seconds)
        second = await ctx.step("after", after)
        return f"{first}-{second}"


class Quick(Job[str]):
    NAME: ClassVar[str] = "wait.quick"
    tag: str

    async def run(self, ctx: JobContext) -> str:
        ctx.state(Counters).hit(f"quick:{self.tag}")
        return self.tag


class Approval(BaseModel):
    approved: bool
    by: str


class AwaitsApproval(Job[str]):
    NAME: ClassVar[str] = "wait.approval"
    order: str
    timeout: float | None = None

    def idempotency_key(self) -> str:
        return f"approval:{self.order}"

    async def run(self, ctx: JobContext) -> str:
        ctx.state(Counters).hit(f"approval-run:{self.order}")
        decision = await ctx.wait_for_event("approval", timeout=self.timeout, type=Approval)
        if decision is None:
            return "timed out"
        assert isinstance(decision, Approval)
        return f"{'approved' if decision.approved else 'refused'} by {decision.by}"


class TwoEvents(Job[list[Any]]):
    """Takes two events of one name: each once, in the order sent."""

    NAME: ClassVar[str] = "wait.two-events"
    key: str

    def idempotency_key(self) -> str:
        return f"two:{self.key}"

    async def run(self, ctx: JobContext) -> list[Any]:
        first = await ctx.wait_for_event("ping")
        second = await ctx.wait_for_event("ping")
        return [first, second]


class Child(Job[int]):
    NAME: ClassVar[str] = "wait.child"
    n: int
    fail: bool = False

    async def run(self, ctx: JobContext) -> int:
        ctx.state(Counters).hit(f"child:{self.n}")
        if self.fail:
            raise Permanent(f"child {self.n} refuses")
        return self.n * self.n


class Parent(Job[int]):
    """Fans out to children and fans in; a failed child is caught."""

    NAME: ClassVar[str] = "wait.parent"
    children: int
    failing: tuple[int, ...] = ()

    async def run(self, ctx: JobContext) -> int:
        ctx.state(Counters).hit("parent-run")
        handles = [
            await ctx.submit(Child(n=i, fail=i in self.failing)) for i in range(self.children)
        ]
        if not self.failing:
            results = await ctx.gather(*handles)
            return int(sum(results))
        total = 0
        for handle in handles:
            try:
                total += await handle
            except JobFailed:
                total -= 1000
        return total


class KeyMaker(Job[list[str]]):
    """Hands out an outside-world key, fails once, and hands it out again."""

    NAME: ClassVar[str] = "wait.key-maker"

    async def run(self, ctx: JobContext) -> list[str]:
        keys = [ctx.idempotency_key("charge"), ctx.idempotency_key("refund")]
        recorded = await ctx.step("first-keys", lambda: keys)
        if ctx.attempt == 1:
            raise RuntimeError("fail once")
        return [*recorded, *keys]


class SyncWaiter(Job[str]):
    """A synchronous job that sleeps, then waits for an event, through ctx.sync."""

    NAME: ClassVar[str] = "wait.sync"
    key: str

    def idempotency_key(self) -> str:
        return f"sync:{self.key}"

    def run(self, ctx: JobContext) -> str:
        counters = ctx.state(Counters)
        ctx.sync.step("first", lambda: counters.hit(f"sync-first:{self.key}"))
        ctx.sync.sleep(60)
        word = ctx.sync.wait_for_event("word", type=str)
        return f"slept, then heard {word}"


WAIT_JOBS: list[type[Job[Any]]] = [
    AwaitsApproval,
    Child,
    KeyMaker,
    Parent,
    Quick,
    Sleeper,
    SyncWaiter,
    TwoEvents,
]


class Tick(Job[str]):
    """Counts each tick it runs for, by the tick's time."""

    NAME: ClassVar[str] = "wait.tick"
    at: str

    async def run(self, ctx: JobContext) -> str:
        ctx.state(Counters).hit(f"tick:{self.at}")
        return self.at


WAIT_JOBS.append(Tick)

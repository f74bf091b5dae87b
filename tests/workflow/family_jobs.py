"""Job types of the waiters, events and families tests (importable by child
processes): parents that join children others started, concurrent event
waits, children that fail for good."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from pydantic import BaseModel
from wf_jobs import Counters

from stepstone import Job, JobContext, Permanent


class GoesOnEvent(Job[Any]):
    """Counts its start, then waits for event ``go``."""

    NAME: ClassVar[str] = "family.goes-on-event"
    key: str

    def idempotency_key(self) -> str:
        return f"goes:{self.key}"

    async def run(self, ctx: JobContext) -> Any:
        ctx.state(Counters).hit(f"goes:{self.key}")
        return await ctx.wait_for_event("go")


class Tag(Job[str]):
    NAME: ClassVar[str] = "family.tag"
    tag: str

    async def run(self, ctx: JobContext) -> str:
        ctx.state(Counters).hit(f"tag:{self.tag}")
        return self.tag


class TwoAtOnce(Job[list[Any]]):
    """Two waits for one event name at once: each must take its own event."""

    NAME: ClassVar[str] = "family.two-at-once"
    key: str

    def idempotency_key(self) -> str:
        return f"two-at-once:{self.key}"

    async def run(self, ctx: JobContext) -> list[Any]:
        ctx.state(Counters).hit(f"two-at-once:{self.key}")
        return list(await asyncio.gather(ctx.wait_for_event("x"), ctx.wait_for_event("x")))


class Joins(Job[Any]):
    """Submits GoesOnEvent(key=child) as its child (creating or joining it)
    and returns its result."""

    NAME: ClassVar[str] = "family.joins"
    child: str
    who: str

    def idempotency_key(self) -> str:
        return f"joins:{self.who}"

    async def run(self, ctx: JobContext) -> Any:
        ctx.state(Counters).hit(f"joins:{self.who}")
        return await (await ctx.submit(GoesOnEvent(key=self.child)))


class Refuses(Job[int]):
    NAME: ClassVar[str] = "family.refuses"
    n: int

    async def run(self, ctx: JobContext) -> int:
        ctx.state(Counters).hit(f"refuses:{self.n}")
        raise Permanent(f"child {self.n} refuses")


class LetsChildFail(Job[int]):
    """Awaits a child that fails for good, and does not catch it."""

    NAME: ClassVar[str] = "family.lets-child-fail"
    key: str
    cancelled: bool = False

    def idempotency_key(self) -> str:
        return f"lets-fail:{self.key}"

    async def run(self, ctx: JobContext) -> int:
        ctx.state(Counters).hit(f"lets-fail:{self.key}")
        return await (await ctx.submit(Refuses(n=1)))


class WaitsOddly(Job[str]):
    """A durable wait given ``how`` (a float's text: NaN and infinities
    cannot be a job's input): ``sleep`` or an event wait's ``timeout``."""

    NAME: ClassVar[str] = "family.waits-oddly"
    wait: str
    how: str

    async def run(self, ctx: JobContext) -> str:
        ctx.state(Counters).hit(f"oddly:{self.wait}:{self.how}")
        if self.wait == "sleep":
            await ctx.sleep(float(self.how))
        else:
            await ctx.wait_for_event("x", timeout=float(self.how))
        return "woke"


class Order(BaseModel):
    sku: str
    cents: int


class TakesOrder(Job[int]):
    NAME: ClassVar[str] = "family.takes-order"
    key: str

    def idempotency_key(self) -> str:
        return f"takes-order:{self.key}"

    async def run(self, ctx: JobContext) -> int:
        ctx.state(Counters).hit(f"takes-order:{self.key}")
        order = await ctx.wait_for_event("order", type=Order)
        assert isinstance(order, Order)
        return order.cents


class Counted(Job[int]):
    """One step that counts its executions; keyed when ``key`` is given."""

    NAME: ClassVar[str] = "family.counted"
    key: str | None = None
    tag: str

    def idempotency_key(self) -> str | None:
        return self.key

    async def run(self, ctx: JobContext) -> int:
        counters = ctx.state(Counters)
        return await ctx.step("count", lambda: counters.hit(f"counted:{self.tag}"))


class ChildThenEvent(Job[int]):
    """Awaits a Counted child, then waits for event ``go``: a parent that
    outlives its finished child, and replays its submit when it resumes."""

    NAME: ClassVar[str] = "family.child-then-event"
    who: str
    child_key: str | None = None

    def idempotency_key(self) -> str:
        return f"child-then-event:{self.who}"

    async def run(self, ctx: JobContext) -> int:
        tag = self.child_key or self.who
        executions = await (await ctx.submit(Counted(key=self.child_key, tag=tag)))
        await ctx.wait_for_event("go")
        return executions


class FanOut(Job[list[Any]]):
    """Creates ``n`` children that wait for event ``go``, and gathers them;
    with ``nested``, each child is itself a FanOut of two."""

    NAME: ClassVar[str] = "family.fan-out"
    who: str
    n: int
    nested: bool = False

    def idempotency_key(self) -> str:
        return f"fan-out:{self.who}"

    async def run(self, ctx: JobContext) -> list[Any]:
        children: list[Job[Any]] = [
            FanOut(who=f"{self.who}-{i}", n=2)
            if self.nested
            else GoesOnEvent(key=f"{self.who}-{i}")
            for i in range(self.n)
        ]
        return await ctx.gather(*[await ctx.submit(child) for child in children])


class GatedParent(Job[Any]):
    """Waits on the Counters gate (a parent still running elsewhere when it
    is cancelled), then creates a child and awaits it."""

    NAME: ClassVar[str] = "family.gated-parent"
    who: str

    def idempotency_key(self) -> str:
        return f"gated-parent:{self.who}"

    async def run(self, ctx: JobContext) -> Any:
        counters = ctx.state(Counters)
        counters.started.set()
        await counters.gate.wait()
        child = await ctx.submit(GoesOnEvent(key=f"late-{self.who}"))
        counters.hit(f"gated-submitted:{self.who}")
        return await child


FAMILY_JOBS: list[type[Job[Any]]] = [
    ChildThenEvent,
    FanOut,
    GatedParent,
    Counted,
    GoesOnEvent,
    Joins,
    LetsChildFail,
    Refuses,
    Tag,
    TakesOrder,
    TwoAtOnce,
    WaitsOddly,
]

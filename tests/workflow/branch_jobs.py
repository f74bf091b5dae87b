"""Jobs whose code runs concurrently with itself, for the replay tests.

Each job fans out into branches (``asyncio.gather``, ``asyncio.TaskGroup``,
``asyncio.create_task``, nested) whose calls start in an order the event
loop decides: every branch first awaits a random pause (as code that does
a read or an HTTP call first would), and every step's function takes a
random time. The pauses come from :class:`Jitter`, seeded by the job's
input and its attempt, so each attempt runs its branches in another order.
A job's first attempt fails once its branches are done (or it waits for an
event), so the next one replays them.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from typing import Any, ClassVar

from stepstone import Job, JobContext


class Effects:
    """Application state: what the steps did, by name, in the order done."""

    def __init__(self) -> None:
        self.done: Counter[str] = Counter()

    def hit(self, name: str) -> None:
        self.done[name] += 1


class Jitter:
    """Random pauses of up to ``most`` seconds, one generator per job's seed:
    each attempt draws other pauses than the one before it."""

    def __init__(self, most: float = 0.003) -> None:
        self.most = most
        self.randoms: dict[int, random.Random] = {}

    def pause(self, seed: int) -> float:
        return self.randoms.setdefault(seed, random.Random(seed)).random() * self.most


async def pause(ctx: JobContext, seed: int) -> None:
    await asyncio.sleep(ctx.state(Jitter).pause(seed))


def effect(ctx: JobContext, seed: int, name: str) -> Any:
    """A step function that records it ran and takes a random time."""

    async def do(*args: Any) -> str:
        ctx.state(Effects).hit(f"{seed}/{name}{args}")
        await pause(ctx, seed)
        return ":".join([name, *map(str, args)])

    return do


async def again_once(ctx: JobContext, how: str) -> None:
    """End the first attempt so the run is replayed: fail it, or wait for an event."""
    if how == "fail" and ctx.attempt == 1:
        raise RuntimeError("the first attempt fails once its branches are done")
    if how == "event":
        await ctx.wait_for_event("go")


class SameNames(Job[list[str]]):
    """Branches that pause, then call one step name each with their own argument."""

    NAME: ClassVar[str] = "branches.same-names"
    seed: int
    n: int = 4
    how: str = "fail"

    async def run(self, ctx: JobContext) -> list[str]:
        async def one(i: int) -> str:
            await pause(ctx, self.seed)
            fetched: str = await ctx.step("fetch", effect(ctx, self.seed, "fetch"), i)
            return fetched

        got = await asyncio.gather(*(one(i) for i in range(self.n)))
        await again_once(ctx, self.how)
        return list(got)


class DistinctNames(SameNames):
    """Each branch calls a step of its own name."""

    NAME: ClassVar[str] = "branches.distinct-names"

    async def run(self, ctx: JobContext) -> list[str]:
        async def one(i: int) -> str:
            await pause(ctx, self.seed)
            fetched: str = await ctx.step(f"fetch-{i}", effect(ctx, self.seed, f"fetch-{i}"), i)
            return fetched

        got = await asyncio.gather(*(one(i) for i in range(self.n)))
        await again_once(ctx, self.how)
        return list(got)


class TwoStages(SameNames):
    """Branches of two steps, the second on the first's result; no
    randomness in the job's code but the steps' durations."""

    NAME: ClassVar[str] = "branches.two-stages"

    async def run(self, ctx: JobContext) -> list[str]:
        async def one(i: int) -> str:
            fetched: str = await ctx.step("fetch", effect(ctx, self.seed, "fetch"), i)
            saved: str = await ctx.step("save", effect(ctx, self.seed, "save"), fetched)
            return saved

        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one(i)) for i in range(self.n)]
        await again_once(ctx, self.how)
        return [task.result() for task in tasks]


class Nested(SameNames):
    """A TaskGroup of branches, each creating two tasks of its own; the root
    makes calls of its own between them."""

    NAME: ClassVar[str] = "branches.nested"

    async def run(self, ctx: JobContext) -> list[str]:
        first: str = await ctx.step("first", effect(ctx, self.seed, "first"))

        async def leaf(i: int, j: int) -> str:
            await pause(ctx, self.seed)
            got: str = await ctx.step("leaf", effect(ctx, self.seed, "leaf"), i, j)
            return got

        async def one(i: int) -> list[str]:
            await pause(ctx, self.seed)
            left = asyncio.create_task(leaf(i, 0))
            right = asyncio.create_task(leaf(i, 1))
            mid: str = await ctx.step("mid", effect(ctx, self.seed, "mid"), i)
            return [await left, mid, await right]

        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one(i)) for i in range(self.n)]
            middle: str = await ctx.step("middle", effect(ctx, self.seed, "middle"))
        await again_once(ctx, self.how)
        return [first, middle, *(part for task in tasks for part in task.result())]


class CallsAsTasks(SameNames):
    """Steps gathered as they are, each a task of its own: their order is
    the order their tasks were created."""

    NAME: ClassVar[str] = "branches.calls-as-tasks"

    async def run(self, ctx: JobContext) -> list[str]:
        got = await asyncio.gather(
            *(ctx.step("fetch", effect(ctx, self.seed, "fetch"), i) for i in range(self.n))
        )
        await again_once(ctx, self.how)
        return [str(value) for value in got]


class Patched(SameNames):
    """Branches that ask a patch after other branches have made calls."""

    NAME: ClassVar[str] = "branches.patched"

    async def run(self, ctx: JobContext) -> list[str]:
        async def one(i: int) -> str:
            await pause(ctx, self.seed)
            fetched: str = await ctx.step("fetch", effect(ctx, self.seed, "fetch"), i)
            await pause(ctx, self.seed)
            if await ctx.patched("p"):
                return fetched + ":new"
            return fetched + ":old"

        got = await asyncio.gather(*(one(i) for i in range(self.n)))
        await again_once(ctx, self.how)
        return list(got)


class Deprecated(SameNames):
    """The same, with only the patch's new path left."""

    NAME: ClassVar[str] = "branches.deprecated"

    async def run(self, ctx: JobContext) -> list[str]:
        async def one(i: int) -> str:
            await pause(ctx, self.seed)
            fetched: str = await ctx.step("fetch", effect(ctx, self.seed, "fetch"), i)
            await pause(ctx, self.seed)
            await ctx.deprecate_patch("p")
            return fetched + ":new"

        got = await asyncio.gather(*(one(i) for i in range(self.n)))
        await again_once(ctx, self.how)
        return list(got)


class Child(Job[str]):
    NAME: ClassVar[str] = "branches.child"
    i: int

    async def run(self, ctx: JobContext) -> str:
        return f"child:{self.i}"


class EveryCall(SameNames):
    """Branches that step, wait for their own event, sleep and submit a child."""

    NAME: ClassVar[str] = "branches.every-call"

    async def run(self, ctx: JobContext) -> list[str]:
        async def one(i: int) -> str:
            await pause(ctx, self.seed)
            fetched: str = await ctx.step("fetch", effect(ctx, self.seed, "fetch"), i)
            said = await ctx.wait_for_event(f"e{i}", type=str)
            await ctx.sleep(0)
            child = await ctx.submit(Child(i=i))
            return f"{fetched}/{said}/{await child}"

        got = await asyncio.gather(*(one(i) for i in range(self.n)))
        await again_once(ctx, self.how)
        return list(got)


BRANCH_JOBS: list[type[Job[Any]]] = [
    SameNames,
    DistinctNames,
    TwoStages,
    Nested,
    CallsAsTasks,
    Patched,
    Deprecated,
    Child,
    EveryCall,
]

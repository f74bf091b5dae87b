"""Job types that wait, for the reliability tests of durable waits.

Imported by the tests and by ``rel_worker.py``. Every step is
:func:`rel_jobs.effect`, so each execution of a step is an ``EXEC`` line in
the event log. The step right after a run's wait, ``b``, also writes
``RESUMED run pid time`` (its process's ``time.time()``): when the run went
on past its wait, once per execution of that step. A schedule's tick writes
``TICK at run pid`` from its step.
"""

from __future__ import annotations

import os
import time
from typing import Any, ClassVar

from rel_jobs import effect, emit

from stepstone import Job, JobContext


async def after_wait(run: str) -> str:
    """Step ``b``: the first thing a run does once its wait is over."""
    emit("RESUMED", run, os.getpid(), f"{time.time():.3f}")
    return await effect(run, "b")


class Sleeps(Job[list[str]]):
    """A step, a durable sleep of ``seconds``, a step."""

    NAME: ClassVar[str] = "rel.sleeps"
    max_attempts: ClassVar[int | None] = 20
    n: int
    seconds: float

    def idempotency_key(self) -> str:
        return f"rel-sleeps:{self.n}"

    async def run(self, ctx: JobContext) -> list[str]:
        a = await ctx.step("a", effect, ctx.run_id, "a")
        await ctx.sleep(self.seconds)
        return [a, await ctx.step("b", after_wait, ctx.run_id)]


class AwaitsGo(Job[list[Any]]):
    """A step, a wait for event ``go``, a step, and a second wait for ``go``
    that times out after a second (one event is taken once)."""

    NAME: ClassVar[str] = "rel.awaits-go"
    max_attempts: ClassVar[int | None] = 20
    n: int

    def idempotency_key(self) -> str:
        return f"rel-awaits-go:{self.n}"

    async def run(self, ctx: JobContext) -> list[Any]:
        a = await ctx.step("a", effect, ctx.run_id, "a")
        go = await ctx.wait_for_event("go", type=str)
        b = await ctx.step("b", after_wait, ctx.run_id)
        again = await ctx.wait_for_event("go", timeout=1.0, type=str)
        return [a, go, b, again]


class Leaf(Job[str]):
    """A child that sleeps ``seconds``, then runs one step."""

    NAME: ClassVar[str] = "rel.leaf"
    max_attempts: ClassVar[int | None] = 20
    parent: int
    i: int
    seconds: float

    async def run(self, ctx: JobContext) -> str:
        await ctx.sleep(self.seconds)
        return await ctx.step("leaf", effect, ctx.run_id, "leaf")


class FansIn(Job[list[str]]):
    """A step, ``children`` sleeping Leaf children awaited with ``ctx.gather``, a step."""

    NAME: ClassVar[str] = "rel.fans-in"
    max_attempts: ClassVar[int | None] = 20
    n: int
    children: int
    seconds: float

    def idempotency_key(self) -> str:
        return f"rel-fans-in:{self.n}"

    async def run(self, ctx: JobContext) -> list[str]:
        a = await ctx.step("a", effect, ctx.run_id, "a")
        handles = [
            await ctx.submit(Leaf(parent=self.n, i=i, seconds=self.seconds))
            for i in range(self.children)
        ]
        leaves = await ctx.gather(*handles)
        return [a, *leaves, await ctx.step("b", after_wait, ctx.run_id)]


async def _tick(run: str, at: float) -> float:
    emit("TICK", f"{at:.3f}", run, os.getpid())
    return at


class Tick(Job[float]):
    """A schedule's job: one step that logs the tick it ran for."""

    NAME: ClassVar[str] = "rel.tick"
    at: float

    async def run(self, ctx: JobContext) -> float:
        return await ctx.step("tick", _tick, ctx.run_id, self.at)


WAIT_JOBS: tuple[type[Job[Any]], ...] = (Sleeps, AwaitsGo, Leaf, FansIn, Tick)

"""The benchmark's job types (importable by worker processes)."""

from __future__ import annotations

import asyncio
from typing import ClassVar

from stepstone import Job, JobContext


async def bump(x: int) -> int:
    """A step: async, returns a small value."""
    return x + 1


STEP_NAMES = tuple(f"s{i}" for i in range(100))


class W3(Job[int]):
    """``steps`` memoized async steps, each returning a small int.

    Keyed by default (``w3:<tag>:<n>``) so the R case can resubmit the same
    keys; ``keyed=False`` gives every submit a fresh run id. ``pause`` seconds
    are waited after the steps, as a job waiting on another service would.
    """

    NAME: ClassVar[str] = "bench.w3"
    n: int
    steps: int = 3
    tag: str = ""
    keyed: bool = True
    pause: float = 0.0

    def idempotency_key(self) -> str | None:
        return f"w3:{self.tag}:{self.n}" if self.keyed else None

    async def run(self, ctx: JobContext) -> int:
        value = self.n
        for i in range(self.steps):
            value = await ctx.step(STEP_NAMES[i], bump, value)
        if self.pause:
            await asyncio.sleep(self.pause)
        return value


class Naps(Job[int]):
    """One durable sleep of ``seconds``: the suspended-runs case."""

    NAME: ClassVar[str] = "bench.naps"
    n: int
    seconds: float

    async def run(self, ctx: JobContext) -> int:
        await ctx.sleep(self.seconds)
        return self.n


class AwaitsPing(Job[str]):
    """One wait for event ``ping``: the suspended-runs case."""

    NAME: ClassVar[str] = "bench.awaits-ping"

    async def run(self, ctx: JobContext) -> str:
        return str(await ctx.wait_for_event("ping", type=str))

"""The benchmark's job types (importable by worker processes)."""

from __future__ import annotations

import asyncio
from typing import ClassVar

from stepstone import Job, JobContext, RateLimit


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
    fail_first: int = 0
    """Attempts that fail (after the steps) before one succeeds."""

    def idempotency_key(self) -> str | None:
        return f"w3:{self.tag}:{self.n}" if self.keyed else None

    async def run(self, ctx: JobContext) -> int:
        value = self.n
        for i in range(self.steps):
            value = await ctx.step(STEP_NAMES[i], bump, value)
        if self.pause:
            await asyncio.sleep(self.pause)
        if ctx.attempt <= self.fail_first:
            raise ConnectionError(f"attempt {ctx.attempt} fails, as asked")
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


class W3Keyed(W3):
    """W3 under a concurrency key: ``limit="own-key"`` gives each run its own
    key (the cost of a key nobody else holds), ``"shared-key"`` one key for
    every run with a limit of 64 (the benchmark's concurrency: nobody waits,
    but every run updates the same object)."""

    NAME: ClassVar[str] = "bench.w3-keyed"
    concurrency_limit: ClassVar[int] = 64
    limit: str = "own-key"

    def concurrency_key(self) -> str:
        return f"{self.tag}:{self.n}" if self.limit == "own-key" else self.tag


class W3Line(W3):
    """W3 with one concurrency key for every run and a limit of 8, so at 64
    in flight most runs wait in the key's line: the cost of waiting."""

    NAME: ClassVar[str] = "bench.w3-line"
    concurrency_limit: ClassVar[int] = 8

    def concurrency_key(self) -> str:
        return self.tag


class W3Rated(W3):
    """W3 under a rate limit no run ever waits for: the cost of taking a turn."""

    NAME: ClassVar[str] = "bench.w3-rated"
    rate_limit: ClassVar[RateLimit] = RateLimit(1_000_000, burst=1_000_000)


def w3_job(limit: str, **fields: object) -> W3:
    """A W3 run under ``limit``: "" (none), "own-key", "shared-key", "line" or "rate"."""
    if limit in ("own-key", "shared-key"):
        return W3Keyed(limit=limit, **fields)  # type: ignore[arg-type]
    if limit == "line":
        return W3Line(**fields)  # type: ignore[arg-type]
    if limit == "rate":
        return W3Rated(**fields)  # type: ignore[arg-type]
    if limit:
        raise ValueError(f"unknown limit {limit!r}")
    return W3(**fields)  # type: ignore[arg-type]


W3_JOBS = (W3, W3Keyed, W3Line, W3Rated)

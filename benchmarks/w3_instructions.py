"""W3 on memory://, for counting the hot path's instructions with callgrind.

    valgrind --tool=callgrind --callgrind-out-file=cg.200 python -m benchmarks.w3_instructions 200
    valgrind --tool=callgrind --callgrind-out-file=cg.600 python -m benchmarks.w3_instructions 600

Instructions a job = (Ir(600) - Ir(200)) / 400, Ir from each file's
``summary:`` line: the difference takes out the interpreter's start and
the imports. Instructions do not depend on the machine's load, so two
commits compare on a busy machine where wall-clock rates swing 10-50%
(benchmarks/NOTES.md, "Hot path"). W3: keyed jobs of three steps,
concurrency 64, submits awaited one after another.
"""

from __future__ import annotations

import asyncio
import sys
from typing import ClassVar

from stepstone import Job, JobContext, JobRunner


async def _next(i: int) -> int:
    return i + 1


class W3(Job[int]):
    """A keyed job of three steps."""

    NAME: ClassVar[str] = "bench.w3"
    n: int

    def idempotency_key(self) -> str:
        return f"w3:{self.n}"

    async def run(self, ctx: JobContext) -> int:
        a = await ctx.step("a", _next, self.n)
        b = await ctx.step("b", _next, a)
        return await ctx.step("c", _next, b)


async def run_w3(jobs: int) -> None:
    """``jobs`` W3 runs on memory://, each awaited after all are submitted."""
    async with JobRunner("memory://", jobs=[W3], concurrency=64) as runner:
        handles = [await runner.submit(W3(n=i)) for i in range(jobs)]
        for handle in handles:
            await handle


if __name__ == "__main__":
    asyncio.run(run_w3(int(sys.argv[1]) if len(sys.argv) > 1 else 600))

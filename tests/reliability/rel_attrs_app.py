"""A process that submits and runs jobs with attributes until it is killed:
``python rel_attrs_app.py ROOT START``.

On the FileStore at ROOT it submits ``Tagged`` runs four at a time (numbered
from START; every third keyed, and each batch resubmits the first keyed run
of the process, which joins it or reads its outcome), each with the
attributes ``tenant=acme`` and ``batch=START``, while its own worker (worker
id ``rel-attrs``) runs them: each sets ``stage=set`` and its ``parity`` in
the middle. It prints how many it has submitted after each batch. The test
SIGKILLs it at a random moment (tests/reliability/test_attribute_crash.py).
"""

from __future__ import annotations

import asyncio
import sys
from typing import ClassVar

from stepstone import Job, JobContext, JobRunner, SubmitOptions
from stepstone.store import FileStore


class Tagged(Job[int]):
    NAME: ClassVar[str] = "rel.tagged"
    n: int
    keyed: bool = False

    def idempotency_key(self) -> str | None:
        return f"tagged:{self.n}" if self.keyed else None

    async def run(self, ctx: JobContext) -> int:
        await ctx.step("one", lambda: self.n)
        await ctx.set_attributes({"stage": "set", "parity": str(self.n % 2)})
        await ctx.step("two", lambda: self.n)
        return self.n


def runner(root: str, **kwargs: object) -> JobRunner:
    """The app's runner on ``root``: a short lease, the same worker id in
    every process (a restart takes back the runs a killed one held)."""
    return JobRunner(
        FileStore(root),
        jobs=[Tagged],
        concurrency=8,
        lease=2.0,
        worker_id="rel-attrs",
        retry_backoff=0.0,
        poll_interval=0.05,
        **kwargs,  # type: ignore[arg-type]
    )


async def main(root: str, start: int) -> None:
    options = SubmitOptions(attributes={"tenant": "acme", "batch": str(start)})
    async with runner(root) as app:
        n = start
        while True:
            jobs = [Tagged(n=m, keyed=m % 3 == 0) for m in range(n, n + 4)]
            jobs.append(Tagged(n=start, keyed=True))
            await asyncio.gather(*(app.submit(job, options) for job in jobs))
            n += 4
            print(n - start, flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))

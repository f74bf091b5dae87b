"""S3's 409 ConditionalRequestConflict, in bursts on one key as contention on
AWS gives them, costs a job nothing: through a proxy in front of moto that
answers a tenth of conditional PUTs with the start of a burst (six 409s in a
row on that key within 2 s, then 2 s of calm there), seeded, 50 jobs of 3 steps submitted by key
and run by the runner's worker: every submit returns a handle, every step
runs once, every outcome is recorded, stepstone logs no error.
Before conflicts had a rule and a budget of their own, the same bursts
outlasted the store's five quick tries: steps ran twice, outcomes were not
recorded and submits raised StoreUnavailable to their caller. Before the
worker renewed leases on a task of its own, a claim waiting out a burst held
back the renewals of the jobs running, and at the default lease some of
them lapsed and ran twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import AsyncIterator
from typing import ClassVar

import pytest
from conflict_proxy import ConflictProxy

from stepstone import Job, JobContext, JobRunner

pytestmark = pytest.mark.slow

JOBS = 50
RAN: Counter[tuple[int, str]] = Counter()


async def step(n: int, name: str) -> int:
    RAN[(n, name)] += 1
    return 1


class ThreeSteps(Job[int]):
    NAME: ClassVar[str] = "conflicts.three_steps"
    n: int

    def idempotency_key(self) -> str:
        return f"three-steps-{self.n}"

    async def run(self, ctx: JobContext) -> int:
        total = 0
        for name in ("a", "b", "c"):
            total += await ctx.step(name, step, self.n, name)
        return total


@pytest.fixture
async def proxy(moto_server: str) -> AsyncIterator[ConflictProxy]:
    p = ConflictProxy(moto_server, seed=32, burst_chance=0.1, burst=6, window=2.0)
    await p.start()
    yield p
    await p.stop()


async def test_bursts_of_conflicts_cost_no_job_anything(
    proxy: ConflictProxy, s3_bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    RAN.clear()
    url = f"s3://{s3_bucket}/app?endpoint_url={proxy.url}&region=us-east-1"
    caplog.set_level(logging.WARNING, logger="stepstone")
    # The default lease (10 s), which two bursts in a row on one key outlast:
    # renewals keep their own task, a claim that landed late is extended, and
    # no claim here races a renewal of ours (tests/runtime/test_slow_claims.py).
    async with JobRunner(url, jobs=[ThreeSteps], concurrency=8, poll_interval=0.05) as runner:
        handles = await asyncio.gather(*(runner.submit(ThreeSteps(n=n)) for n in range(JOBS)))
        results = await asyncio.wait_for(asyncio.gather(*handles), timeout=240)
    assert results == [3] * JOBS
    ran_once = Counter({(n, name): 1 for n in range(JOBS) for name in "abc"})
    assert ran_once == RAN
    assert proxy.conflicts >= 30  # bursts met, not a lucky run without them
    troubles = [  # the engine's; the proxy's own (a reset from moto under load) are not the subject
        r for r in caplog.records if r.levelno >= logging.ERROR and r.name.startswith("stepstone")
    ]
    assert not troubles, [r.getMessage() for r in troubles]

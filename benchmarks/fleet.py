"""A simulated fleet: W workers in one process against one S3-like bucket.

What grows with the number of workers, without a fleet to run it on. The
bucket is a MemoryStore behind :class:`benchmarks.s3_like.S3LikeStore`
(20 to 60 ms a request, seeded; S3's per-prefix request limits times
``limit_scale``, or none), counted by operation and area like every other
case. Each worker is a JobRunner of its own (``concurrency`` jobs at a time,
its own StoreQueue and view, as W processes would have); a submitter is a
JobRunner that runs no worker, as an API process.

Two loads (``Spec(case="fleet", workers=W, rate=R)``):

- **backlog** (``rate=0``): the submitter puts N keyed W3 jobs in the queue,
  32 submits at a time; then the W workers start and the clock runs until
  every job succeeded. Capacity: how fast W workers drain a queue.
- **stream** (``rate=R``): the W workers start and settle (their first
  listings, and N/2 jobs streamed as below, so each worker's pace has
  adapted to the crowd it is in); then the submitter submits N jobs at R a
  second, each submit on its own, and the clock runs until every job
  succeeded. Steady load
  below capacity: what each job costs when workers wait for work.

A run stops after ``window`` seconds even if jobs remain (``done`` says how
many finished; per-job figures are per finished job, so the requests of
jobs still in flight are counted against them: an overload shows as such).

Reported: jobs/s; how long jobs waited from their submit to their start
(p50, p99); the workers' requests per job by operation and by area
(in the backlog the submits' are apart, ``submit_requests_per_job``, since
they do not depend on W; in the stream they are included, and are 2 GETs
and 1 conditional PUT a job); SlowDown answers per job, claims lost to
another worker, listings; and this process's CPU seconds per second
(``cpu_share``: one process drives the whole fleet, so a share near 1 means
the host, not the bucket, set the pace).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import asdict
from typing import Any

from stepstone import JobHandle, JobRunner
from stepstone.store import MemoryStore

from .cases import CpuTimer, Spec, per_area, per_job, percentile
from .counting import CountingStore
from .jobs import W3
from .s3_like import S3LikeStore

SEED = 17
SUBMITS_IN_FLIGHT = 32
"""The backlog's submits at once: a few API processes' worth."""
SETTLE = 6.0
"""Seconds the stream's workers run before the first submit: their first
listings, and an idle queue's backoff to its slowest pace (docs/queue.md)."""


def _succeeded(runners: list[JobRunner]) -> int:
    return sum(r.worker.stats.succeeded for r in runners)


async def _until_done(runners: list[JobRunner], n: int, within: float, before: int = 0) -> int:
    """Until the runners have succeeded ``n`` jobs since they had ``before``,
    or ``within`` seconds passed; how many they did. Raises if a job died."""
    deadline = time.monotonic() + within
    done = 0
    while done < n and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
        stats = [r.worker.stats for r in runners]
        if any(s.dead for s in stats):
            raise RuntimeError(f"a job died ({done} of {n} done)")
        done = sum(s.succeeded for s in stats) - before
    return done


async def _backlog(submitter: JobRunner, jobs: list[W3]) -> list[JobHandle[int]]:
    slots = asyncio.Semaphore(SUBMITS_IN_FLIGHT)

    async def submit(job: W3) -> JobHandle[int]:
        async with slots:
            return await submitter.submit(job)

    return await asyncio.gather(*(submit(job) for job in jobs))


async def _stream(submitter: JobRunner, jobs: list[W3], rate: float) -> list[JobHandle[int]]:
    """Submit ``jobs`` at ``rate`` a second, on a schedule (a slow submit
    does not delay the next)."""
    start = time.monotonic()
    tasks = []
    for i, job in enumerate(jobs):
        await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
        tasks.append(asyncio.create_task(submitter.submit(job)))
    return await asyncio.gather(*tasks)


async def fleet(spec: Spec) -> dict[str, Any]:
    sim = S3LikeStore(MemoryStore(), scale=spec.limit_scale or None, seed=SEED)
    store = CountingStore(sim)
    submitter = JobRunner(store, jobs=[W3])
    tag = uuid.uuid4().hex[:8]
    jobs = [W3(n=i, steps=spec.steps, tag=tag, keyed=spec.keyed) for i in range(spec.n)]
    runners = [
        JobRunner(store, jobs=[W3], concurrency=spec.concurrency, retry_backoff=0.0)
        for _ in range(spec.workers)
    ]
    out: dict[str, Any] = {}
    async with contextlib.AsyncExitStack() as stack:
        if spec.rate:
            for runner in runners:
                await stack.enter_async_context(runner)
            await asyncio.sleep(SETTLE)
            warm = [W3(n=-1 - i, steps=spec.steps, tag=tag) for i in range(spec.n // 2)]
            await _stream(submitter, warm, spec.rate)
            await _until_done(runners, len(warm), spec.window)
        else:
            t0 = time.perf_counter()
            handles = await _backlog(submitter, jobs)
            out["submit_jobs_per_s"] = round(spec.n / (time.perf_counter() - t0), 1)
            out["submit_requests_per_job"] = per_job(store.snapshot(), spec.n)
        store.reset()
        sim.slowdowns.clear()
        before = _succeeded(runners)
        with CpuTimer() as cpu:
            t0 = time.perf_counter()
            if spec.rate:
                handles = await _stream(submitter, jobs, spec.rate)
            else:
                for runner in runners:
                    await stack.enter_async_context(runner)
            done = await _until_done(runners, spec.n, spec.window, before)
            seconds = time.perf_counter() - t0
        counts, areas = store.snapshot(), store.areas()
        outcomes = await asyncio.gather(*(h.join() for h in handles)) if done == spec.n else []
    assert all(h.newly_submitted for h in handles)
    waits = [(o.started_at or 0.0) - (o.submitted_at or 0.0) for o in outcomes]
    if waits:
        out["start_wait_p50_s"] = round(percentile(waits, 50), 3)
        out["start_wait_p99_s"] = round(percentile(waits, 99), 3)
    stats = [r.worker.stats for r in runners]
    queues = [getattr(r.queue, "stats", None) for r in runners]
    jobs_per_worker = sorted(s.succeeded for s in stats)
    out.update(
        done=done,
        seconds=round(seconds, 3),
        jobs_per_s=round(done / seconds, 1),
        steps_per_s=round(done * spec.steps / seconds, 1),
        jobs_per_cpu_s=round(done / cpu.seconds, 1),
        cpu_share=round(cpu.seconds / seconds, 2),
        requests_per_job=per_job(counts, done),
        requests_by_area=per_area(areas, done),
        slowdowns_per_job=round(sum(sim.slowdowns.values()) / done, 3),
        slowdowns_by_partition=per_area(dict(sim.slowdowns), done),
        jobs_per_worker_min_max=[jobs_per_worker[0], jobs_per_worker[-1]],
        worker={k: sum(asdict(s)[k] for s in stats) for k in ("claimed", "retried", "lost")},
        queue={
            k: sum(getattr(q, k) for q in queues if q is not None)
            for k in ("scans", "fetches", "lost_races")
        },
    )
    return out

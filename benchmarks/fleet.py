"""A simulated fleet: W workers in one process against one S3-like bucket.

What grows with the number of workers, without a fleet to run it on. The
bucket is a MemoryStore behind :class:`benchmarks.s3_like.S3LikeBucket`
(S3's per-prefix request limits times ``limit_scale``, or none; seeded 409s
and SlowDowns, ``Spec.conflicts`` and ``Spec.slowdowns``; with
``Spec.object_writes``, a limit on each object's writes too, as GCS has,
every client told so: ``object_turns``), counted by
operation and area like every other case. Each worker is a JobRunner of its
own (``concurrency`` jobs at a time, its own StoreQueue and record cache, as W
processes would have) on a client of its own,
:class:`benchmarks.s3_like.S3LikeStore` (20 to 60 ms a request, seeded; its
own retries and its own adaptive send rates, as each process has); a
submitter is a JobRunner that runs no worker, as an API process, on a
client of its own too.

With ``backend="s3like-sqs"`` the queue is SqsQueue instead: moto's SQS in
a child process (benchmarks/moto_server.py), answering every request after
20 to 60 ms (seeded) like the bucket, one SqsQueue per worker on the same
SQS queues (long polls of 5 s, its defaults), the bucket as its id store.
moto is not SQS: it applies no request limits and serves long polls from a
thread each, so what this shows is requests per job, and jobs/s only
while this host's two cores keep up (``cpu_share``; moto's own CPU is not
counted in it). SQS requests are reported apart (``sqs_requests_per_job``,
by operation), beside the bucket's.

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
another worker, listings; the bucket client's allowed send rates at the end
(``send_rate_at_end``, requests a second, of the partitions a SlowDown ever
cut: stepstone.store.s3.throttle, summed over the clients); 409
answers per job (``conflicts_per_job``); and this process's CPU seconds per second
(``cpu_share``: one process drives the whole fleet, so a share near 1 means
the host, not the bucket, set the pace) and the seconds a second it was
ready to run and waited for a core (``cpu_wait_share``: on a shared host a
fleet's process can be held to a fraction of a core, its share then far
from 1; near or over ``cpu_share``, the host set the pace).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict
from typing import Any

from stepstone import JobHandle, JobRunner
from stepstone.runtime import LeaseQueue
from stepstone.runtime.sqs import SqsQueue
from stepstone.runtime.store_queue import StoreQueue
from stepstone.store import MemoryStore, ObjectStore
from stepstone.store.s3.throttle import AdaptiveRates

from .cases import CpuTimer, Spec, per_area, per_job, percentile
from .counting import CountingStore
from .jobs import W3
from .moto_server import MotoServer
from .s3_like import S3LikeBucket, S3LikeStore

SEED = 17
SUBMITS_IN_FLIGHT = 32
"""The backlog's submits at once: a few API processes' worth."""
SETTLE = 6.0
"""Seconds the stream's workers run before the first submit: their first
listings, and an idle queue's backoff to its slowest pace (docs/queue.md)."""


LATENCY = (0.020, 0.060)
"""Seconds a request to the bucket (and to SQS) takes, drawn uniformly."""
CONFLICT_BURST = 3
"""409s in a row on a key once one is answered (``Spec.conflicts``)."""


@contextlib.asynccontextmanager
async def _queues(spec: Spec, stores: list[ObjectStore]) -> AsyncIterator[list[LeaseQueue]]:
    """A queue on each of ``stores``, all one shared queue: StoreQueues, or
    SqsQueues on moto's SQS (backend ``s3like-sqs``, module docstring)."""
    if not spec.backend.endswith("-sqs"):
        yield [StoreQueue(store) for store in stores]
        return
    with MotoServer(latency=LATENCY, seed=SEED + 2) as url:
        name = f"fleet-{uuid.uuid4().hex[:12]}"
        options: dict[str, Any] = {"endpoint_url": url, "region": "us-east-1"}
        first = await SqsQueue.create(name, id_store=stores[0], **options)
        queues = [first] + [SqsQueue(name, id_store=s, **options) for s in stores[1:]]
        try:
            yield list(queues)
        finally:  # each waits out its long polls: at once, not one after another
            await asyncio.gather(*(queue.close() for queue in queues))


def _sqs_requests(queues: list[LeaseQueue]) -> Counter[str]:
    total: Counter[str] = Counter()
    for queue in queues:
        if isinstance(queue, SqsQueue):
            total.update(queue.requests)
    return total


def _per_job_sqs(counts: Counter[str], n: int) -> dict[str, float]:
    return {op: round(c / n, 3) for op, c in sorted(counts.items())}


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


async def fleet(
    spec: Spec,
    *,
    trace: list[tuple[float, str, str]] | None = None,
    states: list[tuple[float, Counter[str]]] | None = None,
    rates: Callable[[int], AdaptiveRates] | None = None,
) -> dict[str, Any]:
    """Run ``spec``; with ``trace``, every request the bucket answers is
    appended to it (:attr:`benchmarks.s3_like.S3LikeBucket.trace`); with
    ``states``, what the queue's records hold each second (:func:`_sample`);
    with ``rates``, each client's send rates by its number (0: the
    submitter's), instead of one set of its own each
    (benchmarks/fleet_oracles.py)."""
    memory = MemoryStore()
    store = CountingStore(memory)
    sim = S3LikeBucket(
        store,
        scale=spec.limit_scale or None,
        conflicts=spec.conflicts,
        conflict_burst=CONFLICT_BURST,
        slowdowns=spec.slowdowns,
        object_writes=spec.object_writes,
        seed=SEED,
    )
    sim.trace = trace
    # The submitter's client, then one a worker: each a process of its own,
    # told that the bucket limits every object where it does.
    told = spec.object_writes is not None
    rates = rates or (lambda n: AdaptiveRates(object_turns=told))
    clients = [
        S3LikeStore(sim, latency=LATENCY, seed=SEED + 10 * n, adaptive=rates(n))
        for n in range(1 + spec.workers)
    ]
    sampling = None if states is None else asyncio.create_task(_sample(memory, states))
    try:
        async with _queues(spec, list(clients)) as queues:
            return await _run(spec, sim, clients, store, queues)
    finally:
        if sampling is not None:
            sampling.cancel()


STATES = ("free", "held", "lapsed", "unreadable")


async def _sample(memory: MemoryStore, states: list[tuple[float, Counter[str]]]) -> None:
    """Each second, how many of the queue's records are free (no claim on
    them), held (a claim whose lease has not run out), lapsed (a claim whose
    lease has), read straight from the bucket's memory, past its limits and
    its counts: where the jobs not done yet are (held by workers, or waiting
    to be found), which the requests alone do not say."""
    from stepstone.runtime.store_queue.records import decode

    while True:
        await asyncio.sleep(1.0)
        now, counts = time.time(), Counter[str]()
        async for info in memory.scan("queue/jobs/"):
            try:
                job = decode((await memory.get(info.key)).data, key=info.key)
            except Exception:  # (deleted since listed, or not a record)
                counts["unreadable"] += 1
                continue
            if job.token is None:
                counts["free"] += 1
            else:
                counts["held" if (job.lease_expires_at or 0.0) > now else "lapsed"] += 1
        states.append((time.monotonic(), counts))  # (the bucket's trace clock)


async def _run(
    spec: Spec,
    sim: S3LikeBucket,
    clients: list[S3LikeStore],
    store: CountingStore,
    queues: list[LeaseQueue],
) -> dict[str, Any]:
    for queue in queues:
        if isinstance(queue, SqsQueue):
            queue.requests.clear()  # creating the SQS queues is no job's
    submitter = JobRunner(clients[0], jobs=[W3], queue=queues[0])
    tag = uuid.uuid4().hex[:8]
    jobs = [W3(n=i, steps=spec.steps, tag=tag, keyed=spec.keyed) for i in range(spec.n)]
    runners = [
        JobRunner(client, jobs=[W3], queue=q, concurrency=spec.concurrency, retry_backoff=0.0)
        for client, q in zip(clients[1:], queues[1:], strict=True)
    ]
    out: dict[str, Any] = {}
    started: list[JobRunner] = []

    async def start_all() -> None:
        for runner in runners:
            await runner.start()
            started.append(runner)

    try:
        if spec.rate:
            await start_all()
            await asyncio.sleep(SETTLE)
            warm = [W3(n=-1 - i, steps=spec.steps, tag=tag) for i in range(spec.n // 2)]
            await _stream(submitter, warm, spec.rate)
            await _until_done(runners, len(warm), spec.window)
        else:
            t0 = time.perf_counter()
            handles = await _backlog(submitter, jobs)
            out["submit_jobs_per_s"] = round(spec.n / (time.perf_counter() - t0), 1)
            out["submit_requests_per_job"] = per_job(store.snapshot(), spec.n)
            out["submit_sqs_requests_per_job"] = _per_job_sqs(_sqs_requests(queues), spec.n)
        store.reset()
        sim.slowdowns.clear()
        sim.conflicted.clear()
        for queue in queues:
            if isinstance(queue, SqsQueue):
                queue.requests.clear()
        before = _succeeded(runners)
        with CpuTimer() as cpu:
            t0 = time.perf_counter()
            if spec.rate:
                handles = await _stream(submitter, jobs, spec.rate)
            else:
                await start_all()
            done = await _until_done(runners, spec.n, spec.window, before)
            seconds = time.perf_counter() - t0
        counts, areas, sqs = store.snapshot(), store.areas(), _sqs_requests(queues)
        slowdowns = dict(sim.slowdowns)  # (not the joins' below: all outcomes read at once)
        conflicts = sum(sim.conflicted.values())
        outcomes = await asyncio.gather(*(h.join() for h in handles)) if done == spec.n else []
    finally:  # at once: a stopping SqsQueue worker waits out its long poll
        await asyncio.gather(*(runner.stop() for runner in started))
    assert all(h.newly_submitted for h in handles)
    waits = [(o.started_at or 0.0) - (o.submitted_at or 0.0) for o in outcomes]
    if waits:
        out["start_wait_p50_s"] = round(percentile(waits, 50), 3)
        out["start_wait_p99_s"] = round(percentile(waits, 99), 3)
    stats = [r.worker.stats for r in runners]
    store_queues = [q for q in queues[1:] if isinstance(q, StoreQueue)]
    jobs_per_worker = sorted(s.succeeded for s in stats)
    out.update(
        done=done,
        seconds=round(seconds, 3),
        jobs_per_s=round(done / seconds, 1),
        steps_per_s=round(done * spec.steps / seconds, 1),
        jobs_per_cpu_s=round(done / cpu.seconds, 1),
        cpu_share=round(cpu.seconds / seconds, 2),
        cpu_wait_share=round(cpu.waited / seconds, 2),
        requests_per_job=per_job(counts, done),
        requests_by_area=per_area(areas, done),
        slowdowns_per_job=round(sum(slowdowns.values()) / done, 3),
        slowdowns_by_partition=per_area(slowdowns, done),
        conflicts_per_job=round(conflicts / done, 3),
        jobs_per_worker_min_max=[jobs_per_worker[0], jobs_per_worker[-1]],
        worker={k: sum(asdict(s)[k] for s in stats) for k in ("claimed", "retried", "lost")},
        queue={
            k: sum(getattr(q.stats, k) for q in store_queues)
            for k in ("scans", "fetches", "lost_races")
        },
    )
    if sqs:
        out["sqs_requests_per_job"] = _per_job_sqs(sqs, done)
    sent: Counter[str] = Counter()
    for client in clients[1:]:
        if client.send_rates is not None:
            for part, rate in client.send_rates.by_partition.items():
                if rate.rate is not None:
                    sent[part] += rate.rate
    out["send_rate_at_end"] = {part: round(total, 1) for part, total in sorted(sent.items())}
    return out

"""The benchmark cases. Each runs in its own process (see run.py) so peak RSS
is the case's own; each returns one flat dict of figures.

Cases
-----
w3        N jobs of ``steps`` memoized async steps, all submitted at once
          (``asyncio.gather`` of the submits), ``concurrency`` handlers,
          one process that submits and runs. Then, if ``resubmit``, R: the N
          finished keys submitted again; each answers from its outcome record.
w3seq     W3 as the peers' benchmarks run it: each submit awaited before the
          next, then every result (``peer``: the same on huey or DBOS,
          benchmarks/peers.py).
many      N jobs in one ``runner.submit_many`` with no worker running, then run.
submitters
          W3 from ``submitters`` tasks at once, each awaiting its submits one
          after another (an API server's handlers under load): the requests
          per job by operation, and the submits' latency, as submitters grow;
          with ``api`` the submitting runner runs no worker, another does.
latency   one job at a time: submit, await the result, repeat.
scale     one local store (a directory, or a SQLite file: ``sqlite`` and
          ``sqlite-normal``), ``processes`` worker processes (``async with
          JobRunner(...)`` in each); the parent submits all N first, then
          lets the workers go and times until every job is acked. With
          ``urgent``, once a tenth of the N are done the parent submits that
          many more at priority 0, and reports how long they waited to start.
stream    how soon a reader in another process sees a run's stream items, and
          what writing and reading them costs (benchmarks/streams.py).
suspended what waiting costs: the requests of a worker over ``window``
          seconds with an empty queue, then with N runs asleep for 30 days
          (a FakeClock is the jobs' time; listings keep real time), then in
          a process started on those N; and what one run costs from its
          submit to its sleep, from its wake time to its end, what a run
          waiting for an event costs when it looks again (hourly), and what
          one ``send_event`` costs.

``fail_first`` makes each W3 job fail that many attempts before it succeeds,
and ``history`` turns the attempt history off: the ``retry1-`` cases say what
a retried job costs, and what of it is the history's.

``metrics`` turns stepstone's OpenTelemetry metrics on (the ``otel`` extra):
the ``-metrics`` cases against their twins measure what recording costs.

Backends: ``memory`` (MemoryStore + MemoryQueue), ``memory-sq`` (MemoryStore +
StoreQueue: the StoreQueue's request pattern without I/O), ``sqlite``
(SqliteStore + StoreQueue, ``synchronous`` FULL: every commit synced before
it returns), ``sqlite-normal`` (NORMAL: synced at checkpoints), ``file``
(FileStore + StoreQueue, durable: every write synced before it returns),
``s3`` (moto's S3 server in a child process + StoreQueue).

Every store is wrapped in a CountingStore, so the figures include its (tiny)
cost; requests are reported per job by operation.
"""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import gc
import math
import multiprocessing
import os
import resource
import shutil
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass
from typing import Any

from stepstone import JobHandle, JobRunner, JobStatus, SubmitOptions
from stepstone.execute.durable_waits import RECHECK_WAKING
from stepstone.runtime import Clock, FakeClock, MemoryQueue
from stepstone.store import FileStore, MemoryStore, ObjectStore, SqliteStore

from .counting import OPERATIONS, CountingStore
from .jobs import W3, W3_JOBS, AwaitsPing, Naps, w3_job
from .peers import PEERS
from .streams import stream_latency


@dataclass
class Spec:
    case: str = "w3"
    backend: str = "memory"
    n: int = 1000
    steps: int = 3
    concurrency: int = 64
    keyed: bool = True
    resubmit: bool = True
    processes: int = 1
    urgent: int = 0
    pause: float = 0.0
    """Seconds each job waits after its steps (W3.pause)."""
    metrics: bool = False
    """Record metrics (an OpenTelemetry MeterProvider with an in-memory reader)."""
    limit: str = ""
    """w3 only: "own-key", "shared-key", "line" or "rate" (benchmarks.jobs.w3_job)."""
    label: str = ""
    workdir: str = ""
    window: float = 60.0
    """Real seconds each phase of the suspended case watches the store."""
    workers: int = 1
    """Workers of the simulated fleet (benchmarks/fleet.py), in this one process."""
    limit_scale: float = 0.1
    """The fleet's S3 request limits per prefix, as a fraction of S3's (0: none)."""
    rate: float = 0.0
    """The fleet's submits a second (0: a backlog submitted before the workers start)."""
    conflicts: float = 0.0
    """The share of the fleet's conditional writes its bucket answers 409
    ConditionalRequestConflict (seeded, in bursts: benchmarks/s3_like.py)."""
    slowdowns: float = 0.0
    """The share of the fleet's requests its bucket answers SlowDown whatever
    the rate (seeded: benchmarks/s3_like.py)."""
    object_writes: float | None = None
    """Writes a second the fleet's bucket takes to each object (GCS: about
    one), or no such limit; each client is then told so (``object_turns``)."""
    fail_first: int = 0
    """Attempts of each W3 job that fail before one succeeds (W3.fail_first)."""
    history: bool = True
    """Write the attempt history (JobRunner(history=...))."""
    submitters: int = 1
    """submitters only: tasks submitting at once, each one submit after another."""
    api: bool = False
    """submitters only: the submitting runner runs no worker (an API process);
    another runner on the same store does."""

    def name(self) -> str:
        if self.label:
            return self.label
        extra = f" x{self.processes}proc" if self.case == "scale" else ""
        return f"{self.case} {self.backend} n={self.n} steps={self.steps}{extra}"


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def per_area(counts: dict[str, int], n: int) -> dict[str, float]:
    return {area: round(count / n, 3) for area, count in counts.items()}


def per_job(counts: dict[str, int], n: int) -> dict[str, float]:
    return {op: round(counts[op] / n, 3) for op in OPERATIONS}


def _record_metrics() -> None:
    """Turn stepstone's metrics on for this (the case's own) process: what a
    worker with ``--metrics-port`` pays, less the scrapes."""
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from stepstone.telemetry.metrics import meter_provider, use_meter_provider

    use_meter_provider(meter_provider(InMemoryMetricReader()))


def _file_options() -> dict[str, Any]:
    """FileStore keyword arguments from the environment, for experiments
    (``STEPSTONE_BENCH_FILE_THREADS=32``, ``STEPSTONE_BENCH_FILE_SYNC=fsync``,
    ``STEPSTONE_BENCH_FILE_COMMIT=thread``); empty means the defaults."""
    options: dict[str, Any] = {}
    if commit_in := os.environ.get("STEPSTONE_BENCH_FILE_COMMIT"):
        options["commit_in"] = commit_in
    if threads := os.environ.get("STEPSTONE_BENCH_FILE_THREADS"):
        options["max_workers"] = int(threads)
    if sync := os.environ.get("STEPSTONE_BENCH_FILE_SYNC"):
        options["sync"] = sync
    return options


def local_store(backend: str, where: str) -> ObjectStore:
    """The local store of a backend at ``where``, a directory: a FileStore
    (``file``), or a SqliteStore in a file there (``sqlite``: synchronous
    FULL; ``sqlite-normal``: NORMAL)."""
    if backend == "file":
        return FileStore(where, **_file_options())
    synchronous = "normal" if backend == "sqlite-normal" else "full"
    return SqliteStore(os.path.join(where, "jobs.db"), synchronous=synchronous)


TRASH = "stepstone-bench-trash"


def discard(path: str) -> None:
    """Set a case's store directory aside, to be deleted after the last case.

    Deleting a store is deleting thousands of files, and on ext4 without a
    journal (this project's VMs) every file created in the next minute
    first scans past the inodes just freed: deleting here would slow the
    next case down by a factor of two or more. ``empty_trash`` runs when the
    whole run is over.
    """
    trash = os.path.join(os.path.dirname(path), TRASH)
    os.makedirs(trash, exist_ok=True)
    os.rename(path, os.path.join(trash, os.path.basename(path)))


def empty_trash(workdir: str = "") -> None:
    shutil.rmtree(os.path.join(workdir or tempfile.gettempdir(), TRASH), ignore_errors=True)


@contextlib.asynccontextmanager
async def open_backend(
    spec: Spec, *, jobs: tuple[type[Any], ...] = W3_JOBS, clock: Clock | None = None
) -> AsyncIterator[tuple[CountingStore, JobRunner]]:
    """The counted store and a (not started) runner on it, per the spec's backend."""
    tmp: str | None = None
    moto = None
    inner: ObjectStore
    queue = None
    if spec.backend == "memory":
        inner = MemoryStore()
        queue = MemoryQueue(clock=clock)
    elif spec.backend == "memory-sq":
        inner = MemoryStore()
    elif spec.backend in ("file", "sqlite", "sqlite-normal"):
        tmp = tempfile.mkdtemp(prefix="stepstone-bench-", dir=spec.workdir or None)
        inner = local_store(spec.backend, tmp)
    elif spec.backend == "s3":
        from stepstone.store import S3Store

        from .moto_server import MotoServer

        moto = MotoServer()
        url = moto.__enter__()
        bucket = f"bench-{uuid.uuid4().hex[:12]}"
        moto.create_bucket(bucket)
        inner = S3Store(bucket, "b", endpoint_url=url, region="us-east-1")
    else:
        raise ValueError(f"unknown backend {spec.backend!r}")
    store = CountingStore(inner)
    if spec.metrics:
        _record_metrics()
    runner = JobRunner(
        store,
        queue=queue,
        jobs=jobs,
        concurrency=spec.concurrency,
        retry_backoff=0.0,
        clock=clock,
        history=spec.history,
    )
    try:
        yield store, runner
    finally:
        await runner.close()
        await store.close()
        if tmp is not None:
            discard(tmp)
        if moto is not None:
            moto.__exit__(None, None, None)


async def _submit_and_wait(
    runner: JobRunner, jobs: list[W3]
) -> tuple[float, list[float], list[Any]]:
    """Submit all jobs at once and await every result; (seconds, latencies, results)."""
    latencies: list[float] = [0.0] * len(jobs)
    results: list[Any] = [None] * len(jobs)

    async def one(i: int, job: W3) -> None:
        start = time.perf_counter()
        handle = await runner.submit(job)
        results[i] = await handle
        latencies[i] = time.perf_counter() - start

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i, job) for i, job in enumerate(jobs)))
    return time.perf_counter() - t0, latencies, results


class FlushCounter:
    """Counts flushes in this process: ``os.fsync`` (files and directories),
    ``os.fdatasync`` (the FileStore's create journal) and the FileStore's
    ``syncfs``, and the ``syncfs`` calls its commit process reports (not its
    fsyncs: compare ``sync="fsync"`` runs with ``STEPSTONE_BENCH_FILE_COMMIT=thread``).
    A SqliteStore's syncs are SQLite's own, one a commit with ``synchronous``
    FULL: ``flushed`` adds its ``commits``. The cost that bounds a durable
    store, and a figure that does not depend on how busy the machine is."""

    def __init__(self) -> None:
        self.calls = 0

    def install(self) -> FlushCounter:
        import stepstone.store.file.commit as commit_module
        import stepstone.store.file.store as store_module
        from stepstone.store.file.commit_process import CommitProcess

        in_helper = CommitProcess.commit

        def commit(helper: CommitProcess, writes: Any) -> int:
            syncs = in_helper(helper, writes)
            self.calls += syncs
            return syncs

        CommitProcess.commit = commit  # type: ignore[method-assign]

        def counted(real: Any) -> Any:
            def flush(fd: int) -> None:
                self.calls += 1  # a race between threads can lose a count: close enough
                real(fd)

            return flush

        os.fsync = counted(os.fsync)
        os.fdatasync = counted(os.fdatasync)
        for module in (commit_module, store_module):
            module.syncfs = counted(module.syncfs)  # type: ignore[attr-defined]
        return self


def flushed(store: CountingStore) -> int:
    """The flushes of this process so far, with a SqliteStore's commits."""
    return FLUSHES.calls + int(getattr(store.inner, "commits", 0))


FLUSHES = FlushCounter().install()


class CpuTimer:
    """The CPU seconds of this process (all threads) and of its children (a
    FileStore's commit process) over a block: on a shared, busy machine,
    jobs per CPU-second moves far less than jobs per second."""

    def __enter__(self) -> CpuTimer:
        self.start = time.process_time() + _children_cpu()
        self.seconds = 0.0
        self.waited = 0.0
        """Seconds this process was ready to run and waited for a core
        (Linux's schedstat; 0 elsewhere): the host, not the case, set the pace."""
        self._waited_before = _run_queue_wait()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.process_time() + _children_cpu() - self.start
        self.waited = _run_queue_wait() - self._waited_before


def _run_queue_wait() -> float:
    """Seconds this process's main thread has waited, ready, for a core (0 if unknown)."""
    try:
        with open("/proc/self/schedstat", encoding="ascii") as stat:
            return int(stat.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def committing_in(store: CountingStore) -> dict[str, str]:
    """Where a FileStore commits its writes at the end of a run (``thread``
    or ``process``, see ``FileStore.commit_in``); nothing for other stores."""
    where = getattr(store.inner, "committing_in", None)
    return {} if where is None else {"committing_in": where}


def _children_cpu() -> float:
    """CPU seconds used so far by this process's children: those waited for
    (``os.times``) and those still running (``/proc``, Linux)."""
    waited = os.times()
    me, total = os.getpid(), 0
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # (exited meanwhile)
        if int(fields[1]) == me:  # ppid; then utime and stime, in clock ticks
            total += int(fields[11]) + int(fields[12])
    running = total / os.sysconf("SC_CLK_TCK") if total else 0.0
    return waited.children_user + waited.children_system + running


async def _warm_up_in_process(
    spec: Spec, store: CountingStore, runner: JobRunner, tag: str
) -> None:
    """Run a batch first (first-use costs: pydantic schemas, codecs, a
    StoreQueue's first listing, the FileStore's journal), then count from zero:
    the steady state is what is measured."""
    warm = [w3_job(spec.limit, n=-1 - i, steps=spec.steps, tag=tag) for i in range(min(64, spec.n))]
    await _submit_and_wait(runner, warm)
    gc.collect()
    store.reset()


async def w3(spec: Spec) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with open_backend(spec) as (store, runner):
        tag = uuid.uuid4().hex[:8]
        jobs = [
            w3_job(
                spec.limit,
                n=i,
                steps=spec.steps,
                tag=tag,
                keyed=spec.keyed,
                fail_first=spec.fail_first,
            )
            for i in range(spec.n)
        ]
        async with runner:
            await _warm_up_in_process(spec, store, runner, tag)
            flushes = flushed(store)
            with CpuTimer() as cpu:
                seconds, latencies, results = await _submit_and_wait(runner, jobs)
            flushes = flushed(store) - flushes
            assert results == [i + spec.steps for i in range(spec.n)], "wrong results"
            counts = store.snapshot()
            out.update(
                seconds=round(seconds, 4),
                jobs_per_s=round(spec.n / seconds, 1),
                steps_per_s=round(spec.n * spec.steps / seconds, 1),
                jobs_per_cpu_s=round(spec.n / cpu.seconds, 1),
                flushes_per_job=round(flushes / spec.n, 2),
                p50_ms=round(percentile(latencies, 50) * 1e3, 3),
                p99_ms=round(percentile(latencies, 99) * 1e3, 3),
                requests_per_job=per_job(counts, spec.n),
                requests_by_area=per_area(store.areas(), spec.n),
                **committing_in(store),
            )
            if spec.resubmit and spec.keyed:
                store.reset()
                t0 = time.perf_counter()
                with CpuTimer() as r_cpu:
                    handles = await asyncio.gather(*(runner.submit(job) for job in jobs))
                    again = await asyncio.gather(*handles)
                r_seconds = time.perf_counter() - t0
                assert again == results, "resubmission answered differently"
                assert not any(h.newly_submitted for h in handles), "a resubmit ran again"
                out.update(
                    r_jobs_per_s=round(spec.n / r_seconds, 1),
                    r_jobs_per_cpu_s=round(spec.n / r_cpu.seconds, 1),
                    r_requests_per_job=per_job(store.snapshot(), spec.n),
                    r_requests_by_area=per_area(store.areas(), spec.n),
                )
        out["worker"] = asdict(runner.worker.stats)
        stats = getattr(runner.queue, "stats", None)
        if stats is not None:
            out["queue"] = {k: v for k, v in asdict(stats).items() if k != "corrupt_keys"}
    return out


async def w3_one_at_a_time(spec: Spec) -> dict[str, Any]:
    """W3 as the peers' benchmarks run it: each submit awaited before the
    next, then every result; on stepstone or on a peer (benchmarks/peers.py)."""
    async with open_backend(spec) as (store, runner):
        tag = uuid.uuid4().hex[:8]
        jobs = [W3(n=i, steps=spec.steps, tag=tag, keyed=spec.keyed) for i in range(spec.n)]
        async with runner:
            await _warm_up_in_process(spec, store, runner, tag)
            flushes = flushed(store)
            latencies = []
            usage = resource.getrusage(resource.RUSAGE_SELF)
            with CpuTimer() as cpu:
                t0 = time.perf_counter()
                handles = []
                for job in jobs:
                    start = time.perf_counter()
                    handles.append(await runner.submit(job))
                    latencies.append(time.perf_counter() - start)
                submit_seconds = time.perf_counter() - t0
                results = await asyncio.gather(*handles)
                seconds = time.perf_counter() - t0
            assert results == [i + spec.steps for i in range(spec.n)], "wrong results"
            return {
                **_one_at_a_time_figures(spec, seconds, submit_seconds, latencies),
                "jobs_per_cpu_s": round(spec.n / cpu.seconds, 1),
                "waits_per_job": round(_waits(usage) / spec.n, 1),
                "flushes_per_job": round((flushed(store) - flushes) / spec.n, 2),
                "requests_per_job": per_job(store.snapshot(), spec.n),
                "requests_by_area": per_area(store.areas(), spec.n),
                **committing_in(store),
            }


async def submit_many(spec: Spec) -> dict[str, Any]:
    """N W3 jobs submitted with one ``runner.submit_many`` while no worker runs
    (what an import or a fan-out does), then run. Reported besides W3's
    figures: the submit's seconds, flushes and requests per job."""
    async with open_backend(spec) as (store, runner):
        tag = uuid.uuid4().hex[:8]
        jobs = [W3(n=i, steps=spec.steps, tag=tag, keyed=spec.keyed) for i in range(spec.n)]
        # Warm up (first-use costs: the codecs, the store's journal file or
        # connection); these run with the rest.
        warm = [W3(n=-1 - i, steps=spec.steps, tag=tag) for i in range(min(64, spec.n))]
        warm_handles = await runner.submit_many(warm)
        if isinstance(store.inner, FileStore):
            # The journal's checkpoint flushes the warm-up's creates a moment
            # later: flush them now and let that checkpoint end, so that its
            # flush is not counted as the batch's.
            journal = store.inner._journal
            await asyncio.to_thread(journal.flush_linked)
            await _until(lambda: not journal._checkpointing, within=10)
        gc.collect()
        store.reset()
        flushes = flushed(store)
        with CpuTimer() as cpu:
            t0 = time.perf_counter()
            handles = await runner.submit_many(jobs)
            submit_seconds = time.perf_counter() - t0
        submit_flushes = flushed(store) - flushes
        submit_requests = per_job(store.snapshot(), spec.n)
        async with runner:
            results = await asyncio.gather(*handles)
            await asyncio.gather(*warm_handles)
        seconds = time.perf_counter() - t0
        assert results == [i + spec.steps for i in range(spec.n)], "wrong results"
        return {
            "seconds": round(seconds, 4),
            "jobs_per_s": round(spec.n / seconds, 1),
            "steps_per_s": round(spec.n * spec.steps / seconds, 1),
            "submit_seconds": round(submit_seconds, 4),
            "submit_jobs_per_s": round(spec.n / submit_seconds, 1),
            "submit_jobs_per_cpu_s": round(spec.n / cpu.seconds, 1),
            "submit_flushes": submit_flushes,
            "submit_requests_per_job": submit_requests,
            "requests_per_job": per_job(store.snapshot(), spec.n),
        }


def peer_one_at_a_time(spec: Spec) -> dict[str, Any]:
    """W3 one submit at a time on a peer (``spec.backend``: huey or dbos).
    Not a coroutine: DBOS refuses to start inside a running event loop."""
    figures = PEERS[spec.backend](spec.n, spec.steps, spec.concurrency, spec.workdir)
    discard(figures.pop("root"))
    cpu = figures.pop("cpu_seconds")
    return {**_one_at_a_time_figures(spec, **figures), "jobs_per_cpu_s": round(spec.n / cpu, 1)}


def _one_at_a_time_figures(
    spec: Spec, seconds: float, submit_seconds: float, latencies: list[float]
) -> dict[str, Any]:
    return {
        "seconds": round(seconds, 4),
        "jobs_per_s": round(spec.n / seconds, 1),
        "steps_per_s": round(spec.n * spec.steps / seconds, 1),
        "submit_seconds": round(submit_seconds, 4),
        "submit_p50_ms": round(percentile(latencies, 50) * 1e3, 3),
        "submit_p99_ms": round(percentile(latencies, 99) * 1e3, 3),
    }


async def submitters(spec: Spec) -> dict[str, Any]:
    """The ``submitters`` case (module docstring). Requests are counted until
    the worker has settled every job (an API process's handles polling for
    results are not counted), then the results are checked."""
    async with open_backend(spec) as (store, runner):
        working = runner
        if spec.api:
            working = JobRunner(
                store,
                queue=_fresh_queue(runner),
                jobs=W3_JOBS,
                concurrency=spec.concurrency,
                retry_backoff=0.0,
                history=spec.history,
            )
        tag = uuid.uuid4().hex[:8]
        jobs = [W3(n=i, steps=spec.steps, tag=tag, keyed=spec.keyed) for i in range(spec.n)]
        latencies: list[float] = []
        handles: list[Any] = [None] * spec.n

        async def submit_in_turn(first: int) -> None:
            for i in range(first, spec.n, spec.submitters):
                start = time.perf_counter()
                handles[i] = await runner.submit(jobs[i])
                latencies.append(time.perf_counter() - start)

        async with working:
            warm = [W3(n=-1 - i, steps=spec.steps, tag=tag) for i in range(spec.submitters)]
            await asyncio.gather(*[await runner.submit(job) for job in warm])
            settled = working.worker.stats.succeeded
            gc.collect()
            store.reset()
            t0 = time.perf_counter()
            await asyncio.gather(*(submit_in_turn(k) for k in range(spec.submitters)))
            submit_seconds = time.perf_counter() - t0
            await _until(lambda: working.worker.stats.succeeded >= settled + spec.n)
            seconds = time.perf_counter() - t0
            counts, areas = store.snapshot(), store.areas()
            results = await asyncio.gather(*handles)
        if working is not runner:
            await working.close()
        assert results == [i + spec.steps for i in range(spec.n)], "wrong results"
        return {
            **_one_at_a_time_figures(spec, seconds, submit_seconds, latencies),
            "requests_per_job": per_job(counts, spec.n),
            "requests_by_area": per_area(areas, spec.n),
        }


async def latency(spec: Spec) -> dict[str, Any]:
    """Submit, then await, one job at a time. With ``api`` the submitting
    runner runs no worker and a second runner on the same store does (at its
    default poll interval): the handle's polls are in the counts."""
    async with open_backend(spec) as (store, runner):
        tag = uuid.uuid4().hex[:8]
        working = runner
        if spec.api:
            working = JobRunner(store, queue=_fresh_queue(runner), jobs=W3_JOBS)
        async with working:
            # Warm up: imports, codecs, the first listing of a StoreQueue.
            for i in range(5 if spec.api else 20):
                await (await runner.submit(W3(n=-1 - i, steps=spec.steps, tag=tag)))
            gc.collect()
            store.reset()
            latencies = []
            t0 = time.perf_counter()
            for i in range(spec.n):
                start = time.perf_counter()
                handle = await runner.submit(W3(n=i, steps=spec.steps, tag=tag, keyed=spec.keyed))
                await handle
                latencies.append(time.perf_counter() - start)
            seconds = time.perf_counter() - t0
        if working is not runner:
            await working.close()
        return {
            "seconds": round(seconds, 4),
            "jobs_per_s": round(spec.n / seconds, 1),
            "p50_ms": round(percentile(latencies, 50) * 1e3, 3),
            "p99_ms": round(percentile(latencies, 99) * 1e3, 3),
            "requests_per_job": per_job(store.snapshot(), spec.n),
            "requests_by_area": per_area(store.areas(), spec.n),
        }


# -- several worker processes on one local store --------------------------------


@dataclass
class _Signals:
    """What the parent and its worker processes share."""

    ready: Any  # Array: 1 once a worker has warmed up
    go: Any  # Event: start working
    stop: Any  # Event: stop and report
    done: Any  # Array: jobs each worker has finished
    results: Any  # Queue: each worker's report


def _worker_process(
    backend: str, root: str, concurrency: int, signals: _Signals, slot: int
) -> None:
    profile_dir = os.environ.get("STEPSTONE_BENCH_PROFILE_DIR")
    if not profile_dir:
        asyncio.run(_worker_main(backend, root, concurrency, signals, slot))
        return
    # Where a worker's time goes, for `python -m pstats DIR/worker-<slot>.prof`.
    profiler = cProfile.Profile()
    profiler.runcall(asyncio.run, _worker_main(backend, root, concurrency, signals, slot))
    profiler.dump_stats(os.path.join(profile_dir, f"worker-{slot}.prof"))


async def _warm_up(backend: str, root: str, concurrency: int) -> None:
    """Run a batch of W3 on a store of the worker's own, so that imports and
    first-call costs are paid before the clock starts, as in a long-running
    worker, and not counted against however many processes share them."""
    os.makedirs(root, exist_ok=True)
    store = local_store(backend, root)
    async with JobRunner(store, jobs=[W3], concurrency=concurrency) as runner:
        jobs = [W3(n=i, tag="warm-up") for i in range(concurrency)]
        await asyncio.gather(*await asyncio.gather(*(runner.submit(job) for job in jobs)))
    await store.close()


def _waits(since: resource.struct_rusage) -> int:
    """The times a thread of this process gave up its core to wait (voluntary
    context switches) since ``since``: what handing work between threads
    costs, counted apart from how busy the machine is."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - since.ru_nvcsw


def _switches(usage: resource.struct_rusage) -> int:
    """Voluntary and involuntary context switches: what threads taking turns cost."""
    return usage.ru_nvcsw + usage.ru_nivcsw


def _discard_warm_ups(root: str, processes: int) -> None:
    for slot in range(processes):
        if os.path.exists(f"{root}-warm-up-{slot}"):
            discard(f"{root}-warm-up-{slot}")


async def _worker_main(
    backend: str, root: str, concurrency: int, signals: _Signals, slot: int
) -> None:
    await _warm_up(backend, f"{root}-warm-up-{slot}", concurrency)
    signals.ready[slot] = 1
    store = CountingStore(local_store(backend, root))
    runner = JobRunner(store, jobs=[W3], concurrency=concurrency, retry_backoff=0.0)
    go, stop, done = signals.go, signals.stop, signals.done
    while not go.is_set():  # noqa: ASYNC110 - a multiprocessing Event, not an asyncio one
        await asyncio.sleep(0.001)
    cpu_start, flushes_start = time.process_time() + _children_cpu(), flushed(store)
    usage_start = resource.getrusage(resource.RUSAGE_SELF)
    async with runner:
        while not stop.is_set():
            done[slot] = runner.worker.stats.succeeded
            await asyncio.sleep(0.005)
    done[slot] = runner.worker.stats.succeeded
    stats = getattr(runner.queue, "stats", None)
    signals.results.put(
        {
            "slot": slot,
            "counts": store.snapshot(),
            "areas": store.areas(),
            "worker": asdict(runner.worker.stats),
            "queue": {}
            if stats is None
            else {k: v for k, v in asdict(stats).items() if k != "corrupt_keys"},
            "peak_rss_mb": round(peak_rss_mb(), 1),
            **committing_in(store),
            "cpu_seconds": time.process_time() + _children_cpu() - cpu_start,
            "flushes": flushed(store) - flushes_start,
            "context_switches": _switches(resource.getrusage(resource.RUSAGE_SELF))
            - _switches(usage_start),
            "system_seconds": resource.getrusage(resource.RUSAGE_SELF).ru_stime
            - usage_start.ru_stime,
        }
    )
    await store.close()


async def scale(spec: Spec) -> dict[str, Any]:
    root = tempfile.mkdtemp(prefix="stepstone-bench-", dir=spec.workdir or None)
    ctx = multiprocessing.get_context("spawn")
    signals = _Signals(
        ready=ctx.Array("b", spec.processes),
        go=ctx.Event(),
        stop=ctx.Event(),
        done=ctx.Array("q", spec.processes),
        results=ctx.Queue(),
    )
    go, stop, done, results = signals.go, signals.stop, signals.done, signals.results
    procs = [
        ctx.Process(
            target=_worker_process,
            args=(spec.backend, root, spec.concurrency, signals, i),
            daemon=True,
        )
        for i in range(spec.processes)
    ]
    try:
        for p in procs:
            p.start()
        store = CountingStore(local_store(spec.backend, root))
        submitter = JobRunner(store, jobs=[W3])
        tag = uuid.uuid4().hex[:8]
        jobs = [
            W3(n=i, steps=spec.steps, tag=tag, keyed=spec.keyed, pause=spec.pause)
            for i in range(spec.n + spec.urgent)
        ]
        t0 = time.perf_counter()
        handles = await asyncio.gather(*(submitter.submit(job) for job in jobs[: spec.n]))
        submit_seconds = time.perf_counter() - t0
        submit_counts = store.snapshot()
        while not all(signals.ready[:]):
            if not all(p.is_alive() for p in procs):
                raise RuntimeError("a worker process died")
            await asyncio.sleep(0.01)
        t0 = time.perf_counter()
        go.set()
        urgent = SubmitOptions(priority=0)
        while sum(done[:]) < spec.n + spec.urgent:
            if not all(p.is_alive() for p in procs):
                raise RuntimeError("a worker process died")
            if len(handles) < len(jobs) and sum(done[:]) >= spec.n // 10:
                handles += await asyncio.gather(
                    *(submitter.submit(job, urgent) for job in jobs[spec.n :])
                )
            await asyncio.sleep(0.005)
        seconds = time.perf_counter() - t0
        stop.set()
        reports = [results.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(30)
        outcomes = await asyncio.gather(*(h.join() for h in handles))
        assert [o.unwrap() for o in outcomes] == [j.n + spec.steps for j in jobs], "wrong results"
        waits = [(o.started_at or 0.0) - (o.submitted_at or 0.0) for o in outcomes]
        await store.close()
    finally:
        stop.set()
        go.set()
        for p in procs:
            if p.is_alive():
                p.join(10)
            if p.is_alive():
                p.kill()
        discard(root)
        _discard_warm_ups(root, spec.processes)
    counts = {op: sum(r["counts"][op] for r in reports) for op in OPERATIONS}
    for op in OPERATIONS:
        counts[op] += submit_counts[op]
    n = len(jobs)
    return {
        "seconds": round(seconds, 4),
        "jobs_per_s": round(n / seconds, 1),
        "steps_per_s": round(n * spec.steps / seconds, 1),
        "submit_jobs_per_s": round(spec.n / submit_seconds, 1),
        "requests_per_job": per_job(counts, n),
        "jobs_per_cpu_s": round(n / sum(r["cpu_seconds"] for r in reports), 1),
        "flushes_per_job": round(sum(r["flushes"] for r in reports) / n, 2),
        "context_switches_per_job": round(sum(r["context_switches"] for r in reports) / n, 1),
        "system_share": round(
            sum(r["system_seconds"] for r in reports) / sum(r["cpu_seconds"] for r in reports), 2
        ),
        "per_process_jobs": [
            r["worker"]["succeeded"] for r in sorted(reports, key=lambda r: r["slot"])
        ],
        "lost_races": sum(r["queue"].get("lost_races", 0) for r in reports),
        "scans": sum(r["queue"].get("scans", 0) for r in reports),
        "queue_reads": sum(r["queue"].get("fetches", 0) for r in reports),
        "requests_by_area": per_area(
            dict(sum((Counter(r["areas"]) for r in reports), Counter())), n
        ),
        "worker_peak_rss_mb": max(r["peak_rss_mb"] for r in reports),
        "committing_in": [r.get("committing_in") for r in sorted(reports, key=lambda r: r["slot"])],
        **_urgent_waits(waits[spec.n :]),
    }


def _urgent_waits(waits: list[float]) -> dict[str, float]:
    """How long the urgent jobs waited from their submit to their start."""
    if not waits:
        return {}
    return {
        "urgent_wait_p50_s": round(percentile(waits, 50), 3),
        "urgent_wait_max_s": round(max(waits), 3),
    }


# -- what suspended runs cost ------------------------------------------------

DAY = 86_400.0
SETTLE = 15.0
"""Real seconds for an idle StoreQueue's listings to back off to their
slowest pace (1, 1, 2, 4, then every 5 s: docs/queue.md, Knobs)."""


async def _until(condition: Any, within: float = 120.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        await asyncio.sleep(0.01)


async def _watch(store: CountingStore, seconds: float) -> dict[str, int]:
    """The requests over ``seconds`` of real time from now."""
    store.reset()
    await asyncio.sleep(seconds)
    return store.snapshot()


async def _counted(store: CountingStore, action: Any) -> dict[str, int]:
    """The requests ``action`` (an awaitable) makes, by operation and area."""
    store.reset()
    await action
    return {k: v for k, v in store.areas().items() if v}


async def suspended(spec: Spec) -> dict[str, Any]:
    clock = FakeClock(time.time())
    per_minute = 60.0 / spec.window
    out: dict[str, Any] = {}
    settle = min(SETTLE, spec.window)  # --quick: a smoke run, not fully backed off
    async with open_backend(spec, jobs=(Naps, AwaitsPing), clock=clock) as (store, runner):
        async with runner:
            stats = runner.worker.stats
            await asyncio.sleep(settle)
            idle = await _watch(store, spec.window)

            async def asleep(n: int) -> None:
                await _until(lambda: stats.suspended >= n)

            handles = await asyncio.gather(
                *(runner.submit(Naps(n=i, seconds=30 * DAY)) for i in range(spec.n))
            )
            await asleep(spec.n)
            await asyncio.sleep(settle)
            sleeping = await _watch(store, spec.window)

            async def put_to_sleep() -> JobHandle[int]:
                handle = await runner.submit(Naps(n=-1, seconds=DAY))
                await asleep(spec.n + 1)
                return handle

            store.reset()
            probe = await put_to_sleep()
            suspend = {k: v for k, v in store.areas().items() if v}
            clock.advance(DAY)
            resume = await _counted(store, probe)
            waiter = await runner.submit(AwaitsPing())
            await asleep(spec.n + 2)
            clock.advance(RECHECK_WAKING)
            recheck = await _counted(store, asleep(spec.n + 3))
            send = await _counted(store, runner.send_event(waiter.id, "ping", "x"))
            woken = await _counted(store, waiter)
        # A process started on the sleeping runs: its first look reads each once.
        async with JobRunner(store, jobs=(Naps,), clock=clock, queue=_fresh_queue(runner)):
            started = await _watch(store, spec.window)
            later = await _watch(store, spec.window)
        status = await runner.status(handles[0].id)
        assert status is not None and status.status is JobStatus.SLEEPING
    out.update(
        {
            f"{name}_per_minute": {op: round(n * per_minute, 1) for op, n in counts.items()}
            for name, counts in (
                ("idle", idle),
                ("sleeping", sleeping),
                ("started", started),
                ("started_later", later),
            )
        },
        suspend=suspend,
        resume=resume,
        recheck=recheck,
        send_event=send,
        resume_after_event=woken,
    )
    return out


def _fresh_queue(runner: JobRunner) -> Any:
    """A queue like ``runner``'s with a record cache of its own (a new process's);
    None (the default StoreQueue) unless it is a MemoryQueue, which is one
    process's memory and so shared."""
    return runner.queue if isinstance(runner.queue, MemoryQueue) else None


async def _fleet(spec: Spec) -> dict[str, Any]:
    from .fleet import fleet  # (it imports this module)

    return await fleet(spec)


CASES: dict[str, Callable[[Spec], Any]] = {
    "w3": w3,
    "w3seq": w3_one_at_a_time,
    "peer": peer_one_at_a_time,
    "many": submit_many,
    "submitters": submitters,
    "latency": latency,
    "scale": scale,
    "suspended": suspended,
    "fleet": _fleet,
    "stream": stream_latency,
}


def run_one(spec: Spec) -> dict[str, Any]:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    load = os.getloadavg()[0]
    figures = CASES[spec.case](spec)
    if asyncio.iscoroutine(figures):
        figures = asyncio.run(figures)
    options = _file_options() if spec.backend == "file" else {}
    return {
        "name": spec.name(),
        **asdict(spec),
        **figures,
        **({"file_options": options} if options else {}),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "load_before": round(load, 2),
    }

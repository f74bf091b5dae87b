"""Streams: how soon a reader in another process sees what a run writes, and
what writing and reading cost in requests (docs/streams.md).

A worker in the benchmark's process runs one :class:`Chatter` run: it waits
for event ``go``, then writes N items ``pause`` seconds apart, each holding
the wall-clock time of its ``write`` call, and closes the stream. A reader
in a process of its own (spawned: its own interpreter, its own store
client, as an API process would be) follows the stream from the start the
moment the run waits: for ``window`` seconds nothing comes (what an idle
reader costs a second), then the items come, and it notes for each how
long after its ``write`` call it had it (both on this machine's clock).

Figures: the write-to-reader latency (p50, p90, p99, max, in ms); the
reader's requests per second while it waits and per item while items come;
the writer's requests per item (the run's requests while it writes, over
the items; the worker's lease renewals included); by operation, as
:mod:`benchmarks.counting` counts them.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections import Counter
from typing import Any, ClassVar

from stepstone import Job, JobContext, JobRunner, JobStatus
from stepstone.store import FileStore, ObjectStore

from .counting import CountingStore


class Chatter(Job[int]):
    """Waits for event ``go``, then writes ``n`` items ``pause`` seconds
    apart (each ``{"i": i, "t": time of its write call}``), and closes."""

    NAME: ClassVar[str] = "bench.chatter"
    n: int
    pause: float

    async def run(self, ctx: JobContext) -> int:
        await ctx.wait_for_event("go")
        out = ctx.stream("items")
        for i in range(self.n):
            await out.write({"i": i, "t": time.time()})
            await asyncio.sleep(self.pause)
        await out.close()
        return self.n


async def _waiting(runner: JobRunner, run_id: str, within: float = 60.0) -> None:
    """Return once the run waits for its event (RuntimeError after ``within`` s)."""
    deadline = time.monotonic() + within
    while True:
        state = await runner.status(run_id)
        if state is not None and state.status is JobStatus.WAITING_FOR_EVENT:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"run {run_id} did not come to wait for its event")
        await asyncio.sleep(0.02)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _open(where: dict[str, str]) -> ObjectStore:
    if where["kind"] == "file":
        return FileStore(where["root"])
    from stepstone.store import S3Store

    return S3Store(where["bucket"], "b", endpoint_url=where["url"], region="us-east-1")


def _reader_process(where: dict[str, str], run_id: str, out: Any, ready: Any) -> None:
    out.put(asyncio.run(_read(where, run_id, ready)))


async def _read(where: dict[str, str], run_id: str, ready: Any) -> dict[str, Any]:
    store = CountingStore(_open(where))
    runner = JobRunner(store)  # not started: an API process reads
    await runner.open()
    latencies: list[float] = []
    started = time.monotonic()
    idle: tuple[float, Counter[str]] | None = None
    ready.set()
    async for item in runner.stream(run_id, "items"):
        now = time.time()
        if idle is None:  # the first item: the idle phase is over
            idle = (time.monotonic() - started, Counter(store.counts))
        latencies.append(now - item["t"])
    done = Counter(store.counts)
    await runner.close()
    assert idle is not None
    waited, at_first = idle
    return {
        "latencies": latencies,
        "idle_seconds": waited,
        "idle_counts": dict(at_first),
        "item_counts": dict(done - at_first),
    }


async def stream_latency(spec: Any) -> dict[str, Any]:
    """The ``stream`` case (see the module docstring): ``spec.backend`` file or
    s3, ``spec.n`` items ``spec.pause`` s apart, ``spec.window`` s idle first."""
    import tempfile
    import uuid

    from .cases import discard

    tmp = moto = None
    if spec.backend == "file":
        tmp = tempfile.mkdtemp(prefix="stepstone-bench-", dir=spec.workdir or None)
        where = {"kind": "file", "root": tmp}
    elif spec.backend == "s3":
        from .moto_server import MotoServer

        moto = MotoServer()
        url = moto.__enter__()
        bucket = f"bench-{uuid.uuid4().hex[:12]}"
        moto.create_bucket(bucket)
        where = {"kind": "s3", "url": url, "bucket": bucket}
    else:
        raise ValueError(f"the stream case runs on file or s3, not {spec.backend!r}")
    store = CountingStore(_open(where))
    ctx = multiprocessing.get_context("spawn")
    results: Any = ctx.Queue()
    ready = ctx.Event()
    try:
        async with JobRunner(store, jobs=[Chatter], poll_interval=0.05) as runner:
            handle = await runner.submit(Chatter(n=spec.n, pause=spec.pause))
            await _waiting(runner, handle.id)
            reader = ctx.Process(target=_reader_process, args=(where, handle.id, results, ready))
            reader.start()
            await asyncio.to_thread(ready.wait, 60)
            await asyncio.sleep(spec.window)  # the reader waits, and pays for it
            before = Counter(store.counts)
            await runner.send_event(handle.id, "go")
            await handle.result(timeout=spec.n * spec.pause + 120)
            written = Counter(store.counts) - before
            read = await asyncio.to_thread(results.get, True, 120)
            await asyncio.to_thread(reader.join, 30)
    finally:
        await store.close()
        if tmp is not None:
            discard(tmp)
        if moto is not None:
            moto.__exit__(None, None, None)
    ms = [1000 * seconds for seconds in read["latencies"]]
    n = len(ms)
    return {
        "items": n,
        "p50_ms": round(_percentile(ms, 0.5), 1),
        "p90_ms": round(_percentile(ms, 0.9), 1),
        "p99_ms": round(_percentile(ms, 0.99), 1),
        "max_ms": round(max(ms), 1),
        "writer_requests_per_item": {op: round(k / n, 2) for op, k in written.items() if k},
        "reader_idle_requests_per_second": {
            op: round(k / read["idle_seconds"], 2) for op, k in read["idle_counts"].items() if k
        },
        "reader_requests_per_item": {
            op: round(k / n, 2) for op, k in read["item_counts"].items() if k
        },
    }

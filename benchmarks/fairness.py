"""Fairness between tenants: how soon a tenant's few runs start behind
another tenant's backlog.

``python -m benchmarks.fairness [--backends memory,file,s3] [--backlogs
1000,10000] [--s3-backlogs 500,1000] [--rounds 2] [--late] [--out FILE]``

Tenant A's backlog of N jobs is submitted first, then tenant B's 10, by a
runner that runs no worker (an API process: on files and S3 its own
StoreQueue, so the worker learns of them only through the store, as another
process would); then a worker (concurrency 8) starts, in this process, on
jobs that each take 5 ms. The figures: from the worker's start to B's last
run's start, and how many runs started before it. With ``--late``, B's runs are submitted once the
worker has started 16 of A's (the worker busy with the backlog), and the
time runs from B's submits. With fairness keys
(``SubmitOptions(fairness_key=...)``) against the same submits without
(every job in one line): B's wait should not grow with N with keys, and
grows with N without. A round with no keys stops once B's last run started,
or after ``--cap`` seconds (then "> cap").

Backends take turns within a round, so a noisy machine weighs on all
alike. Directories are made fresh under /tmp and removed; moto runs in a
process of its own. SQS cannot be measured here: moto keeps the message
group a fairness key is sent as but does not reorder by it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from typing import Any, ClassVar

from stepstone import Job, JobContext, JobRunner, SubmitOptions
from stepstone.runtime import MemoryQueue
from stepstone.store import FileStore, ObjectStore

from .moto_server import MotoServer
from .pickup import commit

B_JOBS = 10
CONCURRENCY = 8
WORK = 0.005


class Starts:
    """When each run started (monotonic), by tenant, in start order."""

    def __init__(self) -> None:
        self.order: list[tuple[str, float]] = []
        self.b_done = asyncio.Event()
        self.busy = asyncio.Event()
        """Set once the worker started 2 * CONCURRENCY runs."""

    def started(self, tenant: str) -> None:
        self.order.append((tenant, time.monotonic()))
        if len(self.order) >= 2 * CONCURRENCY:
            self.busy.set()
        if sum(1 for t, _ in self.order if t == "b") == B_JOBS:
            self.b_done.set()


class TenantJob(Job[None]):
    NAME: ClassVar[str] = "bench.tenant"
    tenant: str
    n: int

    async def run(self, ctx: JobContext) -> None:
        ctx.state(Starts).started(self.tenant)
        await asyncio.sleep(WORK)


def options(tenant: str, keyed: bool) -> SubmitOptions:
    return SubmitOptions(fairness_key=f"tenant-{tenant}" if keyed else None)


async def one(
    backend: str, backlog: int, keyed: bool, cap: float, moto: MotoServer | None, late: bool
) -> dict[str, Any]:
    starts = Starts()
    tmp: str | None = None
    store: ObjectStore
    queue: MemoryQueue | None = None
    if backend == "memory":
        from stepstone.store import MemoryStore

        store, queue = MemoryStore(), MemoryQueue()
    elif backend == "file":
        tmp = tempfile.mkdtemp(prefix="stepstone-fair-", dir="/tmp")
        store = FileStore(tmp)
    else:
        from stepstone.store import S3Store

        assert moto is not None
        bucket = f"fair-{uuid.uuid4().hex[:12]}"
        moto.create_bucket(bucket)
        store = S3Store(bucket, "b", endpoint_url=moto.url, region="us-east-1")
    common: dict[str, Any] = {"jobs": [TenantJob], "state": [starts], "retry_backoff": 0.0}
    if queue is not None:
        common["queue"] = queue
    try:
        api = JobRunner(store, **common)
        t0 = time.monotonic()
        for start in range(0, backlog, 1000):
            jobs = [TenantJob(tenant="a", n=n) for n in range(start, min(backlog, start + 1000))]
            await api.submit_many(jobs, options("a", keyed))
        b_jobs = [TenantJob(tenant="b", n=n) for n in range(B_JOBS)]
        if not late:
            await api.submit_many(b_jobs, options("b", keyed))
        submitted = time.monotonic() - t0
        worker = JobRunner(store, concurrency=CONCURRENCY, drain_timeout=1.0, **common)
        async with worker:
            began = time.monotonic()
            if late:  # B's submits come once the worker is busy with A's backlog
                await asyncio.wait_for(starts.busy.wait(), cap)
                began = time.monotonic()
                await api.submit_many(b_jobs, options("b", keyed))
            try:
                await asyncio.wait_for(starts.b_done.wait(), cap)
                capped = False
            except TimeoutError:
                capped = True
        order = starts.order
        b_starts = [at - began for tenant, at in order if tenant == "b"]
        last_b = max((i for i, (tenant, _) in enumerate(order) if tenant == "b"), default=-1)
        last_b -= sum(1 for _, at in order if at < began)  # (counted from B's submits)
        await api.close()
        return {
            "backend": backend,
            "backlog": backlog,
            "keyed": keyed,
            "late": late,
            "submit_s": round(submitted, 2),
            "capped": capped,
            "b_first_s": round(min(b_starts), 3) if b_starts else None,
            "b_last_s": None if capped else round(max(b_starts), 3),
            "runs_before_last_b": None if capped else last_b,
            "runs_started": len(order),
            "elapsed_s": round(time.monotonic() - began, 3),
        }
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _shown(row: dict[str, Any], cap: float) -> str:
    last = f"> {cap:.0f} s" if row["capped"] else f"{row['b_last_s']:.3f} s"
    before = "-" if row["capped"] else str(row["runs_before_last_b"])
    keys = "keys" if row["keyed"] else "none"
    when = "late" if row["late"] else "first"
    return (
        f"{row['backend']:6} N={row['backlog']:6} {keys:4} {when:5}  B last start {last:>9}"
        f"  runs before it {before:>6}  (submits took {row['submit_s']} s)"
    )


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with ExitStack() as stack:
        server: MotoServer | None = None
        if "s3" in args.backends:
            server = MotoServer()
            stack.enter_context(server)
        for _ in range(args.rounds):
            for keyed in (True, False):
                for backend in args.backends:
                    sizes = args.s3_backlogs if backend == "s3" else args.backlogs
                    for backlog in sizes:
                        row = await one(backend, backlog, keyed, args.cap, server, args.late)
                        rows.append(row)
                        print(_shown(row, args.cap), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fairness", description=__doc__)
    parser.add_argument("--backends", default="memory,file,s3", type=lambda s: s.split(","))
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    parser.add_argument("--backlogs", default="1000,10000", type=ints)
    parser.add_argument("--s3-backlogs", default="500,1000", type=ints)
    parser.add_argument("--rounds", default=2, type=int)
    parser.add_argument("--cap", default=60.0, type=float)
    parser.add_argument("--out", default="")
    parser.add_argument(
        "--late", action="store_true", help="B submits once the worker runs A's backlog"
    )
    args = parser.parse_args(argv)
    load = os.getloadavg()
    measured = commit()  # (before the run: a commit made meanwhile is not what ran)
    rows = asyncio.run(main_async(args))
    if args.out:
        with open(args.out, "w") as f:
            saved = {
                "commit": measured,
                "argv": sys.argv[1:] if argv is None else argv,
                "load_before": load,
                "load_after": os.getloadavg(),
                "rows": rows,
            }
            json.dump(saved, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

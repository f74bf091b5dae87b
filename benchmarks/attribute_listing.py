"""What a listing by attributes costs as the bucket fills:
``python -m benchmarks.attribute_listing``.

On ``memory://`` wrapped in a CountingStore, ``--runs`` finished runs (by
default 1,000, 10,000 and 100,000; W3 with no step, one step and its
outcome, through a JobRunner's worker, 64 at a time), each submitted with
``tenant=t<k>`` for one of 100 tenants (1% of the runs each) and the last
ten with ``tenant=rare`` as well as ``tier=gold``. Then, from a runner with
no worker, the requests (and milliseconds) of:

- ``runs(attributes={"tenant": "t7"}, limit=None)``: every run of one
  tenant, through the index (1% of the runs);
- the same with the default ``limit=100``;
- ``runs(attributes={"tier": "gold"}, limit=None)``: ten runs, whatever
  the bucket holds;
- the same 1% without the index (``list_runs`` filtering every record it
  reads, as a listing by kind or version does): what reading every run costs.

Prints one table and one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from stepstone import JobRunner, SubmitOptions
from stepstone.ops.listing import RunFilter, list_runs
from stepstone.store import CountingStore, MemoryStore

from .jobs import W3

SIZES = (1_000, 10_000, 100_000)
TENANTS = 100
RARE = 10
BATCH = 1_000


async def populate(store: CountingStore, runs: int) -> None:
    """``runs`` finished runs, 1% of them per tenant, the last RARE also gold."""
    runner = JobRunner(store, jobs=[W3], concurrency=64, retry_backoff=0.0, poll_interval=0.05)
    async with runner:
        for first in range(0, runs, BATCH):
            handles = []
            numbers = range(first, min(first + BATCH, runs))
            by_tenant: dict[str, list[W3]] = {}
            for n in numbers:
                rare = n >= runs - RARE
                tenant = f"t{n % TENANTS}" + (":rare" if rare else "")
                by_tenant.setdefault(tenant, []).append(W3(n=n, steps=0, keyed=False))
            for tenant, jobs in by_tenant.items():
                name, _, rare_mark = tenant.partition(":")
                attributes = {"tenant": name, **({"tier": "gold"} if rare_mark else {})}
                handles += await runner.submit_many(jobs, SubmitOptions(attributes=attributes))
            await asyncio.gather(*(handle.result(timeout=600) for handle in handles))


async def measure(store: CountingStore, what: str, listing: Any) -> dict[str, Any]:
    store.reset()
    start = time.perf_counter()
    rows = await listing
    ms = (time.perf_counter() - start) * 1e3
    counts = store.counts
    return {
        "listing": what,
        "rows": len(rows),
        "LIST": counts["LIST"],
        "GET": counts["GET"],
        "requests": store.total,
        "ms": round(ms, 1),
    }


async def one_size(runs: int) -> list[dict[str, Any]]:
    store = CountingStore(MemoryStore())
    await populate(store, runs)
    reader = JobRunner(store)
    figures = [
        await measure(
            store, "tenant=t7, all", reader.runs(attributes={"tenant": "t7"}, limit=None)
        ),
        await measure(store, "tenant=t7, newest 100", reader.runs(attributes={"tenant": "t7"})),
        await measure(
            store, "tier=gold (10 runs)", reader.runs(attributes={"tier": "gold"}, limit=None)
        ),
        await measure(store, "tenant=t7 without the index", _unindexed(reader)),
    ]
    await reader.close()
    return [{"runs": runs, **row} for row in figures]


async def _unindexed(reader: JobRunner) -> list[Any]:
    listed = await list_runs(reader, RunFilter(attributes={"tenant": "t7"}), limit=None)
    return listed.rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, nargs="*", default=list(SIZES))
    args = parser.parse_args()
    rows = [row for runs in args.runs for row in asyncio.run(one_size(runs))]
    print("| runs in the bucket | listing | rows | LIST | GET | requests | ms |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['runs']:,} | {row['listing']} | {row['rows']:,} | {row['LIST']:,} "
            f"| {row['GET']:,} | {row['requests']:,} | {row['ms']:,.1f} |"
        )
    print(json.dumps(rows))


if __name__ == "__main__":
    main()

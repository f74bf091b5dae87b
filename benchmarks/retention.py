"""Whether a job's cost stays flat as a store fills: ``python -m benchmarks.retention``.

Two measurements on ``memory://``:

- **removing a run** (what the retention sweep does for each expired run:
  list its memos and events, delete them, its progress and its outcome), in
  a store already holding 1,000 to 40,000 finished runs of 3 memos each;
  microseconds per run removed. Flat when a listing costs the page it
  returns; growing with the store when a listing looks at every key.
- **jobs with retention on**: ``--jobs`` jobs of 3 steps (default 20,000)
  through one JobRunner (StoreQueue on the same store, retention 2 s, a
  sweep every 0.5 s), in batches of ``--batch`` submitted together;
  milliseconds per job and objects held after each batch. Flat when the
  sweep keeps up; growing when each removal costs the store's size, the
  sweep falls behind and the store (and every listing in it) grows.

Prints one table per measurement, and one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import time
from typing import Any

from stepstone import JobRunner
from stepstone.records.retention import remove_run
from stepstone.store import MemoryStore

from .jobs import W3

STORE_SIZES = (1_000, 5_000, 20_000, 40_000)
REMOVED = 500
RETENTION = 2.0
SWEEP_INTERVAL = 0.5


async def removal_cost(runs: int) -> float:
    """Microseconds to remove one run from a store holding ``runs`` finished runs."""
    runner = JobRunner(MemoryStore())
    store, layout = runner.store, runner.layout
    ids = [f"{n:032x}" for n in range(runs)]
    for run_id in ids:
        for step in ("one", "two", "three"):
            await store.put(layout.memo(run_id, "0" * 16, step), b"memo")
        await store.put(layout.progress(run_id, "0" * 16), b"progress")
        await store.put(layout.outcome(run_id), b"outcome")
    gc.collect()
    start = time.perf_counter()
    for run_id in ids[:: max(1, runs // REMOVED)][:REMOVED]:
        await remove_run(runner, run_id)
    return (time.perf_counter() - start) / REMOVED * 1e6


async def jobs_with_retention(jobs: int, batch: int) -> list[dict[str, float]]:
    """Per batch: milliseconds per job and the objects the store holds after it."""
    store = MemoryStore()
    runner = JobRunner(
        store,
        jobs=[W3],
        concurrency=16,
        retry_backoff=0.0,
        retention=RETENTION,
        sweep_interval=SWEEP_INTERVAL,
    )
    rows = []
    async with runner:
        for first in range(0, jobs, batch):
            start = time.perf_counter()
            handles = await asyncio.gather(
                *(runner.submit(W3(n=n, tag="retention")) for n in range(first, first + batch))
            )
            await asyncio.gather(*handles)
            seconds = time.perf_counter() - start
            held = len(await _keys(store))
            rows.append({"jobs": first + batch, "ms_per_job": seconds / batch * 1e3, "held": held})
    await runner.close()
    return rows


async def _keys(store: MemoryStore) -> list[str]:
    return [info.key async for info in store.scan()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=2_000)
    args = parser.parse_args()

    removal = {runs: asyncio.run(removal_cost(runs)) for runs in STORE_SIZES}
    print("| runs in the store | us per run removed |\n|---|---|")
    for runs, us in removal.items():
        print(f"| {runs:,} | {us:,.0f} |")

    rows = asyncio.run(jobs_with_retention(args.jobs, args.batch))
    print("\n| jobs so far | ms per job (this batch) | objects held |\n|---|---|---|")
    for row in rows:
        print(f"| {row['jobs']:,} | {row['ms_per_job']:.2f} | {row['held']:,} |")
    half = len(rows) // 2
    early = statistics.median(row["ms_per_job"] for row in rows[:half])
    late = statistics.median(row["ms_per_job"] for row in rows[half:])
    print(f"\nms per job, median of the later batches / of the earlier: {late / early:.2f}")
    figures: dict[str, Any] = {
        "removal_us": removal,
        "batches": rows,
        "late_over_early": round(late / early, 2),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

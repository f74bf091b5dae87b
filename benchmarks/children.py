"""What a parent awaiting its children costs: ``python -m benchmarks.children``.

``--parents`` parents (default 20) each submit ``--children`` children
(default 4) and ``ctx.gather`` them; child ``i`` takes ``i`` x 20 ms, so
they end one after another while their parent waits. One JobRunner runs
them all (room for every run at once) on ``--store`` (``memory``: a
MemoryStore; ``file``: a fresh directory), with a StoreQueue, every request
counted (benchmarks.counting).

Per parent: its resumes (claims of its run after the first, from its
outcome record) and its code's runs; the store's requests, the parent's
and its children's together, by kind and by area. Prints one JSON line.

The figure this measures is in benchmarks/NOTES.md (children waits): run
it at two commits to compare, as the NOTES entry says.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import threading
import time
from collections import Counter
from typing import Any, ClassVar

from stepstone import Job, JobContext, JobRunner
from stepstone.ops.reads import detail
from stepstone.store import FileStore, MemoryStore, ObjectStore

from .counting import CountingStore

STEP = 0.02
"""Seconds child ``i`` takes, times ``i``: children end one by one."""


class Runs:
    """How often each parent's code ran."""

    def __init__(self) -> None:
        self.counts: Counter[int] = Counter()
        self.lock = threading.Lock()


class Child(Job[int]):
    NAME: ClassVar[str] = "bench.child"
    parent: int
    i: int

    async def run(self, ctx: JobContext) -> int:
        await asyncio.sleep(STEP * self.i)
        return self.i


class Parent(Job[int]):
    NAME: ClassVar[str] = "bench.parent"
    n: int
    children: int

    async def run(self, ctx: JobContext) -> int:
        runs = ctx.state(Runs)
        with runs.lock:
            runs.counts[self.n] += 1
        handles = [await ctx.submit(Child(parent=self.n, i=i + 1)) for i in range(self.children)]
        return sum(await ctx.gather(*handles))


async def measure(store_kind: str, parents: int, children: int) -> dict[str, Any]:
    where = tempfile.mkdtemp(prefix="stepstone-children-") if store_kind == "file" else None
    backing: ObjectStore = MemoryStore() if where is None else FileStore(where)
    store = CountingStore(backing)
    runs = Runs()
    runner = JobRunner(
        store,
        jobs=[Parent, Child],
        state=[runs],
        concurrency=parents * (children + 1),
        poll_interval=0.05,
    )
    try:
        async with runner:
            store.reset()
            started = time.perf_counter()
            handles = [await runner.submit(Parent(n=n, children=children)) for n in range(parents)]
            results = [await handle.result(timeout=120) for handle in handles]
            elapsed = time.perf_counter() - started
            requests = store.snapshot()
            areas = store.areas()
            claims = []
            for handle in handles:
                outcome = (await detail(runner, handle.id)).outcome
                assert outcome is not None and outcome.claims is not None
                claims.append(outcome.claims)
    finally:
        await runner.close()
        if where is not None:
            shutil.rmtree(where, ignore_errors=True)
    expected = sum(range(1, children + 1))
    assert results == [expected] * parents, results
    per = float(parents)
    return {
        "store": store_kind,
        "parents": parents,
        "children": children,
        "resumes_per_parent": round(sum(c - 1 for c in claims) / per, 2),
        "code_runs_per_parent": round(sum(runs.counts.values()) / per, 2),
        "requests_per_parent": round(sum(requests.values()) / per, 1),
        "by_kind_per_parent": {k: round(v / per, 1) for k, v in requests.items() if v},
        "by_area_per_parent": {k: round(v / per, 1) for k, v in areas.items() if v},
        "seconds": round(elapsed, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=["memory", "file"], default="memory")
    parser.add_argument("--parents", type=int, default=20)
    parser.add_argument("--children", type=int, default=4)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(measure(args.store, args.parents, args.children))))


if __name__ == "__main__":
    main()

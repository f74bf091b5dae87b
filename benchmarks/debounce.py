"""What a debounced submit costs in store requests, and what its run costs.

``python -m benchmarks.debounce [--submits N] [--store memory|file]``

Submitters (each a JobRunner of its own, as separate processes would be:
its own copy of the key's object) submit ``N`` debounced jobs of one key in
all, at once, on one store counted by CountingStore, with a ``wait`` long
enough that one window takes them all; then one worker runs the window's
run. Printed per configuration: requests per submit by kind and area, the
submits' conflicts (a refused compare-and-swap costs a GET and another
PUT), and the requests of the run's start (its wait for the window, the
input taken as a memo, the window dropped).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.counting import CountingStore
from stepstone import Debounce, Job, JobContext, JobRunner, SubmitOptions
from stepstone.store import FileStore, MemoryStore, ObjectStore


class Touch(Job[int]):
    """A debounced job: answers its input."""

    NAME = "bench-debounce"
    n: int

    async def run(self, ctx: JobContext) -> int:
        return self.n


async def one(store_kind: str, submitters: int, submits: int) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="bench-debounce-"))
    inner: ObjectStore = MemoryStore() if store_kind == "memory" else FileStore(workdir / "s")
    store = CountingStore(inner)
    store.reset()
    options = SubmitOptions(debounce=Debounce("doc", wait=3600.0))
    runners = [JobRunner(store, jobs=[Touch]) for _ in range(submitters)]
    each = submits // submitters

    async def submit_all(runner: JobRunner, index: int) -> list[Any]:
        return [await runner.submit(Touch(n=index * each + i), options) for i in range(each)]

    started = time.perf_counter()
    parts = await asyncio.gather(*map(submit_all, runners, range(submitters)))
    handles = [h for part in parts for h in part]
    took = time.perf_counter() - started
    submit_counts, submit_areas = store.snapshot(), store.areas()
    assert len({h.id for h in handles}) == 1, "one window was to take every submit"
    # The run: make it due now, and let one worker start it.
    store.reset()
    worker = JobRunner(store, jobs=[Touch], poll_interval=0.01)
    windows = worker._submitter.debouncer.windows  # (the benchmark reaches in to end the wait)
    from stepstone.records import debounce_windows as rules
    from stepstone.records.layout import limit_digest

    shared = windows(limit_digest(Touch.NAME, "doc"))
    await shared.update(
        lambda state, now: (
            None
            if state is None
            else rules.Windows(
                state.job,
                state.key,
                tuple(
                    rules.Window(
                        w.run, w.first, w.last, now, w.cap, w.count, w.input, w.enqueued, w.closed
                    )
                    for w in state.windows
                ),
            ),
            None,
        )
    )
    adjust = store.snapshot()
    async with worker:
        result = await handles[0].result(timeout=120)
    run_counts = {k: v - adjust.get(k, 0) for k, v in store.snapshot().items()}
    for runner in runners:
        await runner.close()
    await store.close()
    shutil.rmtree(workdir, ignore_errors=True)
    assert result in range(len(handles))
    return {
        "store": store_kind,
        "submitters": submitters,
        "submits": len(handles),
        "per_submit": {k: round(v / len(handles), 2) for k, v in submit_counts.items() if v},
        "areas": {k: v for k, v in submit_areas.items() if v},
        "submits_per_s": round(len(handles) / took, 1),
        "run": {k: v for k, v in run_counts.items() if v},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.debounce", description=__doc__)
    parser.add_argument("--submits", type=int, default=400)
    parser.add_argument("--store", default="memory", choices=("memory", "file"))
    args = parser.parse_args(argv)
    for submitters in (1, 4, 8):
        found = asyncio.run(one(args.store, submitters, args.submits))
        print(found)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What the created-here cache saves: requests per keyed run, with and without.

    python -m benchmarks.created_here [--jobs 300]

A keyed submit that created its run's record and then found no earlier
outcome of the key has proved the run has none yet
(:mod:`stepstone.submit.created_here`); its process's first claim of the run
then skips looking again. This runs W3 (keyed jobs of three steps,
concurrency 64, submits awaited one after another) on a fresh directory
store behind a CountingStore, with the cache and with it switched off (every
first claim looks), and prints the requests per job of each kind.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile

from stepstone import JobRunner
from stepstone.store import open_store
from stepstone.store.counting import CountingStore
from stepstone.submit import created_here

from .w3_instructions import W3


async def requests_per_job(jobs: int, *, cache: bool) -> dict[str, float]:
    """Requests per job of each kind, for ``jobs`` W3 runs on a fresh directory."""
    root = tempfile.mkdtemp(prefix="created-here-")
    take = created_here.CreatedHere.take
    if not cache:
        created_here.CreatedHere.take = lambda self, run_id, incarnation: False  # type: ignore[method-assign]
    try:
        store = CountingStore(open_store(root))
        async with JobRunner(store, jobs=[W3], concurrency=64) as runner:
            handles = [await runner.submit(W3(n=i)) for i in range(jobs)]
            for handle in handles:
                await handle
        return {kind: count / jobs for kind, count in sorted(store.counts.items()) if count}
    finally:
        created_here.CreatedHere.take = take  # type: ignore[method-assign]
        shutil.rmtree(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    args = parser.parse_args()
    for cache in (True, False):
        counts = asyncio.run(requests_per_job(args.jobs, cache=cache))
        shown = ", ".join(f"{kind} {value:.2f}" for kind, value in counts.items())
        print(f"{'with' if cache else 'without'} the cache: {shown}")


if __name__ == "__main__":
    main()

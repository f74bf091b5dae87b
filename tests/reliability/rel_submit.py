"""A submitting process for the duplicate-storm test: ``python rel_submit.py OUT``.

Waits for the file ``REL_GO`` (so every submitter starts together), submits
ThreeSteps(n) for n in ``REL_KEYS`` (comma separated) ``REL_REPEATS`` times
each, ``REL_INFLIGHT`` submits at a time in a shuffled order, awaits every
distinct run, and writes JSON to OUT: ``{"ids": {n: [run ids]},
"new": count of newly_submitted handles, "results": {run id: result}}``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys

from rel_jobs import ThreeSteps
from rel_support import submitter

from stepstone.testing import wait_until_sync


def wait_for_go(path: str, within: float = 60.0) -> None:
    wait_until_sync(lambda: os.path.exists(path), timeout=within, interval=0.002, message=path)


def write_json(path: str, value: object) -> None:
    with open(path, "w") as f:
        json.dump(value, f)


async def main(out: str) -> int:
    env = os.environ
    keys = [int(k) for k in env["REL_KEYS"].split(",")]
    repeats = int(env.get("REL_REPEATS", "50"))
    order = [n for n in keys for _ in range(repeats)]
    random.Random(os.getpid()).shuffle(order)
    runner = submitter(env["REL_ROOT"])
    slots = asyncio.Semaphore(int(env.get("REL_INFLIGHT", "32")))

    async def one(n: int) -> tuple[int, str, bool]:
        async with slots:
            handle = await runner.submit(ThreeSteps(n=n))
            return n, handle.id, handle.newly_submitted

    submitted = await asyncio.gather(*(one(n) for n in order))
    ids: dict[int, list[str]] = {}
    for n, run, _ in submitted:
        ids.setdefault(n, []).append(run)
    results = {}
    for n in keys:
        handle = runner.handle(ids[n][0], ThreeSteps)
        results[ids[n][0]] = await handle.result(timeout=60)
    new = sum(created for *_, created in submitted)
    write_json(out, {"ids": ids, "new": new, "results": results})
    await runner.store.close()
    return 0


if __name__ == "__main__":
    wait_for_go(os.environ["REL_GO"])
    sys.exit(asyncio.run(main(sys.argv[1])))

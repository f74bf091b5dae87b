"""One process of test_debounce_multiprocess: submits debounced jobs of one
key and runs a worker, then awaits every handle.

``python debounce_submitter.py URL INDEX COUNT START_AT WAIT MAX_WAIT OUT``:
from START_AT (epoch seconds) submits COUNT jobs (inputs INDEX*100000+i),
pausing as a seeded random choice says, now and then until the fleet's next
whole second from START_AT (so every process goes quiet at once, and windows
close for their wait, not only their max_wait); then writes one JSON line
per submit to OUT: its input, the run it joined, its place, when it was
decided, and its handle's result.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
from pathlib import Path

from debounce_jobs import Reindex

from stepstone import Debounce, JobRunner, SubmitOptions


async def main(
    url: str, index: int, count: int, start_at: float, wait: float, max_wait: float, out: str
) -> None:
    rng = random.Random(index)
    options = SubmitOptions(debounce=Debounce("doc-1", wait=wait, max_wait=max_wait))
    runner = JobRunner(
        url, jobs=[Reindex], poll_interval=0.02, lease=5.0, worker_id=f"debounce-{os.getpid()}"
    )
    made = []
    async with runner:
        await asyncio.sleep(max(0.0, start_at - time.time()))
        for i in range(count):
            n = index * 100_000 + i
            made.append((n, await runner.submit(Reindex(n=n), options)))
            pause = rng.choice((0.0, 0.0, 0.005, 0.02, 0.05, "beat"))
            if pause == "beat":
                await asyncio.sleep(1.0 - (time.time() - start_at) % 1.0)
            else:
                await asyncio.sleep(float(pause))
        results = [await handle.result(timeout=600) for _, handle in made]
    await runner.close()
    lines = []
    for (n, handle), result in zip(made, results, strict=True):
        joined = handle.debounced
        assert joined is not None
        line = {"n": n, "run": joined.run, "place": joined.count, "at": joined.at}
        lines.append(json.dumps({**line, "result": result}) + "\n")
    await asyncio.to_thread(Path(out).write_text, "".join(lines))


if __name__ == "__main__":
    url, index, count, start_at, wait, max_wait, out = sys.argv[1:]
    asyncio.run(
        main(url, int(index), int(count), float(start_at), float(wait), float(max_wait), out)
    )

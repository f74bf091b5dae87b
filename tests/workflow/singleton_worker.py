"""A worker process for test_singleton_multiprocess:
``python singleton_worker.py STORE_URL LEASE``; runs the singleton jobs until SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from singleton_jobs import SINGLETON_JOBS

from stepstone import JobRunner


async def main(url: str, lease: float) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    runner = JobRunner(
        url,
        jobs=SINGLETON_JOBS,
        concurrency=4,
        lease=lease,
        poll_interval=0.05,
        cancel_check=0.2,
        worker_id=f"singleton-{os.getpid()}",
    )
    async with runner:
        await stop.wait()
    await runner.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2])))

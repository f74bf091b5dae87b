"""A worker process for test_limits_multiprocess: ``python limit_worker.py STORE_URL LEASE``.

Runs :class:`limit_jobs.Serial` jobs on the store until SIGTERM, then drains.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

from limit_jobs import Serial

from stepstone import Job, JobRunner


async def serve(
    url: str, lease: float, jobs: list[type[Job[Any]]], name: str, **options: Any
) -> None:
    """Run ``jobs`` on the store at ``url`` until SIGTERM, then drain."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    # Each its own worker id: a worker taking a dead peer's free default id
    # would take its runs back at once, and the test is of the lease.
    runner = JobRunner(
        url,
        jobs=jobs,
        concurrency=4,
        lease=lease,
        poll_interval=0.05,
        worker_id=f"{name}-{os.getpid()}",
        **options,
    )
    async with runner:
        await stop.wait()
    await runner.close()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], float(sys.argv[2]), [Serial], "limits"))

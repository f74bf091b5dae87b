"""A worker process for test_schedule_fleet:
``python sched_worker.py STORE_URL OVERLAP LOG``.

Carries schedule ``fleet`` (every second, ``OVERLAP``), whose runs append
their start and end to ``LOG`` and hold their worker ``HOLD`` seconds
between; runs until SIGTERM, then drains.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import ClassVar

from stepstone import Job, JobContext, JobRunner, Schedule

HOLD = 1.5
LEASE = 3.0


class Logged(Job[str]):
    NAME: ClassVar[str] = "sched.logged"
    at: str

    async def run(self, ctx: JobContext) -> str:
        _log("start", self.at)
        await asyncio.sleep(HOLD)  # holds its worker: a kill now leaves it to a takeover
        _log("end", self.at)
        return self.at


def _log(what: str, at: str) -> None:
    with Path(os.environ["STEPSTONE_SCHED_LOG"]).open("a") as f:
        f.write(f"{what} {at} {os.getpid()} {time.time()}\n")


def fleet_schedule(overlap: str) -> Schedule:
    return Schedule(
        "fleet",
        every=timedelta(seconds=1),
        job=lambda tick: Logged(at=tick.isoformat()),
        overlap=overlap,  # type: ignore[arg-type]
    )


async def main(url: str, overlap: str) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    runner = JobRunner(
        url,
        jobs=[Logged],
        schedules=[fleet_schedule(overlap)],
        lease=LEASE,
        poll_interval=0.05,
        worker_id=f"sched-{os.getpid()}",  # each its own: a takeover waits for the lease
    )
    async with runner:
        await stop.wait()
    await runner.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))

"""Graceful stop: stop claiming, give in-flight handlers the drain window,
then cancel the rest and release their jobs with the attempt not counted (a
deploy must not burn attempts).

A handler that had already finished by then is settled normally.
Heartbeats and attempt timeouts keep running through the drain (their
task ends only after it): a drain window longer than the lease must
not cost a job its lease. The drain window is real seconds, like every
pause of this process's own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from .in_flight import InFlight, InFlightJob, Stop
from .logs import logger
from .pauses import Wakeup

SETTLE_GRACE = 5.0
"""After the drain window, how long (at least) settlements already under way
get before stop gives up on them."""


async def drain(
    jobs: InFlight,
    *,
    window: float,
    wakeup: Wakeup,
    stop: Callable[[InFlightJob, Stop], None],
    worker_id: str,
) -> None:
    """Give in-flight ``jobs`` the drain ``window``, then ``stop`` and
    release the rest, and give up on settlements that hang."""
    loop = asyncio.get_running_loop()
    window = max(0.0, window)
    if jobs:
        logger.info("%s draining %d job(s) for up to %gs", worker_id, len(jobs), window)
    await tend(jobs, wakeup, loop.time() + window)
    for job in jobs:
        stop(job, Stop.DRAIN)
    # What is left: released stragglers, and settlements of handlers that
    # finished in time. Both are short queue calls, unless on_terminal or
    # the queue hangs; bound the wait.
    await tend(jobs, wakeup, loop.time() + max(window, SETTLE_GRACE))
    stuck = [job.task for job in jobs if job.task is not None]
    for task in stuck:
        # Still claimed by us: the job comes back when its lease lapses.
        logger.error("%s: %s did not settle after the drain; abandoning it", worker_id, task)
        task.cancel()
    if stuck:
        await asyncio.wait(stuck)


async def tend(jobs: InFlight, wakeup: Wakeup, deadline: float) -> None:
    """Wait until no job is left or ``deadline`` (loop time); each job's end sets ``wakeup``."""
    loop = asyncio.get_running_loop()
    while jobs:
        remaining = deadline - loop.time()
        if remaining <= 0:
            return
        wakeup.clear()
        await wakeup.sleep(remaining)

"""A worker process for the reliability tests: ``python rel_worker.py``.

Runs a JobRunner over a store (wrapped in rel_jobs.TapStore, which logs
memo, outcome and claim writes to the shared event log and kills the process
at the configured points) until SIGTERM, then drains, writes a ``STATS`` line
and exits 0. Configured by the environment (see rel_jobs for the event log
and kill points):

``REL_ROOT`` the store's directory or URL (``s3://...``); ``REL_LEASE`` seconds (2);
``REL_HEARTBEAT`` seconds (default lease/3; 0 disables renewal);
``REL_CONCURRENCY`` (8); ``REL_CLOCK_OFFSET`` seconds added to this worker's
clock (0); ``REL_SCAN`` the StoreQueue's scan interval (0.2);
``REL_POLL`` the worker's poll interval (0.1); ``REL_SCHEDULE_EVERY``
seconds: a schedule ``rel-every`` that submits rel_wait_jobs.Tick at each tick.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import signal
import sys
import time
from datetime import timedelta

from rel_jobs import ALL_JOBS, SkewedClock, TapStore, emit, env_float, open_rel_store
from rel_wait_jobs import WAIT_JOBS, Tick

from stepstone import JobRunner, Schedule
from stepstone.runtime.store_queue import StoreQueue


class _EventHandler(logging.Handler):
    """Copies the engine's warnings (lease lost, settlement lost, store errors)
    into the event log as ``WARN pid logger message`` lines."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage().replace("\n", " ")
        except Exception:
            message = "<unformattable>"
        emit("WARN", os.getpid(), record.name, message)


async def main() -> int:
    env = os.environ
    clock = SkewedClock(env_float(env, "REL_CLOCK_OFFSET", 0.0))
    store = TapStore(open_rel_store(env["REL_ROOT"]))
    lease = env_float(env, "REL_LEASE", 2.0)
    heartbeat = env.get("REL_HEARTBEAT")
    queue = StoreQueue(
        store, prefix="queue", clock=clock, scan_interval=env_float(env, "REL_SCAN", 0.2)
    )
    runner = JobRunner(
        store,
        queue=queue,
        jobs=(*ALL_JOBS, *WAIT_JOBS),
        schedules=schedules(env),
        concurrency=int(env.get("REL_CONCURRENCY", "8")),
        lease=lease,
        heartbeat=float(heartbeat) if heartbeat else None,
        retry_backoff=0.05,
        retry_backoff_cap=1.0,
        poll_interval=env_float(env, "REL_POLL", 0.1),
        drain_timeout=2.0,
        clock=clock,
        # Workers are SIGKILLed every second or so here: a run is never
        # failed for the leases it loses to them (as ThreeSteps' max_attempts).
        max_lapses=int(env.get("REL_MAX_LAPSES", "1000")),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    async with runner:
        emit("READY", os.getpid(), time.time())  # (before its first claim)
        await stop.wait()
    stats = dataclasses.asdict(runner.worker.stats)
    stats["corrupt_records"] = queue.stats.corrupt_records
    emit("STATS", os.getpid(), json.dumps(stats, separators=(",", ":")))
    await store.close()
    return 0


def schedules(env: os._Environ[str]) -> list[Schedule]:
    every = env_float(env, "REL_SCHEDULE_EVERY", 0.0)
    if not every:
        return []
    return [
        Schedule(
            "rel-every", every=timedelta(seconds=every), job=lambda tick: Tick(at=tick.timestamp())
        )
    ]


if __name__ == "__main__":
    handler = _EventHandler(level=logging.WARNING)
    for name in ("stepstone",):
        logging.getLogger(name).addHandler(handler)
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s",
    )
    sys.exit(asyncio.run(main()))

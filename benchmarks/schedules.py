"""What a schedule's overlap policy costs: ``python -m benchmarks.schedules``.

One schedule ticking every ``--every`` seconds (default 60) for ``--ticks``
ticks (default 20), carried by ``--workers`` runners at once (default 1 and
3) on one MemoryStore, every request counted (benchmarks.counting). Each
tick's run sleeps until ``--hold`` seconds after its tick (default 100,
durably: it holds no worker), so every other tick comes while the last run
is live; before the clock moves on, every run whose sleep is over has ended. The clock is
a FakeClock moved ``--step`` seconds at a time (default 10): a worker looks
at the marker at each tick, and once per step while ticks wait behind a
live run (on a real clock it looks every ``BUFFER_LOOK`` second).

For each policy and number of workers, per tick: the runs started, the
requests to the schedule's marker (``schedules/``) and the HEADs of
outcomes (the liveness look; the runs' own requests make a few more), and
every request the store saw, the runs' own included. Prints one JSON line
per configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from stepstone import Job, JobContext, JobRunner, Schedule
from stepstone.records.schedule_marker import decode_marker
from stepstone.runtime import FakeClock, MemoryQueue
from stepstone.store import MemoryStore, NotFound
from stepstone.testing import advance, wait_until

from .counting import CountingStore

POLICIES = ("allow_all", "skip", "buffer_one", "buffer_all", "cancel_other")
START = datetime(2026, 3, 2, 12, 0, tzinfo=UTC).timestamp()


class Started:
    """The ticks whose runs started."""

    def __init__(self) -> None:
        self.ticks: set[str] = set()


class Held(Job[str]):
    NAME: ClassVar[str] = "bench.held"
    at: str
    hold: float

    async def run(self, ctx: JobContext) -> str:
        ctx.state(Started).ticks.add(self.at)
        await ctx.sleep_until(datetime.fromisoformat(self.at) + timedelta(seconds=self.hold))
        return self.at


async def measure(
    policy: str, workers: int, ticks: int, every: float, hold: float, step: float
) -> dict[str, Any]:
    clock = FakeClock(START + 1)
    backing = MemoryStore(clock=clock.now)
    store = CountingStore(backing)
    queue = MemoryQueue(clock=clock)
    seen = Started()
    schedule = Schedule(
        "bench",
        every=timedelta(seconds=every),
        job=lambda tick: Held(at=tick.isoformat(), hold=hold),
        overlap=policy,  # type: ignore[arg-type]
    )
    runners = [
        JobRunner(
            store,
            queue=queue,
            jobs=[Held],
            state=[seen],
            schedules=[schedule],
            clock=clock,
            poll_interval=0.02,
        )
        for _ in range(workers)
    ]
    for runner in runners:
        await runner.start()
    key = runners[0].layout.schedule(schedule.name)

    async def ended() -> bool:
        """Every run started whose sleep is over has its outcome (read uncounted)."""
        for at in list(seen.ticks):
            tick = datetime.fromisoformat(at)
            if tick.timestamp() + hold <= clock.now():
                try:
                    await backing.head(runners[0].layout.outcome(schedule.run_id(tick)))
                except NotFound:
                    return False
        return True

    async def marker_at(tick: float | None) -> bool:
        """The marker is past ``tick``, its start made (read uncounted)."""
        try:
            stored = await backing.get(key)
        except NotFound:
            return False
        marker = decode_marker(stored.data, now=clock.now())
        return tick is None or (marker.tick >= tick and not marker.pending)

    try:
        await wait_until(lambda: marker_at(None), message="first seen")
        store.reset()
        due = START
        while due < START + ticks * every:
            await advance(clock, step)
            due = (clock.now() // every) * every
            await wait_until(lambda d=due: marker_at(d), timeout=30)
            await wait_until(ended, timeout=30)
        started = len(seen.ticks)
        requests = store.snapshot()
        areas = store.areas()
    finally:
        for runner in runners:
            await runner.stop(drain_timeout=0)
            await runner.close()
    per = float(ticks)
    return {
        "policy": policy,
        "workers": workers,
        "ticks": ticks,
        "runs_started_per_tick": round(started / per, 2),
        "marker_per_tick": {
            kind: round(areas.get(f"{kind} schedules", 0) / per, 2) for kind in ("GET", "CPUT")
        },
        "outcome_heads_per_tick": round(areas.get("HEAD outcomes", 0) / per, 2),
        "requests_per_tick": round(sum(requests.values()) / per, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ticks", type=int, default=20)
    parser.add_argument("--every", type=float, default=60.0)
    parser.add_argument("--hold", type=float, default=100.0)
    parser.add_argument("--step", type=float, default=10.0)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 3])
    args = parser.parse_args()
    for workers in args.workers:
        for policy in POLICIES:
            found = asyncio.run(
                measure(policy, workers, args.ticks, args.every, args.hold, args.step)
            )
            print(json.dumps(found), flush=True)


if __name__ == "__main__":
    main()

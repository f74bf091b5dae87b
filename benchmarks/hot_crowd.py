"""A crowd of processes writing one hot object without pause, in virtual time:
how busy the object is, the refusals per accepted write, the least served.

``python -m benchmarks.hot_crowd [--processes 1,3,10,30,100] [--seconds 600]``

Each process writes the object again as soon as its rule lets it: the
worst case for the rule that paces a process's writes to an object that
takes one write a second (stepstone.store.s3.object_turns). Two rules
are compared, each over the same crowd sizes:

- **turns**: :class:`~stepstone.store.s3.object_turns.ObjectTurns`,
  what a hot object's writes wait for;
- **rate**: an :class:`~stepstone.store.s3.send_rate.AdaptiveRate`,
  a partition's send rate, which paced hot objects before (first set by a
  refusal, as a hot object's was).

Time is virtual (:class:`VirtualTime`), so ten minutes of a hundred
processes take seconds and every run is the same; a request takes 40 ms
on its way. The object is a token bucket holding one write, refilled at
one a second, refusing the rest (as ``benchmarks.s3_like`` does with
``object_writes=1``). The engine's own writes are fewer and come in bursts
(a run's start, its end): ``benchmarks.hot_fleet`` measures those.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import itertools
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from stepstone.store.s3.object_turns import ObjectTurns
from stepstone.store.s3.send_rate import AdaptiveRate

LATENCY = 0.04
"""Seconds from a write's turn to its arrival at the object."""

Rule = Literal["turns", "rate"]


class VirtualTime:
    """A clock for many sleepers: it moves to the earliest wake once every
    task is asleep."""

    def __init__(self) -> None:
        self.now = 1000.0
        self._wakes: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        wake = asyncio.get_running_loop().create_future()
        heapq.heappush(self._wakes, (self.now + max(seconds, 0.0), next(self._order), wake))
        await wake

    async def run_for(self, seconds: float) -> None:
        """Let ``seconds`` pass, or less if nobody sleeps any more."""
        end = self.now + seconds
        while self.now < end:
            for _ in range(5):  # let every woken task run until it sleeps again
                await asyncio.sleep(0)
            if not self._wakes:
                return  # nobody sleeps: nothing more will happen
            self.now, _, wake = heapq.heappop(self._wakes)
            wake.set_result(None)


class OneWriteASecond:
    """An object that takes one write a second (a token bucket holding one)."""

    def __init__(self, clock: VirtualTime) -> None:
        self.clock = clock
        self.tokens = 1.0
        self.stamp = clock.now

    def take(self) -> bool:
        self.tokens = min(1.0, self.tokens + (self.clock.now - self.stamp))
        self.stamp = self.clock.now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


@dataclass(frozen=True)
class Crowd:
    """What each process got: accepted and refused writes."""

    accepted: list[int]
    refused: list[int]
    seconds: float

    @property
    def busy(self) -> float:
        """Accepted writes a second: the share of the object's one a second used."""
        return sum(self.accepted) / self.seconds

    @property
    def refusals_per_write(self) -> float:
        return sum(self.refused) / max(1, sum(self.accepted))

    @property
    def least_share(self) -> float:
        """The least served process's accepted writes, over the mean's."""
        return min(self.accepted) * len(self.accepted) / max(1, sum(self.accepted))


async def crowd(processes: int, seconds: float, rule: Rule = "turns") -> Crowd:
    """``processes`` writing the object for ``seconds`` under ``rule``."""
    clock = VirtualTime()
    hot = OneWriteASecond(clock)
    accepted, refused = [0] * processes, [0] * processes

    async def process(n: int) -> None:
        pace: ObjectTurns | AdaptiveRate
        if rule == "turns":
            pace = ObjectTurns(clock=clock, sleep=clock.sleep, rng=random.Random(n))
        else:
            pace = AdaptiveRate(clock=clock, sleep=clock.sleep)
            pace.record(sent=clock.now, refused=True)  # as a hot object's rate began
        while True:
            sent = await pace.acquire()
            await clock.sleep(LATENCY)
            ok = hot.take()
            pace.record(sent=sent, refused=not ok)
            (accepted if ok else refused)[n] += 1

    tasks = [asyncio.create_task(process(n)) for n in range(processes)]
    try:
        await clock.run_for(seconds)
    finally:
        for task in tasks:
            task.cancel()
        ended = await asyncio.gather(*tasks, return_exceptions=True)
    for outcome in ended:
        if not isinstance(outcome, asyncio.CancelledError):
            raise RuntimeError(f"a process of the crowd ended: {outcome!r}")
    return Crowd(accepted, refused, seconds)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", default="1,3,10,30,100")
    parser.add_argument("--seconds", type=float, default=600.0)
    options = parser.parse_args(argv)
    for rule in ("turns", "rate"):
        for processes in (int(p) for p in options.processes.split(",")):
            got = asyncio.run(crowd(processes, options.seconds, rule))
            row = {
                "rule": rule,
                "processes": processes,
                "accepted_per_s": round(got.busy, 2),
                "refusals_per_accepted": round(got.refusals_per_write, 2),
                "least_share": round(got.least_share, 2),
                "least_served": min(got.accepted),
                "most_served": max(got.accepted),
            }
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

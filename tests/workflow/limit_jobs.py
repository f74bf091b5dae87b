"""Job types with concurrency keys and rate limits, and what they report.

In one process a :class:`Tracker` (runner state) counts runs in flight per
key and notes when each started. Across processes, :class:`Serial` appends
its start and end to the file named by ``STEPSTONE_LIMITS_LOG`` (one
``O_APPEND`` write per line, so lines of several processes never mix).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from datetime import timedelta
from typing import ClassVar

from stepstone import Clock, Job, JobContext, RateLimit


class Tracker:
    """Runs in flight per key, the most there ever were, and start times
    (by ``clock``: the runner's, a FakeClock in most tests)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.inside: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.started: list[tuple[str, float]] = []
        self.release = asyncio.Event()
        """Set to let a :class:`Blocker` finish."""

    def enter(self, key: str) -> float:
        now = self.clock.now()
        self.inside[key] += 1
        self.peak[key] = max(self.peak[key], self.inside[key])
        self.started.append((key, now))
        return now

    def leave(self, key: str) -> None:
        self.inside[key] -= 1


class OneAtATime(Job[int]):
    """A short run; at most one per key in flight."""

    NAME: ClassVar[str] = "limits.one"
    max_attempts: ClassVar[int] = 1  # a wait that spent an attempt would fail the run
    key: str
    n: int

    def concurrency_key(self) -> str:
        return self.key

    async def run(self, ctx: JobContext) -> int:
        tracker = ctx.state(Tracker)
        tracker.enter(self.key)
        try:
            for _ in range(3):
                await asyncio.sleep(0.002)
        finally:
            tracker.leave(self.key)
        return self.n


class ThreeAtATime(OneAtATime):
    NAME: ClassVar[str] = "limits.three"
    concurrency_limit: ClassVar[int] = 3


class Blocker(Job[str]):
    """Holds its key's slot until the tracker's ``release`` is set."""

    NAME: ClassVar[str] = "limits.blocker"
    key: str
    n: int = 0

    def concurrency_key(self) -> str:
        return self.key

    async def run(self, ctx: JobContext) -> str:
        tracker = ctx.state(Tracker)
        tracker.enter(self.key)
        try:
            await tracker.release.wait()
        finally:
            tracker.leave(self.key)
        return f"{self.key}{self.n}"


class SleepsHoldingKey(Job[str]):
    """Takes its key's slot, then sleeps (durably) for ``seconds``."""

    NAME: ClassVar[str] = "limits.sleeper"
    key: str
    seconds: float

    def concurrency_key(self) -> str:
        return self.key

    async def run(self, ctx: JobContext) -> str:
        await ctx.sleep(self.seconds)
        return "slept"


class Paced(Job[float]):
    """Two starts a second across the fleet; returns when it started (clock time)."""

    NAME: ClassVar[str] = "limits.paced"
    rate_limit: ClassVar[RateLimit] = RateLimit(2, per=timedelta(seconds=1))
    max_attempts: ClassVar[int] = 1
    n: int
    sleep: float = 0.0

    async def run(self, ctx: JobContext) -> float:
        tracker = ctx.state(Tracker)

        def start() -> float:
            now = tracker.enter("paced")
            tracker.leave("paced")
            return now

        started = await ctx.step("start", start)  # once: a replay after the sleep reads it
        if self.sleep:
            await ctx.sleep(self.sleep)
        return started


class SlowlyPaced(Paced):
    """One start a minute."""

    NAME: ClassVar[str] = "limits.slowly-paced"
    rate_limit: ClassVar[RateLimit] = RateLimit(1, per=timedelta(minutes=1))


class PacedPerKey(Job[float]):
    """One start per second per key."""

    NAME: ClassVar[str] = "limits.paced-per-key"
    rate_limit: ClassVar[RateLimit] = RateLimit(1, per=timedelta(seconds=1))
    key: str
    n: int

    def rate_limit_key(self) -> str:
        return self.key

    async def run(self, ctx: JobContext) -> float:
        tracker = ctx.state(Tracker)
        now = tracker.enter(self.key)
        tracker.leave(self.key)
        return now


class Serial(Job[int]):
    """Appends ``start`` and ``end`` lines to $STEPSTONE_LIMITS_LOG around a
    short pause, each with the run's start number (1 for its first). With
    ``die`` set, the first start of run 0 SIGKILLs its own process right
    after its start line: a holder that crashed."""

    NAME: ClassVar[str] = "limits.serial"
    key: str
    n: int
    die: bool = False

    def concurrency_key(self) -> str:
        return self.key

    async def run(self, ctx: JobContext) -> int:
        log = os.environ["STEPSTONE_LIMITS_LOG"]
        # One run of the key at a time: nobody else writes this run's lines now.
        start = 1 + sum(line.startswith(f"start {self.n} ") for line in _lines(log))
        _append(log, f"start {self.n} {start} {os.getpid()} {time.monotonic():.6f}\n")
        if self.die and self.n == 0 and start == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        await asyncio.sleep(0.02)
        _append(log, f"end {self.n} {start} {os.getpid()} {time.monotonic():.6f}\n")
        return self.n


def _lines(path: str) -> list[str]:
    try:
        with open(path) as lines:
            return lines.read().splitlines()
    except FileNotFoundError:
        return []


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


LIMIT_JOBS = [
    OneAtATime,
    ThreeAtATime,
    Blocker,
    SleepsHoldingKey,
    Paced,
    SlowlyPaced,
    PacedPerKey,
    Serial,
]

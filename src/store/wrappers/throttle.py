"""AdaptiveRates: a store's send rates, one per prefix, cut when S3 says SlowDown.

Why: a partition of a bucket serves a bounded number of requests a second
(S3's limits: docs/storage.md) and answers the rest 503 SlowDown.
Retrying each refused request a few times, quickly, does not lower the rate
at which the process sends: a crowd of workers over the limit stays over
it, its retries add to the load, requests run out of tries, and the
engine retries the whole attempt. What lets the requests through is the
process sending less. This is the AWS SDKs' "adaptive" retry mode
(botocore ``retries={"mode": "adaptive"}``):

- every answer is clocked (a smoothed rate of answers, over half-second
  buckets: botocore's ``RateClocker``);
- a throttling answer (below: which ones) sets the allowed rate to 0.7
  times the rate being sent, and each other answer moves it along a cubic
  curve back to and past the rate at which the last throttle came (CUBIC, RFC 8312, as
  botocore's ``CubicCalculator`` computes it), never above twice the
  measured rate;
- once throttled, every request waits for a token of a bucket refilled at
  the allowed rate (at most one second's worth held, and at least half a
  request a second). Until the first throttling answer there is no bucket:
  a request that was never throttled does not wait, and an answer costs
  one clock reading.

Three departures from botocore, each tried in the fleet simulation
(benchmarks/NOTES.md). **A burst does not cut**: the rate is cut when one
request is refused ``CUT_AFTER`` times in a row, its quick jittered retries
included. A SlowDown that a retry gets past was a burst, which the retry
policy absorbs at the price of one request's delay; cutting for it costs
seconds of sending below what the partition serves, since the rate grows
back slowly near where it was cut (cutting on every refusal, ten simulated
workers drained a backlog markedly slower than without the adaptive rate,
after a handful of SlowDowns). **One cut per congestion event**, as TCP
does, not one per throttling answer: a refusal of a request sent before the
last cut says nothing of the rate since (botocore cuts again for each, so
the hundreds of requests in flight when a crowd crosses a limit, refused
together, cut the rate 0.7^n to its floor). And **waiters see the rate rise**: a waiter that
would sleep longer than ``NAP`` wakes to look again, so a queue formed at a
low rate drains at the rate that follows it.

The rate arithmetic is botocore's own classes, used directly. Not used:
aiobotocore's implementation of the mode (``AsyncClientRateLimiter``,
``AsyncTokenBucket``), although it does rate-limit with one attempt a
request (its hooks, ``before-send`` and ``needs-retry``, run on every
attempt): it lives inside one botocore client and learns of throttling from
botocore's events, so the fleet simulation (``benchmarks/s3_like.py``),
which is no botocore client, could not run it, nor two stores on one
bucket share it; its token bucket waits on an ``asyncio.Condition``, which
binds to the first event loop that waits on it, while a store is used from
several loops one after another; and it cuts per answer (above). The
bucket here hands out numbered tickets instead: a request takes the next
one and sleeps until the bucket has refilled up to it, so it needs no lock
and no loop.

One rate per partition of the bucket, as far as a client can tell:
``AdaptiveRates`` keeps an ``AdaptiveRate`` per first key segment (under
the store's prefix: ``queue``, ``memos``, ``outcomes``), which is how S3
partitions a fresh bucket and what its limits are per. One rate for the
whole store would hold every partition to the rate one of them was cut to,
leaving the others' capacity unused (the engine's partitions carry
different loads: the submits are all on ``queue``, three of a job's five
writes on ``memos``). S3 splits a prefix that stays hot into more
partitions over minutes; until it does, the first segment is the partition.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable

MIN_RATE = 0.5
"""The lowest allowed rate, requests a second (botocore's)."""
CUT_AFTER = 3
"""Tries of one request refused in a row (SlowDown, 429) that cut the rate."""
NAP = 0.5
"""The longest a waiter sleeps before it looks at the rate again, seconds."""


class _BotocoreClock:
    """The clock interface botocore's rate classes read (``current_time()``)."""

    def __init__(self, now: Callable[[], float]) -> None:
        self.current_time = now


class AdaptiveRate:
    """The send rate of one partition: ``sent = await acquire()`` before each
    try of a request, ``record(sent=sent, refused=...)`` after its answer
    (module docstring).

    ``rate`` is the allowed requests a second, or None while no answer was
    a throttling one (then ``acquire`` returns at once). ``clock`` and
    ``sleep`` are for tests.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        from botocore.retries.adaptive import RateClocker
        from botocore.retries.throttling import CubicCalculator

        self._now = clock
        self._sleep = sleep
        self._measured = RateClocker(_BotocoreClock(clock))
        self._cubic = CubicCalculator(starting_max_rate=0, start_time=clock())
        self.rate: float | None = None
        self.throttles = 0
        """Throttling answers recorded."""
        self.cuts = 0
        """Times a throttling answer cut the rate (one per congestion event)."""
        self._last_cut = -math.inf
        self._tickets = 0
        """Tickets handed out, one a request."""
        self._granted = 0.0
        """Tokens the bucket has refilled with, counted the same way: ticket
        ``n`` may be sent once ``_granted >= n``."""
        self._stamp = 0.0

    @property
    def measured(self) -> float:
        """The smoothed rate of answers, a second."""
        return float(self._measured.measured_rate)

    async def acquire(self) -> float:
        """Wait until the next request may be sent; the clock's time then."""
        if self.rate is None:
            return self._now()
        self._refill(self.rate)
        self._tickets += 1
        ticket = self._tickets
        while (wait := (ticket - self._granted) / self.rate) > NAP:
            await self._sleep(NAP)  # then look again: the rate may have changed
            self._refill(self.rate)
        if wait > 0:
            await self._sleep(wait)  # its token is due when it wakes
        return self._now()

    def record(self, *, sent: float, refused: int) -> None:
        """Account for the answer to a try ``acquire`` let go at ``sent``.
        ``refused``: how many tries of this request in a row throttling
        answers (SlowDown, 429) refused, this answer's included; 0 if this
        answer was not one."""
        measured = float(self._measured.record())
        if refused:
            self.throttles += 1
        cut = refused >= CUT_AFTER and sent >= self._last_cut
        if (self.rate is None or refused) and not cut:
            return  # never cut, or a refusal that neither cuts nor is a success
        now = self._now()
        if cut:
            self.cuts += 1
            self._last_cut = now
            current = measured if self.rate is None else min(measured, self.rate)
            new = float(self._cubic.error_received(current, now))
        else:
            new = float(self._cubic.success_received(now))
        if self.rate is None:
            self._stamp, self._granted = now, float(self._tickets)  # it starts empty
        else:
            self._refill(self.rate)  # what accrued at the old rate
        self.rate = max(MIN_RATE, min(new, 2.0 * measured))
        self._granted = min(self._granted, self._tickets + self._capacity())

    def _capacity(self) -> float:
        return max(1.0, self.rate or 0.0)

    def _refill(self, rate: float) -> None:
        now = self._now()
        self._granted = min(
            self._tickets + self._capacity(), self._granted + (now - self._stamp) * rate
        )
        self._stamp = now


class AdaptiveRates:
    """One :class:`AdaptiveRate` per partition, the first segment of a key,
    made on first use; ``clock`` and ``sleep`` are handed to each."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._clock = clock
        self._sleep = sleep
        self.by_partition: dict[str, AdaptiveRate] = {}

    def of(self, key: str) -> AdaptiveRate:
        """The rate of the partition ``key`` (a key or a listing prefix) is in."""
        partition = key.split("/", 1)[0]
        rate = self.by_partition.get(partition)
        if rate is None:
            rate = AdaptiveRate(clock=self._clock, sleep=self._sleep)
            self.by_partition[partition] = rate
        return rate

"""AdaptiveRate: the rate at which a process may send to one partition, slowed by SlowDown.

Why: a partition of a bucket serves a bounded number of requests a second
(S3's limits: docs/storage.md) and answers the rest 503 SlowDown (other
providers 429). Retrying each refused request a few times, quickly, does not
lower the rate at which a process sends: a crowd of workers over the limit
stays over it, its retries add to the load, requests run out of tries, and
the engine retries the whole attempt. What lets the requests through is
sending less.

**A fleet of processes, each on its own.** Nothing tells a process how many
others share a partition, nor what they send: it learns only from its own
answers. The rule is chosen so that the fleet's sum stays near the limit
with few refusals however many processes there are. The AWS SDKs' adaptive
mode (botocore's: cut to 0.7 times the rate on a throttle, grow back along
a CUBIC curve) grows each process's rate by so many requests a second each
second, so a hundred processes probe past the limit a hundred times as hard
as one, and the refusals a second grow with the fleet (benchmarks/NOTES.md,
"A process-wide slow-down"). Here each answer moves the allowed rate ``r``
by a share of itself:

- a success raises it by ``GROWTH / r`` of itself, so a process sending at
  its rate grows it by ``GROWTH`` a second, whatever its share;
- a refusal lowers it by ``GROWTH * (1 - TARGET) / (TARGET * r)``, so it
  settles where ``TARGET`` of its answers are refusals: the fleet's
  refusals are a small share of what the partition serves, for one process
  or a hundred;
- the refusals of one **congestion event** cut it to ``DEEP_CUT`` of itself
  at most: a refusal of a request sent within ``SETTLE`` seconds of the
  event's start says nothing of the rate since (botocore cuts for each, so
  the hundreds of requests in flight when a crowd crosses a limit cut the
  rate 0.7^n to its floor);
- the first rate is what the partition let through lately (this process's
  share of it), which then doubles about every second until the next event
  (as TCP's slow start), since a share measured in a crowd's first seconds
  is a guess;
- the longer since the last event, the faster it grows (twice ``GROWTH``
  after ``QUIET`` seconds, four times after twice as long), so a partition
  that serves more again is used again within a minute or two;
- it also grows by ``SHARE`` requests a second each second, the same for a
  small rate as for a large, so the processes of a crowd converge on like
  shares (growth by a share of itself alone would keep whatever split the
  crowd's first seconds left);
- never above twice the measured rate (headroom a process does not use is
  no evidence of the partition's), never below ``MIN_RATE``.

Until a partition's first throttling answer there is no bucket: a request
that was never throttled does not wait, and an answer costs a clock
reading. Once throttled, every request waits for a token of a bucket
refilled at the allowed rate (``BURST`` seconds' worth held, at least one).
The bucket hands out numbered tickets: a request takes the next one and
sleeps until the bucket has refilled up to it, so it needs no lock and no
event loop of its own (a store is used from several loops one after
another); a waiter that would sleep longer than ``NAP`` wakes to look
again, so a queue formed at a low rate drains at the rate that follows it.
aiobotocore's own adaptive mode lives inside one botocore client (the fleet
simulation, ``benchmarks/s3_like.py``, is no botocore client, nor could two
stores share it) and waits on an ``asyncio.Condition`` bound to one loop.

Rates measured (answers, and those the partition let through) are counts
that decay with a time constant ``TAU``, corrected for the time since the
first answer, so a burst on a quiet partition is measured at its rate from
its first answers (botocore's RateClocker, smoothed over half-second
buckets, lagged a burst).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable

from ..base import is_urgent

MIN_RATE = 0.5
"""The lowest allowed rate, requests a second."""
GROWTH = 0.01
"""How much of itself the allowed rate grows a second without refusals."""
SHARE = 0.05
"""Requests a second the allowed rate also grows a second, whatever it is:
the small rates of a crowd grow faster, as a share of themselves, than the
large, so the processes sharing a partition converge on like shares (AIMD)."""
TARGET = 0.005
"""The share of answers that are refusals where the allowed rate settles."""
START = 0.7
"""How much the allowed rate grows a second (of itself, as a logarithm: 0.7
doubles it) from its first guess until its next congestion event."""
SETTLE = 0.5
"""Seconds after a congestion event begins during which refusals belong to it."""
QUIET = 60.0
"""Seconds without a congestion event after which the growth is twice
GROWTH (and, as the square of the time, four times after twice as long)."""
DEEP_CUT = 0.5
"""The most the refusals of one congestion event cut the allowed rate to, of itself."""
TAU = 2.0
"""The measured rate's time constant, seconds."""
BURST = 0.2
"""Seconds of the allowed rate a bucket holds (at least one request)."""
NAP = 0.5
"""The longest a waiter sleeps before it looks at the rate again, seconds."""


class AdaptiveRate:
    """The send rate of one partition: ``sent = await acquire()`` before each
    try of a request, ``record(sent=sent, refused=...)`` after its answer
    (module docstring).

    ``rate`` is the allowed requests a second, or None while no answer was
    a throttling one (then ``acquire`` returns at once). Made with a
    ``rate``, requests wait for it from the first, and it moves as after a
    congestion event: a process told its share of a limit (what that would
    buy a fleet: benchmarks/fleet_oracles.py). ``clock`` and ``sleep`` are
    for tests.
    """

    def __init__(
        self,
        *,
        rate: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._now = clock
        self._sleep = sleep
        self.rate: float | None = None
        self.throttles = 0
        """Throttling answers recorded."""
        self.events = 0
        """Congestion events: refusals of requests sent after the last one began."""
        self._answers = _Decaying()
        self._accepted = _Decaying()
        self._event_began = -math.inf
        self._starting = True
        """Whether the rate still grows at START, from its first guess, until
        the next congestion event."""
        self._floor = 0.0
        """The lowest the refusals of the current event may cut the rate to."""
        self._tickets = 0
        """Tickets handed out, one a request."""
        self._granted = 0.0
        """Tokens the bucket has refilled with, counted the same way: ticket
        ``n`` may be sent once ``_granted >= n``."""
        self._stamp = 0.0
        if rate is not None:
            self.rate = self._floor = max(rate, MIN_RATE)
            self._starting = False
            self._stamp = clock()
            self._event_began = self._stamp - SETTLE  # (a first refusal begins an event)

    def forget(self) -> None:
        """Go back to unthrottled: the refusals so far were not this
        partition's (a hot object's: stepstone.store.s3.hot_objects)."""
        self.rate = None
        self.throttles = self.events = 0
        self._starting = True
        self._event_began = -math.inf

    @property
    def measured(self) -> float:
        """Answers a second, lately (module docstring)."""
        return self._answers.rate(self._now())

    async def acquire(self) -> float:
        """Wait until the next request may be sent; the clock's time then.
        A request sent :func:`first` waits for nothing."""
        if self.rate is None or is_urgent():
            return self._now()
        self._refill(self.rate)
        self._tickets += 1
        ticket = self._tickets
        rate = self.rate
        while (wait := (ticket - self._granted) / rate) > NAP:
            await self._sleep(NAP)  # then look again: the rate may have changed
            if (allowed := self._allowed()) is None:
                return self._now()  # forgotten meanwhile: unthrottled, go now
            rate = allowed
            self._refill(rate)
        if wait > 0:
            await self._sleep(wait)  # its token is due when it wakes
        return self._now()

    def _allowed(self) -> float | None:
        return self.rate  # (read anew after an await: forget() may have run)

    def record(self, *, sent: float, refused: bool) -> None:
        """Account for the answer to a try ``acquire`` let go at ``sent``;
        ``refused``: it was a throttling answer (SlowDown, 429)."""
        now = self._now()
        self._answers.add(now, since=sent)
        if not refused:
            self._accepted.add(now, since=sent)
            if self.rate is None:
                return
        measured = max(self._answers.rate(now), MIN_RATE)
        if self.rate is None:
            # What the partition let through lately is this process's share of it.
            self.rate = self._floor = max(self._accepted.rate(now), MIN_RATE)
            self._event_began = now
            self._stamp, self._granted = now, float(self._tickets)  # it starts empty
        else:
            self._refill(self.rate)  # what accrued at the old rate
        if refused:
            self.throttles += 1
            self.rate = self._cut(sent, now)
        else:
            self.rate *= math.exp(self._growth(now) / self.rate)
            self.rate += SHARE / self.rate
        self.rate = max(MIN_RATE, min(self.rate, 2.0 * measured))
        self._granted = min(self._granted, self._tickets + self._capacity())

    def _growth(self, now: float) -> float:
        """How much of itself the rate grows a second now (module docstring)."""
        if self._starting:
            return START
        return GROWTH * (1.0 + ((now - self._event_began) / QUIET) ** 2)

    def _cut(self, sent: float, now: float) -> float:
        """The rate after a refusal of a try sent at ``sent`` (module docstring)."""
        assert self.rate is not None
        cut = self._growth(now) * (1.0 - TARGET) / (TARGET * self.rate)
        if sent >= self._event_began + SETTLE:  # sent since the last event settled: a new one
            self.events += 1
            self._starting = False
            self._event_began = now
            self._floor = self.rate * DEEP_CUT
        return max(self._floor, self.rate * math.exp(-cut))

    def _capacity(self) -> float:
        return max(1.0, BURST * (self.rate or 0.0))

    def _refill(self, rate: float) -> None:
        now = self._now()
        self._granted = min(
            self._tickets + self._capacity(), self._granted + (now - self._stamp) * rate
        )
        self._stamp = now


class _Decaying:
    """A rate of events a second: a count that decays with time constant
    ``TAU``, corrected for the time since the first event (module docstring)."""

    def __init__(self) -> None:
        self._first: float | None = None
        self._count = 0.0
        self._at = 0.0

    def add(self, now: float, *, since: float) -> None:
        if self._first is None:
            self._first = self._at = min(since, now)
        self._count = self._count * math.exp(-(now - self._at) / TAU) + 1.0 / TAU
        self._at = now

    def rate(self, now: float) -> float:
        if self._first is None:
            return 0.0
        count = self._count * math.exp(-(now - self._at) / TAU)
        return count / (1.0 - math.exp(-max(now - self._first, 0.05) / TAU))

"""ObjectTurns: when one process may next write a hot object, shared with
processes it knows nothing of.

Why not a send rate, as a partition has (stepstone.store.s3.send_rate):
a hot object takes about one write a second (GCS), and a rate that low
learns too slowly to share. Each of W processes writing the object holds a
rate of its own, and the object takes their sum: for the sum to stay near
one a second each rate must fall to ``1/W``, far below where a rate can
probe back up within a run's time, so either the floor is high and W
processes together stay over the object for as long as they run (a storm
of refusals growing with W), or it is low and a process alone, or one of
three, sits idle while the object could take its writes.

A hot object is a medium shared by stations that cannot hear each other,
which is Ethernet's problem, and this is Ethernet's answer (binary
exponential backoff), made fairer:

- a process writes the object at most once an **interval** (one second,
  the pace GCS documents);
- each refusal of its writes adds one to its **contention** (at most
  ``MOST_DOUBLINGS``), and after each answer the next try waits a random
  time between the interval and the interval times two to the
  contention (the object is seldom free again sooner): however many
  processes write the object, their tries spread out until about one an
  interval finds it free;
- the contention falls by one for each ``EASING`` seconds without a
  refusal, not when a write is accepted: with Ethernet's rule (back to
  nothing at a success) a process served once is paced just as the object
  refills and keeps it from every other, whose waits have grown, and
  taking one off at each success still starved some. A contention that
  eases with time is about the same in every process of a crowd, so none
  is kept from the object for long;
- after an accepted write it also waits the interval and up to
  ``YIELD`` of it more, so that a process with writes queued leaves the
  object free now and then for one that waited.

``benchmarks.hot_crowd`` puts this rule beside a send rate's in a crowd
writing one object without pause (docs/performance.md, "Hot objects in a
fleet").

A conditional write that waited for its turn reads the object's etag
before it is sent, so a turn is not spent on a write bound to lose
(stepstone.store.s3.conflicts.confirm_precondition). A write sent
:func:`~stepstone.store.base.urgent` (a lease's renewal) does
not wait behind the backoff, as it would not behind a partition's rate, but
it does keep the object's **pace**: an interval after this process's last
accepted write or refusal, before which the object would refuse it anyway
(a renewal sent at once after its claim, quickly retried, was refused at
every try and the lease counted as not renewed).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable

from ..base import is_urgent
from .send_rate import NAP

INTERVAL = 1.0
"""The least seconds between one process's writes to a hot object (GCS:
about one write a second)."""
MOST_DOUBLINGS = 6
"""The highest contention: the wait after an answer is at most the
interval times two to it."""
EASING = 5.0
"""Seconds without a refusal for each step the contention falls by."""
YIELD = 0.5
"""After an accepted write, the most of an interval waited beyond the interval."""


class ObjectTurns:
    """The turns of one hot object's writes in one process:
    ``sent = await acquire()`` before each try, ``record(sent=sent,
    refused=...)`` after its answer (module docstring). ``clock``, ``sleep``
    and ``rng`` are for tests."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self._now = clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        self.contention = 0
        self._eased_at = 0.0
        """When the contention last rose or fell (while it is above nothing)."""
        self.throttles = 0
        """Throttling answers recorded."""
        self._next = -float("inf")
        """The earliest clock time the next write may be sent."""
        self._paced = -float("inf")
        """The earliest clock time a write sent first may be sent (the pace alone)."""

    async def acquire(self) -> float:
        """Wait for this process's next turn to write the object; the clock's
        time then. A write sent first waits for nothing."""
        return (await self.turn())[0]

    async def turn(self) -> tuple[float, bool]:
        """As :meth:`acquire`, and whether it waited for the turn."""
        first = is_urgent()
        waited = False
        while (wait := (self._paced if first else self._next) - self._now()) > 0:
            waited = True
            await self._sleep(min(wait, NAP))  # then look again: an answer may have moved it
        now = self._now()
        self._later(now + INTERVAL)
        self._paced = max(self._paced, now + INTERVAL)
        return now, waited

    def give_back(self, sent: float) -> None:
        """The turn taken at ``sent`` was not used (the write was found bound
        to lose before it was sent): the next write may go at once."""
        self._next = min(self._next, sent)
        self._paced = min(self._paced, sent)

    def record(self, *, sent: float, refused: bool) -> None:
        """Account for the answer to a write ``acquire`` let go at ``sent``;
        ``refused``: a throttling answer (429, SlowDown)."""
        now = self._now()
        self._paced = max(self._paced, now + INTERVAL)
        if refused:
            self.throttles += 1
            self.contention = min(MOST_DOUBLINGS, self.contention + 1)
            self._eased_at = now
        else:
            steps = int((now - self._eased_at) / EASING) if self.contention else 0
            if steps:
                self.contention = max(0, self.contention - steps)
                self._eased_at = now
            self._later(now + INTERVAL * self._rng.uniform(1.0, 1.0 + YIELD))
        if self.contention:
            self._later(now + INTERVAL * self._rng.uniform(1.0, 2.0**self.contention))

    def _later(self, at: float) -> None:
        self._next = max(self._next, at)

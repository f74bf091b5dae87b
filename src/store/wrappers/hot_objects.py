"""HotObjects: single objects a store refuses writes to faster than it allows.

Why: a provider may limit the writes to one object, whatever the partition
serves: GCS takes about one a second per object and answers the rest 429.
The objects many processes write (a concurrency key's slots, a rate
limit's state, a schedule's marker: docs/storage.md, "Hot objects") meet it
first. Left to the partition's send rate, those refusals would cut the rate
of every other key of the partition, and each write to the hot object
would still go out as fast as its retries allow, a storm of refusals for
the one key.

So a key whose writes are refused ``HOT_AFTER`` times within ``WINDOW``
seconds gets a send rate of its own (an
:class:`~stepstone.store.wrappers.send_rate.AdaptiveRate`, which learns the
object's limit as a partition's is learnt), and its refusals no longer
count against its partition: writes to it wait for their turn (about one a
second on GCS), the rest of the partition is not held up. One warning
names the object, once per process, with what it means; the limit is the
provider's, documented in docs/storage.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from .send_rate import AdaptiveRate

logger = logging.getLogger("stepstone.store")

HOT_AFTER = 4
"""Refused writes to one key within WINDOW that make it a hot object."""
WINDOW = 10.0
"""Seconds over which a key's refused writes are counted."""
WATCHED = 256
"""Keys whose recent refusals are remembered (the most recently refused)."""


class HotObjects:
    """The hot objects of one bucket, as the process found them (module docstring)."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._clock = clock
        self._sleep = sleep
        self._refused: OrderedDict[str, list[float]] = OrderedDict()
        self.rates: dict[str, AdaptiveRate] = {}
        """The send rate of each hot object, by its key in the bucket."""

    def rate(self, key: str) -> AdaptiveRate | None:
        """The send rate of ``key``'s writes, if it is a hot object."""
        return self.rates.get(key)

    def refused(self, key: str, *, location: str) -> AdaptiveRate | None:
        """Note a write to ``key`` refused by throttling; its rate if that
        makes it a hot object (warned about once, naming ``location``)."""
        now = self._clock()
        times = [t for t in self._refused.pop(key, []) if t > now - WINDOW]
        times.append(now)
        if len(times) < HOT_AFTER:
            self._refused[key] = times
            while len(self._refused) > WATCHED:
                self._refused.popitem(last=False)
            return None
        rate = self.rates[key] = AdaptiveRate(clock=self._clock, sleep=self._sleep)
        rate.record(sent=now, refused=True)  # its first rate: what the object let through
        logger.warning(
            "%s: writes to this one object were refused %d times in %.0f s (429/SlowDown): "
            "the store limits writes per object (GCS allows about one a second). stepstone "
            "now sends this object's writes at the rate it accepts, so what waits on it "
            "(a concurrency key's slot, a rate limit's turn, a schedule's tick) waits "
            "longer; see docs/storage.md, Hot objects",
            location,
            len(times),
            WINDOW,
        )
        return rate

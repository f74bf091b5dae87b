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
seconds, most of its tries, while the other keys of its partition were
written meanwhile and mostly got through, gets turns of its own (an
:class:`~stepstone.store.s3.object_turns.ObjectTurns`: the object's
pace, and a backoff that spreads the processes sharing it), and its
refusals no longer count against its partition: writes to it wait for
their turn (about one a second on GCS), the rest of the partition is not
held up. One warning names the object, once per process, with what it
means; the limit is the provider's, documented in docs/storage.md.

On a store known to limit every object (GCS: ``S3Store(object_turns=True)``)
every object takes turns from its first write. Found one by one, the
objects one process writes a few times within a second (a queue record:
its claim, a renewal, its ack) would each be refused a few times first,
too few to be told apart from a throttled partition, whose rate they would
cut instead. So a store that was not told is found out by what its
refusals fall on: a partition throttled refuses a write whatever was
written before it, a store limiting each object refuses the writes to
objects written within the second. When, in a partition refusing lately,
``EVERY_AFTER`` writes to keys this process had written within
``INTERVAL`` were refused, nearly all of them, while its other writes
there mostly went through, every object takes turns from then on, with one
warning saying to tell the store so.

The neighbours are what tell a hot object from a throttled partition. When
a crowd crosses a partition's limit every key is refused alike, and a key
whose retries were refused four times within the congestion is unlucky,
not limited alone: taken for hot, it warned of a per-object limit that is
not there, and its refusals stopped slowing the partition that sent them.
So the neighbours' answers are counted over the same span as the key's
(from its first answer counted), not over the whole window, where a short
congestion among many accepted writes would look like calm; where too few
neighbours were written in that span to compare with (a process sends a
small share of a crowd's writes), the key is hot only if none of them was
refused since the partition's refusals began. A partition's answers are
kept from its first refusal until ``WINDOW`` passes without one, so a store
never throttled pays nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable

from .object_turns import INTERVAL, ObjectTurns

logger = logging.getLogger("stepstone.store")

HOT_AFTER = 4
"""Refused writes to one key within WINDOW that make it a hot object."""
WINDOW = 10.0
"""Seconds over which writes and their refusals are counted."""
MOSTLY_REFUSED = 0.5
"""The least share of a hot object's tries within WINDOW that were refused."""
ALONE = 0.25
"""The most the rest of a hot object's partition may be refused meanwhile, as
a share of its answers, relative to the object's own share."""
WATCHED = 256
"""Keys whose recent answers are remembered (the most recently refused)."""
EVERY_AFTER = 8
"""Refused writes within WINDOW to keys written by this process within
INTERVAL before that show the store limits every object (module docstring)."""
EVERY_REFUSED = 0.8
"""The least share of those writes that were refused."""
EVERY_APART = 0.4
"""The most the process's other writes there may be refused meanwhile, as a
share of their answers, relative to those writes' share: the others include
writes to objects other processes had just written (a claim of a record
just created), refused as well on such a store."""
EVERY_KEPT = 4096
"""Objects whose turns are kept when every object takes turns (the most
recently written): one forgotten only loses the pace of its next write."""


class _Answers:
    """Answers to writes within WINDOW seconds, oldest first: when, and
    whether refused."""

    def __init__(self) -> None:
        self.times: deque[tuple[float, bool]] = deque()
        self.refused = 0
        self.ever_refused = 0
        """Refusals since this began, WINDOW or not."""

    def add(self, now: float, refused: bool) -> None:
        self.times.append((now, refused))
        self.refused += refused
        self.ever_refused += refused
        self.expire(now)

    def expire(self, now: float) -> None:
        """Drop the answers older than WINDOW."""
        while self.times and self.times[0][0] <= now - WINDOW:
            _, old = self.times.popleft()
            self.refused -= old

    @property
    def total(self) -> int:
        return len(self.times)

    def since(self, start: float) -> tuple[int, int]:
        """(answers, refused) from ``start`` on."""
        total = refused = 0
        for at, was_refused in reversed(self.times):
            if at < start:
                break
            total += 1
            refused += was_refused
        return total, refused


class _Partition:
    """A refusing partition's answers within WINDOW: all of them, and those
    to keys this process had written within INTERVAL before (``again``)."""

    def __init__(self) -> None:
        self.all = _Answers()
        self.again = _Answers()

    def add(self, now: float, refused: bool, *, again: bool) -> None:
        self.all.add(now, refused)
        if again:
            self.again.add(now, refused)
        else:
            self.again.expire(now)

    def every_object_limited(self) -> bool:
        """Whether the refusals fall on the writes that follow this
        process's own within the second, not on the others (module docstring)."""
        again = self.again
        if again.refused < EVERY_AFTER:
            return False
        share = again.refused / again.total
        others = self.all.total - again.total
        if share < EVERY_REFUSED or others < EVERY_AFTER:
            return False
        return (self.all.refused - again.refused) / others <= EVERY_APART * share


class HotObjects:
    """The hot objects of one bucket, as the process found them (module docstring)."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        every_object: bool = False,
    ) -> None:
        self._clock = clock
        self._sleep = sleep
        self.every_object = every_object
        """Every object takes turns, hot or not: a store that limits the writes
        to each one (``S3Store(object_turns=True)``; module docstring)."""
        self._recent: OrderedDict[str, ObjectTurns] = OrderedDict()
        """The turns of the objects written lately, when every object takes turns."""
        self._partitions: dict[str, _Partition] = {}
        """Each partition's answers, from its first refusal until WINDOW without one."""
        self._written: OrderedDict[str, float] = OrderedDict()
        """When this process's writes accepted within INTERVAL were answered, by key."""
        self._keys: OrderedDict[str, _Answers] = OrderedDict()
        self.rates: dict[str, ObjectTurns] = {}
        """The turns of each hot object, by its key in the bucket."""

    def rate(self, key: str) -> ObjectTurns | None:
        """The turns of ``key``'s writes, if it is a hot object (every object
        is one when :attr:`every_object`)."""
        turns = self.rates.get(key)
        if turns is not None or not self.every_object:
            return turns
        turns = self._recent.pop(key, None)
        if turns is None:
            turns = ObjectTurns(clock=self._clock, sleep=self._sleep)
        self._recent[key] = turns
        while len(self._recent) > EVERY_KEPT:
            self._recent.popitem(last=False)
        return turns

    def answered(
        self, key: str, *, partition: str, refused: bool, location: str, creates: bool = False
    ) -> ObjectTurns | None:
        """Note the answer to a write to ``key`` (not a hot object yet) in
        ``partition``; ``refused``: by throttling; ``creates``: a
        create-if-absent, which counts among the partition's writes but
        cannot make its key hot (an object not there yet is over no limit
        of its own: stepstone.store.s3.throttle.Sending). The key's
        turns if this makes it a hot object (warned about once, naming
        ``location``)."""
        now = self._clock()
        again = self._written_lately(key, now, refused)
        found = self._partitions.get(partition)
        if found is None:
            if not refused:
                return None  # a partition never refused lately: nothing to tell apart
            found = self._partitions[partition] = _Partition()
        found.add(now, refused, again=again)
        part = found.all
        if not part.refused:
            del self._partitions[partition]  # WINDOW without a refusal there
            return None
        if refused and again and not self.every_object and found.every_object_limited():
            return self._every_object_found(key, location, found.again.refused)
        if creates:
            return None
        mine = self._keys.pop(key, None)
        if mine is None:
            if not refused:
                return None
            mine = _Answers()
        mine.add(now, refused)
        if not (refused and self._hot(mine, part)):
            self._keys[key] = mine
            while len(self._keys) > WATCHED:
                self._keys.popitem(last=False)
            return None
        rate = self.rates[key] = ObjectTurns(clock=self._clock, sleep=self._sleep)
        rate.record(sent=now, refused=True)  # its first wait
        logger.warning(
            "%s: writes to this one object were refused %d times in %.0f s (429/SlowDown) "
            "while its neighbours' went through: the store limits writes per object (GCS "
            "allows about one a second). stepstone now sends this object's writes at the "
            "pace it accepts, so what waits on it (a concurrency key's slot, a rate limit's "
            "turn, a schedule's tick) waits longer; see docs/storage.md, Hot objects",
            location,
            mine.refused,
            WINDOW,
        )
        return rate

    def _every_object_found(self, key: str, location: str, refused: int) -> ObjectTurns | None:
        """Every object takes turns from now on (module docstring); the turns
        of ``key``, whose refusal told, with its first wait."""
        self.every_object = True
        logger.warning(
            "%s: writes to objects this process had written within the second were refused "
            "%d times in %.0f s (429/SlowDown) while its other writes mostly went through: the "
            "store limits writes per object (GCS allows about one a second). stepstone now "
            "paces the writes to every object of this store; to do so from the start, add "
            "object_turns=true to the store URL (or S3Store(object_turns=True)); see "
            "docs/storage.md, Hot objects",
            location,
            refused,
            WINDOW,
        )
        turns = self.rate(key)
        assert turns is not None
        turns.record(sent=self._clock(), refused=True)
        return turns

    def _written_lately(self, key: str, now: float, refused: bool) -> bool:
        """Whether this process wrote ``key`` (accepted) within INTERVAL
        before ``now``; an accepted write is remembered for the next."""
        written = self._written
        while written and next(iter(written.values())) <= now - INTERVAL:
            written.popitem(last=False)
        again = key in written
        if not refused:
            written[key] = now
            written.move_to_end(key)
        return again

    @staticmethod
    def _hot(mine: _Answers, part: _Answers) -> bool:
        """Whether the key's answers ``mine`` make it hot beside the rest of
        its partition's ``part``, over the same span (module docstring)."""
        if mine.refused < HOT_AFTER:
            return False
        share = mine.refused / mine.total
        if share < MOSTLY_REFUSED:
            return False
        total, refused = part.since(mine.times[0][0])
        others, others_refused = total - mine.total, refused - mine.refused
        if others >= HOT_AFTER:
            return others_refused / others <= ALONE * share
        # Too few neighbours written meanwhile to compare with (one process's
        # share of a crowd's writes): hot if none of them was refused since
        # the partition's refusals began, as a partition throttled has.
        return part.ever_refused == mine.ever_refused

"""When a StoreQueue lists its prefix again, and how much it reads and picks from.

A LIST request is what finds other processes' work, and on S3 it is billed
like a PUT (12.5 GETs), so listings are paced:

- **By the last listing's size.** After a listing of ``p`` pages the next
  waits ``p * scan_interval``, so a big backlog is not re-listed every second.
- **Slower while idle.** From the second listing in a row that found nothing
  new, each doubles the wait, up to ``idle_scan_max``: an idle worker lists
  for nothing, and pays for each listing (docs/queue.md prices it). Work this
  process makes, or a listing that finds a change, restores the pace.
- **Sooner when the cache has gone stale.** Each swap refused on a version the
  cache held from before the claim began counts as one request wasted, like a
  LIST page; each record read from the unread line that turned out taken
  counts as a twelfth. Once the waste adds up to a listing, listing is the
  cheaper way on.

- **Slower in a crowd.** Each record this process tries for, by claiming it
  or reading it from the unread line, it either wins or finds taken by
  another; ``share`` follows the fraction it wins (a moving average over
  the last ten or so; while it reads a slice, below, the fraction times the
  slice's width, since the slice already left it a part of the records).
  W processes that all see every new record each win about one in W, and
  each lists 1/``share`` times slower, so the whole fleet lists about as
  often as one process would, instead of W times as often. The slowed wait
  is at most ``CROWD_WAIT`` times ``idle_scan_max``.
- **Its own slice in a crowd.** A listing shows every new record to every
  process that lists; all of them reading it would cost a GET each and a
  lost race each but one. With a ``share`` under a third, a process reads
  only the new records whose ids hash into a slice of its own, three times
  its share wide, placed at random at each listing (:meth:`ScanPacing.slice`):
  the slices of a crowd cover each record about three times. A record
  outside the slice is read when a later listing shows it unchanged: no
  one whose slice it fell in took it. So a process whose peers all stopped
  finds the work they left within two of its slowed listings, and each
  record it wins there raises its ``share`` by a fifth, back to its own pace.

Two more paces live here because they follow the same waste. Under
contention, processes holding the same cache race for its head, so a claim
that lost a race doubles ``spread`` (the next picks its ``n`` at random from
the first ``n * spread`` in line) and a clean one halves it. And a read of the
unread line that found records taken means this process ran into another's
stretch: the next read is a probe of a few records, and each batch found free
doubles it, up to ``fetch_limit``.
"""

from __future__ import annotations

import math
import random
import time
import zlib
from collections.abc import Callable, Iterable

from stepstone.store.base import DEFAULT_PAGE_SIZE

READS_PER_LISTING_PAGE = 12
"""What a listing page costs in reads: on S3 a LIST request is billed 12.5
times a GET (and a conditional PUT is billed like a LIST)."""

PROBE_READS = 4
"""Records read where the unread line jumped to, to see whether it is free."""

MAX_SPREAD = 16
"""Bound on the claim window's widening under contention (see ``spread``)."""

SHARE_WEIGHT = 0.1
"""How much each record tried for moves ``share``: a moving average over
about the last ten."""

CROWD_WAIT = 4
"""The longest a crowd slows listings to, in ``idle_scan_max``."""

SLICE_COVER = 3
"""A crowd's slices, in shares: how many processes' slices hold a record."""

Slice = tuple[float, float]
"""``(start, width)`` on the circle of id hashes, [0, 1)."""


class ScanPacing:
    """The pace of one StoreQueue instance's listings, reads and picks; see
    the module docstring."""

    def __init__(
        self,
        scan_interval: float,
        idle_scan_max: float,
        fetch_limit: int,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.scan_interval = scan_interval
        self.idle_scan_max = max(scan_interval, idle_scan_max)
        self.fetch_limit = fetch_limit
        self._monotonic = monotonic
        self.spread = 1
        """How many times ``n`` of the due jobs a claim picks from at random:
        1 (strict order) until claims lose races, doubled per claim that does."""
        self.read_batch = fetch_limit
        """The most records the next read of the unread line may read."""
        self.refusals = 0
        """Swaps refused, ever: a claim that sees this grow lost a race."""
        self.share = 1.0
        """The fraction of the records this process tried for that it won
        (see the module docstring: slower in a crowd)."""
        self._width = 1.0
        """The width of the last listing's slice (1: no slice)."""
        self._next_scan = -math.inf
        self._pages = 1
        self._idle_scans = 0
        """Listings in a row that found nothing new: from the second on, each
        doubles the wait before the next, up to ``idle_scan_max``."""
        self._wasted = 0
        """Swaps refused on a stale cache since the last listing."""
        self._wasted_reads = 0
        """Records read from the unread line since the last listing that turned
        out taken (claimed elsewhere or gone)."""

    def list_first(self, began: float, short: bool, confirmed: Iterable[float]) -> bool:
        """Whether a claim that began at ``began`` (monotonic) lists before it
        picks: the cache is stale, or a listing is due and the cache is
        ``short`` of due jobs or holds some not ``confirmed`` within
        ``scan_interval``. The first claim always lists."""
        return self.stale() or (
            began >= self._next_scan
            and (short or any(c < began - self.scan_interval for c in confirmed))
        )

    def stale(self) -> bool:
        """Whether what a stale cache has wasted since the last listing adds up
        to what listing again would cost."""
        wasted = self._wasted + self._wasted_reads / READS_PER_LISTING_PAGE
        return wasted >= max(1, self._pages)

    def refused(self, confirmed: float, fresh_since: float) -> None:
        """Count a claim's swap that was refused, on a version last confirmed
        at ``confirmed``. Only a version the cache held from before the claim
        began (``fresh_since``) says the cache is stale: one read or listed by
        the claim itself was as fresh as another listing would make it, and
        losing it was a race no listing would have prevented."""
        self.refusals += 1
        if confirmed < fresh_since:
            self._wasted += 1

    def tried(self, won: int, lost: int) -> None:
        """Records tried for: ``won`` claimed here, ``lost`` taken by another
        first (a refused claim, or read from the unread line and found taken)."""
        for outcome in [0.0] * lost + [self._width] * won:
            self.share += SHARE_WEIGHT * (outcome - self.share)

    def slice(self) -> Slice | None:
        """The slice of new records the next listing reads, or None for all
        of them (a share of a third or more)."""
        width = SLICE_COVER * self.share
        self._width = min(1.0, width)
        return None if width >= 1 else (random.random(), width)

    def claimed(self, contended: bool) -> None:
        """A claim ended; ``contended`` if it lost a race."""
        if contended:
            self.spread = min(self.spread * 2, MAX_SPREAD)
        else:
            self.spread = max(1, self.spread // 2)

    def read(self, taken: int) -> None:
        """Records were read from the unread line, ``taken`` of them taken since listed."""
        if taken:
            self._wasted_reads += taken
            self.read_batch = PROBE_READS
        else:
            self.read_batch = min(self.read_batch * 2, self.fetch_limit)

    def listed(self, count: int, changed: bool) -> None:
        """A listing of ``count`` keys ended; ``changed`` if it found anything new."""
        pages = max(1, math.ceil(count / DEFAULT_PAGE_SIZE))
        self._pages = pages
        self._wasted = 0
        self._wasted_reads = 0
        self._idle_scans = 0 if changed else self._idle_scans + 1
        least = pages * self.scan_interval
        wait = least * 2 ** min(max(0, self._idle_scans - 1), 30)
        wait = min(wait, max(least, self.idle_scan_max))
        crowded = min(wait / max(self.share, 1e-3), CROWD_WAIT * self.idle_scan_max)
        self._next_scan = self._monotonic() + max(wait, crowded)

    def work_made(self) -> None:
        """This process made work: look for more at the usual pace."""
        self._idle_scans = 0

    def list_soon(self) -> None:
        """Something changed that only a listing will show (notices of new
        records were lost): the next claim short of due jobs lists."""
        self._idle_scans = 0
        self._next_scan = -math.inf


def in_slice(run_id: str, part: Slice) -> bool:
    """Whether ``run_id`` hashes into ``part``."""
    start, width = part
    return (zlib.crc32(run_id.encode()) / 2**32 - start) % 1.0 < width

"""Finding other processes' work: listing the jobs prefix, and reading what
a listing showed as claims need it.

A LIST is what finds records this instance did not write, and a GET is what
reads one, and both are billed, so neither happens before a claim needs it
(:mod:`stepstone.runtime.store_queue.pacing` decides when to list and how
much to read). A listing confirms what the cache knows, guesses what it can
from sizes (:mod:`stepstone.runtime.store_queue.size_hints`), drops what is
gone, and lines up the rest to be read in about the order a claim would take
them (:mod:`stepstone.runtime.store_queue.read_line`). In a crowd, a
listing leaves new records outside this instance's slice to the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Collection

from stepstone.store.base import ObjectInfo

from ..clock import Clock
from .pacing import ScanPacing, in_slice
from .read_line import Listed, ReadLine
from .record_io import RecordIO
from .records import HELD_CLASS, CorruptRecord, StoredJob, listed_bucket, listed_priority
from .size_hints import claimed_elsewhere, guess_changed, listed_place, renewed_elsewhere

MAX_HINTS = 10_000
"""New records noticed and not read yet, at most; past it a listing finds them."""

READ_PER_CLASS = 4
"""Records of a class of fairness key the cache has no due job of, read at a
claim (:meth:`Discovery.read_other_classes`)."""


class Discovery:
    """One instance's listings of the prefix and reads of the unread line."""

    def __init__(
        self,
        io: RecordIO,
        pacing: ScanPacing,
        clock: Clock,
        *,
        priority_aging: float,
        fetch_limit: int,
        claim_jitter: float,
    ) -> None:
        self._io = io
        self._cache = io.cache
        self._pacing = pacing
        self._clock = clock
        self._priority_aging = priority_aging
        self._unread = ReadLine(fetch_limit, claim_jitter)
        """What the last listing showed that the cache does not know, read as
        claims need them (:meth:`read_ahead`)."""
        self._passed: dict[str, str] = {}
        """New records the last listing left to others (outside this
        instance's slice), by etag: read if the next shows them unchanged."""
        self._scan_lock = asyncio.Lock()
        self._scan_epoch = 0
        self._hinted: dict[str, None] = {}
        """Ids of new records the store told of (:meth:`hint`), in order, not read yet."""

    @property
    def unread(self) -> bool:
        """Whether the last listing showed records not read yet."""
        return bool(self._unread)

    @property
    def hinted(self) -> bool:
        """Whether the store told of new records not read yet."""
        return bool(self._hinted)

    def hint(self, run_id: str) -> None:
        """The store told of a new record (a notice): the next claim short
        of due jobs reads it, without a listing. Too many unread, and the
        next listing finds them instead."""
        if len(self._hinted) >= MAX_HINTS:
            self._hinted.clear()
            self._pacing.list_soon()
            return
        self._hinted[run_id] = None

    async def read_hinted(self) -> None:
        """Read the records the store told of that the cache does not know
        yet (one GET each; this instance's own writes it knows already)."""
        ids = [run_id for run_id in self._hinted if self._cache.get(run_id) is None]
        self._hinted.clear()
        await asyncio.gather(*(self._refresh(run_id, None) for run_id in ids))

    async def scan(self, lease_hint: float) -> None:
        """List the jobs prefix: confirm what the cache knows, guess what it
        can from sizes (others' leases taken to be ``lease_hint`` long), line
        up the rest to be read as claims need them, and drop entries whose
        objects are gone. Concurrent callers share one listing."""
        epoch = self._scan_epoch
        async with self._scan_lock:
            if self._scan_epoch != epoch:
                return  # someone listed while we waited: their cache is ours
            now = self._clock.now()
            before = {run_id: seen.etag for run_id, seen in self._cache.items()}
            listed: set[str] = set()
            unread: list[Listed] = []
            passed: dict[str, str] = {}
            part = self._pacing.slice()
            count = 0
            async for info in self._io.store.scan(self._io.jobs):
                count += 1
                run_id = self._io.run_id_of(info.key)
                listed.add(run_id)
                seen = self._cache.get(run_id)
                if seen is not None:
                    if seen.etag == info.etag:
                        seen.confirmed = time.monotonic()
                        continue
                    if (moved := guess_changed(seen, info, now, lease_hint)) is not None:
                        self._cache.file(run_id, moved)
                        continue
                    if renewed_elsewhere(seen, info, now):
                        continue
                    if (guess := claimed_elsewhere(seen, info, now, lease_hint)) is not None:
                        self._cache.file(run_id, guess)
                        continue
                    if seen.own:
                        # Perhaps listed before our own write landed: read it only
                        # if the cache still holds that write when it comes up.
                        unread.append((run_id, seen.etag, *self._listed(info)))
                        continue
                    # Moved on: no claim may swap against the old version.
                    self._cache.forget(run_id, seen.etag)
                elif (
                    part is not None
                    and not in_slice(run_id, part)
                    and self._passed.get(run_id) != info.etag
                ):
                    passed[run_id] = info.etag  # another's slice, this time
                    continue
                unread.append((run_id, None, *self._listed(info)))
            for run_id, etag in before.items():
                if run_id not in listed:
                    self._cache.forget(run_id, etag)
            self._unread.reset(unread)
            self._passed = passed
            self._io.stats.scans += 1
            self._scan_epoch += 1
            changed = bool(unread or passed) or len(listed) != len(before)
            self._pacing.listed(count, changed)

    def _listed(self, info: ObjectInfo) -> tuple[float, int, int]:
        """A listed record's estimated place, priority and class of fairness
        key. A held record (another's claim, most likely) is read with the
        records of no key, in line order, as every record was before the
        classes: it has no class of its own."""
        bucket = listed_bucket(info.size)
        return (
            listed_place(info, self._priority_aging),
            listed_priority(info.size),
            0 if bucket == HELD_CLASS else bucket,
        )

    async def read_other_classes(self, known: Collection[int], now: float) -> None:
        """Read a few records of each class of fairness key the unread line
        holds and ``known`` (the classes of the cache's due jobs) lacks, so a
        tenant's job listed beside another tenant's backlog is known, and
        served, before that backlog is read through."""
        missing = self._unread.classes().difference(known)
        if known and missing:
            await self._read(self._unread.take(READ_PER_CLASS * len(missing), among=missing), now)

    async def read_ahead(self, want: int, now: float) -> None:
        """Read the next ``want`` records of the unread line, at most the
        pacing's ``read_batch``. If any turned out taken since the listing (claimed
        elsewhere, or gone), this process has run into another's stretch: it
        jumps, and reads only a few where it lands, in case that is taken too;
        each batch found free doubles the next (:mod:`stepstone.runtime.store_queue.pacing`)."""
        await self._read(self._unread.take(min(want, self._pacing.read_batch)), now)

    async def _read(self, batch: list[tuple[str, str | None]], now: float) -> None:
        jobs = await asyncio.gather(*(self._refresh(run_id, etag) for run_id, etag in batch))
        taken = sum(1 for job in jobs if job is None or (job.token and not job.claimable(now)))
        self._pacing.read(taken)
        self._pacing.tried(won=0, lost=taken)
        if taken:
            self._unread.jump()

    async def _refresh(self, run_id: str, known: str | None) -> StoredJob | None:
        """Read a record a listing showed had moved on from etag ``known``,
        unless this instance wrote it meanwhile (its answer would be older).
        Returns what the cache then holds for it."""
        if self._cache.etag(run_id) == known:
            obj = await self._io.get(run_id)
            if self._cache.etag(run_id) == known:
                if obj is None:
                    self._cache.forget(run_id, known)
                else:
                    with contextlib.suppress(CorruptRecord):
                        self._io.decode(run_id, obj.etag, obj.data)
        seen = self._cache.get(run_id)
        return None if seen is None else seen.job

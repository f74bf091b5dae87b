"""Reading and writing one StoreQueue record, for every other part of the queue.

A record is read by GET and written by a compare-and-swap on its etag (a
conditional PUT, or a conditional DELETE). Going through here, every read is
counted, a version that does not decode is logged once and remembered so
listings do not read it again, and the per-process cache
(:mod:`stepstone.runtime.store_queue.record_cache`) learns every version this
instance reads or writes. A swap or delete whose answer was lost is decided
by what the store then holds (:mod:`stepstone.runtime.store_queue.lost_answers`),
so a caller sees it either land or raise.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field

from stepstone.store.base import ObjectStore, StoredObject
from stepstone.store.errors import NotFound, StoreUnavailable

from .lost_answers import landed
from .record_cache import RecordCache, Seen
from .records import CorruptRecord, StoredJob, decode, encode

log = logging.getLogger("stepstone.runtime.store_queue")

SWAP_TRIES = 3
"""A change re-reads the record after a failed swap at most this often.

A swap fails when the cache's etag is stale; one re-read decides whether the
token still owns the job. More than one retry only happens when some other
writer keeps changing a record this token owns, which is already a bug (this
instance's own changes of a record go one at a time: store_queue.transitions)."""


@dataclass(slots=True)
class StoreQueueStats:
    """Counters for operators and tests: how hard the queue is working."""

    scans: int = 0
    """Listings of the jobs prefix (each one or more LIST requests)."""
    fetches: int = 0
    """Records read because the cache did not know their current version."""
    lost_races: int = 0
    """ClaimRace that another process (or coroutine) won first."""
    corrupt_records: int = 0
    """Distinct (key, etag) versions whose bytes would not decode; skipped."""
    corrupt_keys: set[str] = field(default_factory=set)


class RecordIO:
    """One instance's reads and writes of the records under ``jobs`` (the
    key prefix, ending in ``/``), at most ``fetch_concurrency`` GETs at once."""

    def __init__(
        self,
        store: ObjectStore,
        jobs: str,
        cache: RecordCache,
        stats: StoreQueueStats,
        *,
        fetch_concurrency: int,
    ) -> None:
        self.store = store
        self.jobs = jobs
        self.cache = cache
        self.stats = stats
        self._fetching = asyncio.Semaphore(fetch_concurrency)
        self._writing: Counter[str] = Counter()

    @property
    def writing(self) -> Collection[str]:
        """Runs whose record this instance is writing now (a claim, a
        renewal, a settlement). Its claims pass them over: a claim would race
        our own write, and one that took over a lease its renewal is still
        waiting to land (S3 through a burst of conflicts) would run the job
        twice in this process."""
        return self._writing.keys()

    @contextlib.contextmanager
    def write_of(self, run_id: str) -> Iterator[None]:
        """Mark ``run_id`` as written to (:attr:`writing`) while the block runs."""
        self._writing[run_id] += 1
        try:
            yield
        finally:
            self._writing[run_id] -= 1
            if self._writing[run_id] <= 0:
                del self._writing[run_id]

    def key(self, run_id: str) -> str:
        return self.jobs + run_id

    def run_id_of(self, key: str) -> str:
        return key[len(self.jobs) :]

    def decode(
        self, run_id: str, etag: str, data: bytes, *, learn: bool = True, log_corrupt: bool = True
    ) -> StoredJob:
        """Decode a record read from the store and (if ``learn``) remember it.
        An undecodable one is counted and logged once per version (not when
        the caller names it itself: ``log_corrupt``), remembered by etag so
        listings do not fetch it again, and raised as CorruptRecord."""
        key = self.key(run_id)
        try:
            job = decode(data, key=key)
            if job.id != run_id:
                raise CorruptRecord(f"holds job id {job.id!r}", key=key)
        except CorruptRecord as exc:
            seen = self.cache.get(run_id)
            if seen is None or seen.etag != etag:
                self.stats.corrupt_records += 1
                self.stats.corrupt_keys.add(key)
                if log_corrupt:
                    log.warning("skipping an undecodable queue record: %s", exc)
            if learn:
                self.cache.file(run_id, Seen(etag, None, len(data)))
            raise
        if learn:
            self.cache.learn_read(run_id, etag, job, len(data))
        return job

    async def get(self, run_id: str) -> StoredObject | None:
        """GET one record, counted; None when it is gone."""
        async with self._fetching:
            try:
                obj = await self.store.get(self.key(run_id))
            except NotFound:
                return None
        self.stats.fetches += 1
        return obj

    async def fetch(self, run_id: str) -> tuple[str, StoredJob] | None:
        """GET one record; None when it is gone. Raises CorruptRecord.

        The cache learns the answer only if it still holds what it held when
        the GET went out: a write of this process that landed meanwhile (a
        claim) is newer than the answer, and a status read answered after a
        claim landed would put the unclaimed version back, so the claim took
        its own run for taken, and the next claim swapped against a version
        long gone and took the run for held elsewhere until its lease lapsed."""
        before = self.cache.etag(run_id)
        obj = await self.get(run_id)
        unchanged = self.cache.etag(run_id) == before
        if obj is None:
            if unchanged:
                self.cache.forget(run_id)
            return None
        return obj.etag, self.decode(run_id, obj.etag, obj.data, learn=unchanged)

    async def swap(self, run_id: str, new: StoredJob, etag: str) -> None:
        """Write ``new`` over version ``etag`` and learn it. Raises
        PreconditionFailed or NotFound when the record moved on or went, and
        StoreUnavailable only when the write certainly did not land."""
        data = encode(new)
        key = self.key(run_id)
        try:
            new_etag = await self.store.put_if_match(key, data, etag)
        except StoreUnavailable as error:
            new_etag = await landed(self.store, key, data, etag, error)
        self.cache.learn(run_id, new_etag, new, len(data))

    async def remove(self, run_id: str, etag: str) -> None:
        """Delete version ``etag``; like :meth:`swap` for a delete."""
        key = self.key(run_id)
        try:
            await self.store.delete(key, if_match=etag)
        except StoreUnavailable as error:
            await landed(self.store, key, None, etag, error)
        self.cache.forget(run_id)

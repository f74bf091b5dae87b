"""Reading records for people: one run's record, the records a page at a
time, and counts by status.

A record whose current version the cache holds costs no GET: a listing shows
each record's etag, and only the ones the cache does not know are read. The
cache keeps no payload of a record another process holds, nor of a dead one
(a worker need not), so the listings keep their own copy of each record they
read whole, by etag: a listing asked for again (a web view's refresh) reads
only the records that changed since.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Iterable

from stepstone.store.base import DEFAULT_PAGE_SIZE, ObjectInfo

from ..capabilities import Page, Survey
from ..clock import Clock
from ..queue import JobRecord
from ..run_id import is_storable_id
from ..status import QUEUE_STATUSES, JobStatus
from .record_io import RecordIO
from .records import CorruptRecord, StoredJob, record_of, status_of


class RecordInspection:
    """One instance's reads of records for status, listings (a page at a time) and counts."""

    def __init__(self, io: RecordIO, clock: Clock) -> None:
        self._io = io
        self._cache = io.cache
        self._clock = clock
        self._whole: dict[str, tuple[str, StoredJob]] = {}
        """Run id: (etag, the record with its payload) as a listing last read it."""

    async def get(self, run_id: str) -> JobRecord | None:
        if not is_storable_id(run_id):
            return None
        fetched = await self._io.fetch(run_id)
        if fetched is None:
            return None
        return record_of(fetched[1], self._clock.now())

    async def page(
        self, status: JobStatus | None = None, *, cursor: str | None = None, limit: int = 100
    ) -> Page:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        now = self._clock.now()
        out: list[JobRecord] = []
        unreadable: list[tuple[str, str]] = []
        last: str | None = None
        after = None if cursor is None else self._io.key(cursor)
        listed: set[str] = set()
        async with contextlib.aclosing(self._listed(after)) as pages:
            async for page in pages:
                listed.update(self._io.run_id_of(info.key) for info in page)
                pos = 0
                while pos < len(page):
                    if len(out) == limit:
                        # more keys follow the last one examined
                        return Page(out, last, tuple(unreadable))
                    chunk = page[pos : pos + limit - len(out)]
                    pos += len(chunk)
                    for run_id, job in await self._load(chunk, payload=True):
                        last = run_id
                        if isinstance(job, CorruptRecord):
                            unreadable.append((job.key, job.reason))
                            continue
                        if job is None:
                            continue
                        record = record_of(job, now)
                        if status is None or record.status == status:
                            out.append(record)
        if cursor is None:  # every record listed: forget the copies of those gone
            for run_id in self._whole.keys() - listed:
                del self._whole[run_id]
        return Page(out, None, tuple(unreadable))

    async def survey(self, *, reads: int) -> Survey:
        """Every record listed: those whose listed version a listing or the
        cache holds at no cost, at most ``reads`` others read now (the rest
        counted unread), so a cache asking each refresh knows them all after
        a few, and then reads only those that changed."""
        if reads < 0:
            raise ValueError(f"reads must be at least 0, got {reads}")
        now = self._clock.now()
        records: list[JobRecord] = []
        unreadable: list[tuple[str, str]] = []
        listed: set[str] = set()
        unread = 0
        async with contextlib.aclosing(self._listed(None)) as pages:
            async for page in pages:
                listed.update(self._io.run_id_of(info.key) for info in page)
                unknown = [info.key for info in page if not self._known(info, payload=True)[0]]
                left = set(unknown[reads:])
                reads = max(0, reads - len(unknown))
                unread += len(left)
                taken = [info for info in page if info.key not in left]
                for _, job in await self._load(taken, payload=True):
                    if isinstance(job, CorruptRecord):
                        unreadable.append((job.key, job.reason))
                    elif job is not None:
                        records.append(record_of(job, now))
        for run_id in self._whole.keys() - listed:
            del self._whole[run_id]
        return Survey(records, len(listed), unread, tuple(unreadable))

    async def counts(self) -> dict[JobStatus, int]:
        """As QueueInspection's, but a record whose etag the cache knows costs no GET."""
        totals = dict.fromkeys(QUEUE_STATUSES, 0)
        now = self._clock.now()
        async with contextlib.aclosing(self._listed(None)) as pages:
            async for page in pages:
                for _, job in await self._load(page, payload=False):
                    if isinstance(job, StoredJob):
                        totals[status_of(job, now)] += 1
        return totals

    async def _listed(self, after: str | None) -> AsyncGenerator[list[ObjectInfo], None]:
        """The records' objects after ``after``, a page at a time, from one
        scan (a LIST a page; on a directory store one walk, where a listing
        a page at a time would read the whole directory for each page)."""
        page: list[ObjectInfo] = []
        async for info in self._io.store.scan(self._io.jobs, start_after=after):
            page.append(info)
            if len(page) == DEFAULT_PAGE_SIZE:
                yield page
                page = []
        if page:
            yield page

    def _known(self, info: ObjectInfo, *, payload: bool) -> tuple[bool, StoredJob | None]:
        """(True, the record) when its listed version is known here (with its
        payload, if ``payload``)."""
        run_id = self._io.run_id_of(info.key)
        seen = self._cache.get(run_id)
        if seen is not None and seen.etag == info.etag:
            if seen.job is not None and not (payload and seen.job.partial):
                return True, seen.job
            if seen.job is None and not payload:
                return True, None  # counts skip it without reading it again
        kept = self._whole.get(run_id)
        if kept is not None and kept[0] == info.etag:
            return True, kept[1]
        return False, None

    async def _load(
        self, infos: Iterable[ObjectInfo], *, payload: bool
    ) -> list[tuple[str, StoredJob | CorruptRecord | None]]:
        """The records behind listed objects, from the cache where its etag is
        current (and it holds the payload, if ``payload``), else by GET.
        Gone ones come back as None, undecodable ones as the CorruptRecord
        that says why (read again: the cache remembers only that they are)."""

        async def read(run_id: str) -> StoredJob | CorruptRecord | None:
            before = self._cache.etag(run_id)
            obj = await self._io.get(run_id)
            if obj is None:
                return None
            try:
                job = self._io.decode(
                    run_id,
                    obj.etag,
                    obj.data,
                    learn=self._cache.etag(run_id) == before,
                    log_corrupt=not payload,  # a listing names it to its caller
                )
            except CorruptRecord as exc:
                return exc
            if payload:
                self._whole[run_id] = (obj.etag, job)
            return job

        # Known ones are taken as they are, without a task each: a listing
        # asked again (a web view's refresh) knows nearly every record.
        found: list[tuple[str, StoredJob | CorruptRecord | None]] = []
        unknown: list[int] = []
        for info in infos:
            run_id = self._io.run_id_of(info.key)
            is_known, job = self._known(info, payload=payload)
            if not is_known:
                unknown.append(len(found))
            found.append((run_id, job))
        read_now = await asyncio.gather(*(read(found[at][0]) for at in unknown))
        for at, job_read in zip(unknown, read_now, strict=True):
            found[at] = (found[at][0], job_read)
        return found

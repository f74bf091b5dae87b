"""StoreQueue: the lease queue over any ObjectStore, shared by many processes.

Each job is one object, ``<prefix>/jobs/<id>`` (see :mod:`runtime.store_records`).
Every change after the create is a compare-and-swap on that object's etag
(``put_if_match``, ``delete(if_match=...)``), so two processes that race for a
job cannot both win: the loser gets PreconditionFailed and moves on. Leases
live in the records, so a lease that lapses is taken over by whichever
process next looks, with nothing running beside the workers.

Requests are what S3 bills, so each instance keeps a *view*: id -> (etag,
size, decoded record), learned from its own writes and from what it read. A
job this process enqueued is claimed, renewed and settled without a GET.
``claim`` lists the prefix only when the view cannot serve it (fewer due
jobs than asked, or due jobs not confirmed within ``scan_interval``), at
most once per ``scan_interval`` per page listed, or sooner when a stale view
(refused swaps, reads of records already taken) has already cost what a
listing would. A listing returns every key's etag, size and modified time,
so only records that moved need reading, and not even all of those: a
record seen waiting whose new size is exactly what a claim writes was
claimed elsewhere, and one seen held whose size did not change was renewed;
both are read only when the lease they are guessed to hold lapses. The rest
are read only as claims need them, in the order of :mod:`runtime.read_line`
(waiting before held, as the record's size says; in line order as the
listing shows it; each process from its own point), so P processes sharing
a backlog read each job about once between them, not P times. So that
processes do not race for the same jobs, each orders the jobs it read with
its own small jitter, and picks from a wider, shuffled head of the line
after losing a race. docs/queue.md tabulates the requests and explains each
choice.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import heapq
import itertools
import logging
import math
import random
import secrets
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

from stepstone.store.base import DEFAULT_PAGE_SIZE, ObjectInfo, ObjectStore, StoredObject
from stepstone.store.errors import AlreadyExists, NotFound, PreconditionFailed, StoreUnavailable
from stepstone.store.keys import validate_key

from .clock import Clock, SystemClock
from .queue import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_PRIORITY_AGING,
    PRIORITY_NORMAL,
    QUEUE_STATUSES,
    Delivery,
    Enqueued,
    JobRecord,
    JobStatus,
    LeaseQueue,
    Settlement,
    check_enqueue,
    sort_key,
)
from .queue_inspection import Page, QueueInspection
from .read_line import ReadLine
from .store_records import (
    WAITING,
    CorruptRecord,
    StoredJob,
    check_job_id,
    decode,
    encode,
    listed_priority,
    listed_state,
)

log = logging.getLogger(__name__)

PENDING_HINT_SECONDS = 5.0
"""How long a record seen pending is taken to still be, for ``pending_here``:
what a handle awaiting a job a peer took may lose in latency."""

READS_PER_LISTING_PAGE = 12
"""What a listing page costs in reads: on S3 a LIST request is billed 12.5
times a GET (and a conditional PUT is billed like a LIST)."""

_SETTLE_TRIES = 3
"""A transition re-reads the record after a failed swap at most this often.

A swap fails when the view's etag is stale; one re-read decides whether the
token still owns the job. More than one retry only happens when some other
writer keeps changing a record this token owns, which is already a bug."""


@dataclass(slots=True)
class _Seen:
    """What this instance knows of one record: its etag and, unless the bytes
    would not decode, the record (possibly stripped of its payload)."""

    etag: str
    job: StoredJob | None
    size: int
    confirmed: float = field(default_factory=time.monotonic)
    """When (monotonic) this instance last wrote, read or listed this version."""
    stamp: int = 0
    """Set when filed in the view; heap entries with another stamp are stale."""
    guessed: bool = False
    """``job`` is inferred (a claim elsewhere), not read: see ``_held_elsewhere``."""
    own: bool = False
    """This instance wrote this version (so no other process has listed it yet)."""


@dataclass(slots=True)
class StoreQueueStats:
    """Counters for operators and tests: how hard the queue is working."""

    scans: int = 0
    """Listings of the jobs prefix (each one or more LIST requests)."""
    fetches: int = 0
    """Records read because the view did not know their current version."""
    lost_races: int = 0
    """Claims that another process (or coroutine) won first."""
    corrupt_records: int = 0
    """Distinct (key, etag) versions whose bytes would not decode; skipped."""
    corrupt_keys: set[str] = field(default_factory=set)


class StoreQueue(LeaseQueue, QueueInspection):
    """A LeaseQueue whose state lives entirely in an ObjectStore.

    ``scan_interval`` (real seconds, not the injected clock's: it is about
    request cost, not job semantics) spaces the listings that find other
    processes' work: after a listing of ``p`` pages the next waits
    ``p * scan_interval``, so a big backlog is not re-listed every second.
    The first claim always lists; ``scan_interval=0`` lists on every claim
    the view cannot fill. ``fetch_limit`` bounds the records read at once
    from what a listing showed, and the largest chunk they are read in
    (:mod:`runtime.read_line`); ``fetch_concurrency`` bounds
    GETs in flight. ``max_view_entries`` and ``max_view_bytes`` (payload
    held) bound the view's memory; past them the least recently touched
    entries are forgotten (and read again if needed). An idle queue backs
    off: from the second listing in a row that found nothing new, each
    doubles the wait, up to ``idle_scan_max`` seconds (LISTs are billed: an
    idle worker listing every second costs ~$13 a month on S3, every 5 s
    ~$2.6); any work this instance makes, or a listing that finds a change,
    restores the usual pace. A job submitted by another process to an idle
    fleet is therefore found within ``idle_scan_max``.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        prefix: str = "queue",
        clock: Clock | None = None,
        default_max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        priority_aging: float = DEFAULT_PRIORITY_AGING,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        scan_interval: float = 1.0,
        fetch_concurrency: int = 16,
        fetch_limit: int = 1000,
        max_view_entries: int = 100_000,
        max_view_bytes: int = 64 * 1024 * 1024,
        claim_jitter: float = 0.5,
        idle_scan_max: float = 5.0,
    ) -> None:
        if default_max_attempts < 1:
            raise ValueError(f"default_max_attempts must be at least 1, got {default_max_attempts}")
        if scan_interval < 0 or fetch_concurrency < 1 or fetch_limit < 1:
            raise ValueError("scan_interval must be >= 0, fetch_concurrency and fetch_limit >= 1")
        prefix = prefix.strip("/")
        try:
            validate_key(prefix + "/jobs/x")
        except ValueError as exc:
            raise ValueError(f"invalid queue prefix {prefix!r}: {exc}") from None
        self.store = store
        self.prefix = prefix
        self._clock = clock or SystemClock()
        self.default_max_attempts = default_max_attempts
        self.priority_aging = priority_aging
        self.max_payload_bytes = max_payload_bytes
        self.scan_interval = scan_interval
        self.idle_scan_max = max(scan_interval, idle_scan_max)
        self._idle_scans = 0
        """Listings in a row that found nothing new: from the second on, each
        doubles the wait before the next, up to ``idle_scan_max``."""
        self.fetch_limit = fetch_limit
        self.max_view_entries = max(1, max_view_entries)
        self.max_view_bytes = max_view_bytes
        self.claim_jitter = max(0.0, claim_jitter)
        self._salt = secrets.token_bytes(16)
        self._view_bytes = 0
        self.stats = StoreQueueStats()
        self._jobs = f"{prefix}/jobs/"
        self._view: dict[str, _Seen] = {}
        self._timed: list[tuple[float, int, str]] = []
        self._line: list[tuple[float, str, int]] = []
        self._stamps = itertools.count(1)
        self._claiming: set[str] = set()
        self._next_scan = -math.inf
        self._lease_hint = 60.0
        """The last lease this instance claimed with: the guess for others' leases."""
        self._spread = 1
        """How many times ``n`` of the due jobs a claim picks from at random:
        1 (strict order) until claims lose races, doubled per claim that does."""
        self._wasted = 0
        """Swaps refused (lost races, records gone) since the last listing."""
        self._wasted_total = 0
        self._wasted_reads = 0
        """Records read from the unread line since the last listing that turned
        out taken (claimed elsewhere or gone)."""
        self._scan_pages = 1
        self._unread = ReadLine(fetch_limit, self.claim_jitter)
        """What the last listing showed that the view does not know, read as
        claims need them (:meth:`_read_ahead`, :mod:`runtime.read_line`)."""
        self._read_batch = fetch_limit
        """The most records the next read-ahead may read (see :meth:`_read_ahead`)."""
        self._came_up_short = False
        """The last claim returned fewer jobs than asked (see :meth:`next_due`)."""
        self._scan_lock = asyncio.Lock()
        self._scan_epoch = 0
        self._fetch_slots = asyncio.Semaphore(fetch_concurrency)
        self._listeners: list[Callable[[], None]] = []

    def __repr__(self) -> str:
        return f"<StoreQueue {self.store!r} prefix={self.prefix!r}>"

    @property
    def clock(self) -> Clock:
        return self._clock

    # -- the view ----------------------------------------------------------

    def _key(self, job_id: str) -> str:
        return self._jobs + job_id

    def _learn(self, job_id: str, etag: str, job: StoredJob, size: int) -> None:
        """Remember a version this instance wrote. A dead one keeps no payload."""
        self._file(job_id, _Seen(etag, job.stripped() if job.dead else job, size, own=True))

    def _learn_read(self, job_id: str, etag: str, job: StoredJob, size: int) -> None:
        """Remember a version this instance read. One that is held (by some
        other token, as far as this instance knows) or dead keeps no payload:
        nothing here needs it before it changes, and a change means a GET."""
        held = job.token is not None or job.dead
        self._file(job_id, _Seen(etag, job.stripped() if held else job, size))

    def _forget(self, job_id: str, etag: str | None = None) -> None:
        """Drop an entry, but only the version ``etag`` if given, so a newer
        version another coroutine learned meanwhile survives."""
        seen = self._view.get(job_id)
        if seen is not None and (etag is None or seen.etag == etag):
            del self._view[job_id]
            self._view_bytes -= _payload_size(seen)

    def _bound_view(self) -> None:
        """Evict the least recently filed entries past ``max_view_entries`` or
        ``max_view_bytes`` of payload. A process that only enqueues (a web
        app submitting jobs) would otherwise remember every job forever; an
        evicted entry costs one GET if this process needs it again."""
        while len(self._view) > self.max_view_entries or (
            self._view_bytes > self.max_view_bytes and len(self._view) > 1
        ):
            self._forget(next(iter(self._view)))

    def _decode(self, job_id: str, etag: str, data: bytes, *, learn: bool = True) -> StoredJob:
        """Decode a record read from the store and (if ``learn``) remember it.
        An undecodable one is counted and logged once per version, remembered
        by etag so listings do not fetch it again, and raised as CorruptRecord."""
        key = self._key(job_id)
        try:
            job = decode(data, key=key)
            if job.id != job_id:
                raise CorruptRecord(f"holds job id {job.id!r}", key=key)
        except CorruptRecord as exc:
            seen = self._view.get(job_id)
            if seen is None or seen.etag != etag:
                self.stats.corrupt_records += 1
                self.stats.corrupt_keys.add(key)
                log.warning("skipping an undecodable queue record: %s", exc)
            if learn:
                self._file(job_id, _Seen(etag, None, len(data)))
            raise
        if learn:
            self._learn_read(job_id, etag, job, len(data))
        return job

    def _etag(self, job_id: str) -> str | None:
        seen = self._view.get(job_id)
        return None if seen is None else seen.etag

    async def _get(self, job_id: str) -> StoredObject | None:
        async with self._fetch_slots:
            try:
                obj = await self.store.get(self._key(job_id))
            except NotFound:
                return None
        self.stats.fetches += 1
        return obj

    async def _fetch(self, job_id: str) -> tuple[str, StoredJob] | None:
        """GET one record and learn it; None when it is gone. Raises CorruptRecord."""
        obj = await self._get(job_id)
        if obj is None:
            self._forget(job_id)
            return None
        return obj.etag, self._decode(job_id, obj.etag, obj.data)

    def _claimable(self, job: StoredJob, now: float) -> bool:
        if job.dead:
            return False
        if job.token is None:
            return job.run_at <= now
        return job.lease_expires_at is not None and job.lease_expires_at <= now

    def _file(self, job_id: str, seen: _Seen) -> None:
        """Put an entry in the view and in the heap its state belongs to.

        Like MemoryQueue: ``_timed`` orders entries by when they become
        claimable (run-at, lease expiry), ``_line`` orders the claimable ones
        by place in line. Entries are never removed from a heap when the
        view changes; a popped one whose stamp is not the view's is skipped.
        So a claim costs O(k log n) for the k jobs it looks at, not O(view).
        """
        seen.stamp = next(self._stamps)
        old = self._view.pop(job_id, None)  # re-inserted last: the view is in filing order
        self._view_bytes += _payload_size(seen) - _payload_size(old)
        self._view[job_id] = seen
        self._bound_view()
        job = seen.job
        if job is None or job.dead:
            return
        due = job.run_at if job.token is None else job.lease_expires_at
        assert due is not None
        heapq.heappush(self._timed, (due, seen.stamp, job_id))
        if len(self._timed) + len(self._line) > 2 * len(self._view) + 1024:
            self._reindex()

    def _reindex(self) -> None:
        """Rebuild both heaps from the view, dropping stale entries."""
        self._timed = []
        self._line = []
        for job_id, seen in self._view.items():
            job = seen.job
            if job is not None and not job.dead:
                due = job.run_at if job.token is None else job.lease_expires_at
                assert due is not None
                self._timed.append((due, seen.stamp, job_id))
        heapq.heapify(self._timed)

    def _current(self, job_id: str, stamp: int) -> StoredJob | None:
        seen = self._view.get(job_id)
        if seen is None or seen.stamp != stamp:
            return None
        return seen.job

    def _promote(self, now: float) -> None:
        """Move entries that have become claimable from ``_timed`` to ``_line``."""
        while self._timed and self._timed[0][0] <= now:
            _, stamp, job_id = heapq.heappop(self._timed)
            job = self._current(job_id, stamp)
            if job is not None:
                key = sort_key(job.run_at, job.priority, self.priority_aging)
                if not self._view[job_id].own:
                    key += self._jitter(job_id)
                heapq.heappush(self._line, (key, job_id, stamp))

    def _jitter(self, job_id: str) -> float:
        """This instance's own offset for a job, in ``[0, claim_jitter)`` seconds.

        Processes that list the same burst of jobs would otherwise all walk
        it in the same order and race for the same job at every claim. A
        per-instance pseudo-random offset, stable for the job, gives each
        process its own order among jobs due within ``claim_jitter`` of each
        other (and leaves jobs further apart, and priorities, in order).
        Only jobs this instance learned by reading get one: its own writes
        keep exact order, so a single process is strictly FIFO per priority.
        """
        if not self.claim_jitter:
            return 0.0
        digest = hashlib.blake2b(job_id.encode(), digest_size=8, key=self._salt).digest()
        return int.from_bytes(digest, "big") / 2**64 * self.claim_jitter

    def _candidates(
        self,
        now: float,
        kinds: frozenset[str] | None,
        limit: int,
        skip: Collection[str] = (),
    ) -> list[str]:
        """Up to ``limit`` ids due now, in line order (see queue.sort_key),
        of ``kinds`` if given, not in ``skip`` or being claimed."""
        self._promote(now)
        out: list[str] = []
        keep: list[tuple[float, str, int]] = []
        while self._line and len(out) < limit:
            entry = heapq.heappop(self._line)
            _, job_id, stamp = entry
            job = self._current(job_id, stamp)
            if job is None:
                continue  # stale: the view has moved on, and refiled it
            if not self._claimable(job, now):  # only if the clock went back
                due = job.run_at if job.token is None else job.lease_expires_at
                heapq.heappush(self._timed, (due or now, stamp, job_id))
                continue
            keep.append(entry)
            if job_id in self._claiming or job_id in skip:
                continue
            if kinds is not None and job.kind not in kinds:
                continue
            out.append(job_id)
        for entry in keep:  # still due: they stay in line until claimed
            heapq.heappush(self._line, entry)
        return out

    def _renewed_elsewhere(self, seen: _Seen, info: ObjectInfo, now: float) -> bool:
        """Whether a listed change is most likely another holder renewing its
        lease, so reading it can wait until the lease it was seen with lapses.

        A renewal rewrites the same fields with the same sizes; every other
        transition of a held record (settling, releasing, a reclaim after
        a lapse is fine either way) adds or drops the token, the lease or an
        error and so changes the size, or deletes the record.
        """
        job = seen.job
        return (
            job is not None
            and job.partial
            and job.token is not None
            and job.lease_expires_at is not None
            and job.lease_expires_at > now
            and info.size == seen.size
        )

    def _claimed_elsewhere(self, seen: _Seen, info: ObjectInfo, now: float) -> _Seen | None:
        """If a listed change of a record this instance knew as waiting has
        exactly the size a claim of it would produce, someone claimed it:
        return a placeholder saying so, to stand until about one lease from
        now, instead of reading it. Short jobs are acked (and vanish from the
        listing) before then, so this instance never reads them at all.

        The placeholder keeps no token of ours and no payload (``partial``),
        so nothing is ever written from it: a claim reads the record first.
        A guess that is wrong (another change of the same size) only delays
        when this instance looks again; it cannot hand the job to two holders.
        """
        job = seen.job
        if job is None or job.partial or job.dead or job.token is not None:
            return None
        guess = self._held_elsewhere(job, info.etag, now)
        return guess if guess.size == info.size else None

    def _held_elsewhere(self, job: StoredJob, etag: str, now: float) -> _Seen:
        """A placeholder for a waiting record someone else has just claimed:
        the size that claim wrote (every claim of one version has the same
        size: same fields, a token of fixed length, a float lease) and a lease
        guessed from this instance's own. Never written; a claim reads first."""
        claimed = job.next(
            job.updated_at,
            attempts=job.attempts + 1,
            claims=job.claims + 1,
            token=_TOKEN_SHAPE,
            lease_expires_at=now + self._lease_hint,
        )
        return _Seen(etag, claimed.stripped(), len(encode(claimed)), guessed=True)

    async def _scan(self) -> None:
        """List the jobs prefix: confirm what the view knows, guess what it
        can from sizes, line up the rest to be read as claims need them
        (``_unread``), and drop entries whose objects are gone. Concurrent
        callers share one listing."""
        epoch = self._scan_epoch
        async with self._scan_lock:
            if self._scan_epoch != epoch:
                return  # someone listed while we waited: their view is ours
            now = self.clock.now()
            before = {job_id: seen.etag for job_id, seen in self._view.items()}
            listed: set[str] = set()
            stale: list[tuple[str, str | None, float]] = []
            held: list[tuple[str, str | None, float]] = []  # by their size: see ReadLine
            count = 0
            async for info in self.store.scan(self._jobs):
                count += 1
                job_id = info.key[len(self._jobs) :]
                listed.add(job_id)
                seen = self._view.get(job_id)
                if seen is not None:
                    if seen.etag == info.etag:
                        seen.confirmed = time.monotonic()
                        continue
                    if self._renewed_elsewhere(seen, info, now):
                        continue
                    if (guess := self._claimed_elsewhere(seen, info, now)) is not None:
                        self._file(job_id, guess)
                        continue
                    if seen.own:
                        # Perhaps listed before our own write landed: read it only
                        # if the view still holds that write when its turn comes.
                        stale.append((job_id, seen.etag, self._listed_place(info)))
                        continue
                    # Moved on: no claim may swap against the old version.
                    self._forget(job_id, seen.etag)
                unknown = stale if listed_state(info.size) == WAITING else held
                unknown.append((job_id, None, self._listed_place(info)))
            for job_id, etag in before.items():
                if job_id not in listed:
                    self._forget(job_id, etag)
            self._unread.reset(stale, held)
            pages = max(1, math.ceil(count / DEFAULT_PAGE_SIZE))
            self._scan_pages = pages
            self._wasted = 0
            self._wasted_reads = 0
            self.stats.scans += 1
            self._scan_epoch += 1
            changed = stale or held or len(listed) != len(before)
            self._idle_scans = 0 if changed else self._idle_scans + 1
            wait = pages * self.scan_interval * 2 ** min(max(0, self._idle_scans - 1), 30)
            self._next_scan = time.monotonic() + min(
                wait, max(pages * self.scan_interval, self.idle_scan_max)
            )

    def _listed_place(self, info: ObjectInfo) -> float:
        """A listed record's place in line (queue.sort_key), as well as the
        listing shows it: its last change for its run-at, its size for its
        priority (see runtime.store_records)."""
        return sort_key(info.modified, listed_priority(info.size), self.priority_aging)

    async def _read_ahead(self, want: int, now: float) -> None:
        """Read the next ``want`` records of the unread line, at most
        ``_read_batch``. If any turned out taken since the listing (claimed
        elsewhere, or gone), this process has run into another's stretch: it
        jumps, and reads only a few where it lands, in case that is taken too;
        each batch found free doubles the next (up to ``fetch_limit``)."""
        batch = self._unread.take(min(want, self._read_batch))
        jobs = await asyncio.gather(*(self._refresh(job_id, etag) for job_id, etag, _ in batch))
        taken = sum(
            1
            for job, (_, _, listed_free) in zip(jobs, batch, strict=True)
            if listed_free and (job is None or (job.token and not self._claimable(job, now)))
        )
        if taken:
            self._wasted_reads += taken
            self._unread.jump()
            self._read_batch = _PROBE_READS
        else:
            self._read_batch = min(self._read_batch * 2, self.fetch_limit)

    async def _refresh(self, job_id: str, known: str | None) -> StoredJob | None:
        """Read a record a listing showed had moved on from etag ``known``,
        unless this instance wrote it meanwhile (its answer would be older).
        Returns what the view then holds for it."""
        if self._etag(job_id) == known:
            obj = await self._get(job_id)
            if self._etag(job_id) == known:
                if obj is None:
                    self._forget(job_id, known)
                else:
                    with contextlib.suppress(CorruptRecord):
                        self._decode(job_id, obj.etag, obj.data)
        seen = self._view.get(job_id)
        return None if seen is None else seen.job

    def _notify(self) -> None:
        self._idle_scans = 0  # this process made work: look for more at the usual pace
        for listener in list(self._listeners):
            try:
                listener()
            except Exception:  # a listener's bug must not fail the enqueue
                log.exception("a queue listener failed")

    # -- records for the caller -------------------------------------------

    def _status(self, job: StoredJob, now: float) -> JobStatus:
        if job.dead:
            return JobStatus.DEAD
        if job.token is not None:
            return JobStatus.RUNNING
        return JobStatus.SCHEDULED if job.run_at > now else JobStatus.READY

    def _record(self, job: StoredJob, now: float) -> JobRecord:
        return JobRecord(
            id=job.id,
            kind=job.kind,
            status=self._status(job, now),
            priority=job.priority,
            attempts=job.attempts,
            max_attempts=job.max_attempts,
            run_at=job.run_at,
            created_at=job.created_at,
            updated_at=job.updated_at,
            payload=job.payload,
            headers=dict(job.headers),
            lease_expires_at=job.lease_expires_at,
            last_error=job.last_error,
            dead_reason=job.dead_reason,
        )

    def _delivery(self, job: StoredJob) -> Delivery:
        assert job.token is not None and job.lease_expires_at is not None
        return Delivery(
            id=job.id,
            kind=job.kind,
            payload=job.payload,
            attempt=job.attempts,
            max_attempts=job.max_attempts,
            token=job.token,
            lease_expires_at=job.lease_expires_at,
            priority=job.priority,
            headers=dict(job.headers),
            enqueued_at=job.created_at,
            claims=job.claims,
        )

    # -- the contract ------------------------------------------------------

    async def enqueue(
        self,
        payload: bytes,
        *,
        kind: str = "",
        id: str | None = None,
        priority: int = PRIORITY_NORMAL,
        run_at: float | None = None,
        max_attempts: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Enqueued:
        job_id = check_enqueue(
            payload,
            id=id,
            priority=priority,
            max_attempts=max_attempts,
            max_payload_bytes=self.max_payload_bytes,
        )
        now = self.clock.now()
        job = StoredJob(
            id=job_id,
            kind=kind,
            payload=bytes(payload),
            priority=priority,
            max_attempts=max_attempts or self.default_max_attempts,
            run_at=now if run_at is None else float(run_at),
            created_at=now,
            updated_at=now,
            nonce=secrets.token_hex(8),
            headers=dict(headers or {}),
        )
        data = encode(job)
        key = self._key(job_id)
        try:
            etag = await self.store.put_if_absent(key, data)
        except AlreadyExists:
            return Enqueued(job_id, created=False)
        except StoreUnavailable as error:
            # The create may have landed with only its answer lost. The nonce
            # makes our bytes unique: if the record holds them, it is ours.
            try:
                etag = await self._landed(key, data, None, error)
            except PreconditionFailed:
                return Enqueued(job_id, created=False)
        self._learn(job_id, etag, job, len(data))
        self._notify()
        return Enqueued(job_id, created=True)

    async def claim(
        self, n: int, *, lease: float, kinds: Collection[str] | None = None
    ) -> list[Delivery]:
        if n <= 0:
            return []
        self._lease_hint = lease
        wanted = None if kinds is None else frozenset(kinds)
        now = self.clock.now()
        candidates = self._candidates(now, wanted, n)
        began = time.monotonic()
        if self._view_is_stale() or (
            began >= self._next_scan
            and (
                len(candidates) < n
                or any(self._view[i].confirmed < began - self.scan_interval for i in candidates)
            )
        ):
            await self._scan()
            now = self.clock.now()
        out: list[Delivery] = []
        tried: set[str] = set()
        lost_before = self._wasted_total
        for _ in range(_CLAIM_ROUNDS):
            need = n - len(out)
            # Under contention other processes hold the same view in the same
            # order and race for its head: take ours from a wider, shuffled head.
            candidates = self._candidates(now, wanted, need * self._spread, tried)
            if len(candidates) < need and self._unread:
                await self._read_ahead(need - len(candidates), now)
                candidates = self._candidates(now, wanted, need * self._spread, tried)
            if candidates:
                picked = sorted(random.sample(range(len(candidates)), min(need, len(candidates))))
                batch = [candidates[i] for i in picked]
                tried.update(batch)
                won = await asyncio.gather(*(self._claim_one(i, now, lease, began) for i in batch))
                out.extend(d for d in won if d is not None)
                if len(out) >= n:
                    break
            elif not self._unread:
                break
            # (else all it read was taken: read on from wherever it jumped to)
            if self._view_is_stale():
                await self._scan()  # cheaper than more refusals from a stale view
                now = self.clock.now()
        self._came_up_short = len(out) < n
        if self._wasted_total > lost_before:
            self._spread = min(self._spread * 2, _MAX_SPREAD)
        else:
            self._spread = max(1, self._spread // 2)
        return out

    def _view_is_stale(self) -> bool:
        """Whether swaps refused, and records read from the unread line that
        turned out taken, since the last listing have cost as many requests as
        listing again would: then a listing is the cheaper way on."""
        wasted = self._wasted + self._wasted_reads / READS_PER_LISTING_PAGE
        return wasted >= max(1, self._scan_pages)

    def _refused(self, seen: _Seen, fresh_since: float) -> None:
        """Count a claim's swap that was refused. Only a version the view
        held from before the claim began says the view is stale: one read
        or listed by the claim itself was as fresh as another listing would
        make it, and losing it was a race no listing would have prevented."""
        self._wasted_total += 1
        if seen.confirmed < fresh_since:
            self._wasted += 1

    async def _claim_one(
        self, job_id: str, now: float, lease: float, fresh_since: float
    ) -> Delivery | None:
        seen = self._view.get(job_id)
        # Checked again here, not only when the candidates were picked: a
        # concurrent claim in this process may have taken it since, and its
        # etag in the view is then the one our swap would match.
        if (
            seen is None
            or seen.job is None
            or job_id in self._claiming
            or not self._claimable(seen.job, now)
        ):
            return None
        self._claiming.add(job_id)
        try:
            etag, job = seen.etag, seen.job
            if job.partial:  # a lapsed lease of another process: its payload is not here
                try:
                    fetched = await self._fetch(job_id)
                except (CorruptRecord, StoreUnavailable):
                    return None
                if fetched is None or not self._claimable(fetched[1], now):
                    return None
                etag, job = fetched
            new = job.next(
                now,
                attempts=job.attempts + 1,
                claims=job.claims + 1,
                token=_new_token(),
                lease_expires_at=now + lease,
            )
            try:
                await self._swap(job_id, new, etag)
            except NotFound:
                self._refused(seen, fresh_since)
                self._forget(job_id, etag)
                return None
            except PreconditionFailed:
                # Someone else moved it first, most likely by claiming it. Say
                # so (keeping the stale etag): the next listing then reads it
                # only if its size says otherwise.
                self.stats.lost_races += 1
                self._refused(seen, fresh_since)
                current = self._view.get(job_id)
                if current is not None and current.etag == etag:
                    self._file(job_id, self._held_elsewhere(job, etag, now))
                return None
            except StoreUnavailable:
                # Not raised: the other claims of this batch landed, and failing
                # the batch would strand them. The write itself may have landed
                # with only its answer lost: then the record holds our token.
                try:
                    fetched = await self._fetch(job_id)
                except (CorruptRecord, StoreUnavailable):
                    return None
                if fetched is None or fetched[1].token != new.token:
                    return None
                return self._delivery(fetched[1])
            return self._delivery(new)
        finally:
            self._claiming.discard(job_id)

    async def _swap(self, job_id: str, new: StoredJob, etag: str) -> None:
        """Write ``new`` over version ``etag`` and learn it. Raises
        PreconditionFailed or NotFound when the record moved on or went, and
        StoreUnavailable only when the write certainly did not land."""
        data = encode(new)
        key = self._key(job_id)
        try:
            new_etag = await self.store.put_if_match(key, data, etag)
        except StoreUnavailable as error:
            new_etag = await self._landed(key, data, etag, error)
        self._learn(job_id, new_etag, new, len(data))

    async def _remove(self, job_id: str, etag: str) -> None:
        """Delete version ``etag``; like :meth:`_swap` for a delete."""
        key = self._key(job_id)
        try:
            await self.store.delete(key, if_match=etag)
        except StoreUnavailable as error:
            await self._landed(key, None, etag, error)
        self._forget(job_id)

    async def _landed(
        self, key: str, data: bytes | None, old: str | None, error: StoreUnavailable
    ) -> str:
        """After a write failed with no answer, find out whether it happened.

        Our bytes are unique (``rev`` and ``nonce``), so a record holding
        exactly ``data`` is our write, and an absent one is our delete
        (``data`` None): return the etag (or ""). A record still at ``old``
        (absent, for a create) means nothing happened: raise ``error``, the
        caller may try again. Anything else is another writer's version:
        PreconditionFailed, as if our write had been refused (had it landed
        first, that writer has replaced it anyway). If the read fails too,
        ``error`` is raised: the caller cannot know, and must treat it as a
        failure that may have happened.
        """
        try:
            obj = await self.store.get(key)
        except NotFound:
            if data is None:
                return ""
            if old is None:
                raise error from None
            raise NotFound("gone", key=key) from error
        except StoreUnavailable:
            raise error from None
        if data is not None and obj.data == data:
            return obj.etag
        if obj.etag == old:
            raise error
        raise PreconditionFailed("changed by another writer", key=key) from error

    async def _settle(
        self,
        delivery: Delivery,
        change: Callable[[StoredJob, float], StoredJob | None],
    ) -> StoredJob | Settlement | None:
        """Apply ``change`` to the record the delivery's token owns, by swap.

        ``change`` returns the next version, None to delete, or the record
        itself to write nothing (then a HEAD confirms the token still owns it).
        Returns what was written (None for a delete), or Settlement.LOST.
        """
        job_id = delivery.id
        key = self._key(job_id)
        seen = self._view.get(job_id)
        known: tuple[str, StoredJob] | None = None
        if (
            seen is not None
            and seen.job is not None
            and not seen.job.partial
            and seen.job.token == delivery.token
            and not seen.job.dead
        ):
            known = (seen.etag, seen.job)
        for _ in range(_SETTLE_TRIES):
            if known is None:
                try:
                    known = await self._fetch(job_id)
                except CorruptRecord as exc:
                    log.warning("treating a settlement as lost: %s", exc)
                    return Settlement.LOST
                if known is None:
                    return Settlement.LOST
                if known[1].token != delivery.token or known[1].dead:
                    return Settlement.LOST
            etag, job = known
            new = change(job, self.clock.now())
            try:
                if new is None:
                    await self._remove(job_id, etag)
                elif new is job:
                    if (await self.store.head(key)).etag != etag:
                        raise PreconditionFailed("moved on", key=key)
                else:
                    await self._swap(job_id, new, etag)
                return new
            except PreconditionFailed:
                known = None
            except NotFound:
                self._forget(job_id)
                return Settlement.LOST
        return Settlement.LOST

    async def renew(self, delivery: Delivery, at_least: float) -> float | None:
        def extend(job: StoredJob, now: float) -> StoredJob:
            assert job.lease_expires_at is not None
            wanted = now + at_least
            if wanted <= job.lease_expires_at:
                return job  # never shorten; confirm ownership with a HEAD
            return job.next(now, lease_expires_at=wanted)

        result = await self._settle(delivery, extend)
        if not isinstance(result, StoredJob):
            return None
        return result.lease_expires_at

    async def ack(self, delivery: Delivery) -> Settlement:
        result = await self._settle(delivery, lambda job, now: None)
        return Settlement.LOST if result is Settlement.LOST else Settlement.ACKED

    async def nack(
        self, delivery: Delivery, *, delay: float, count: bool = True, error: str | None = None
    ) -> Settlement:
        def retry(job: StoredJob, now: float) -> StoredJob:
            last_error = error if error is not None else job.last_error
            if count and job.attempts >= job.max_attempts:
                return _killed(job, now, error or "exhausted its attempts", last_error)
            return job.next(
                now,
                attempts=job.attempts if count else job.attempts - 1,
                token=None,
                lease_expires_at=None,
                run_at=now + max(0.0, delay),
                last_error=last_error,
            )

        result = await self._settle(delivery, retry)
        if not isinstance(result, StoredJob):
            return Settlement.LOST
        if result.dead:
            return Settlement.DEAD
        if delay <= 0:
            self._notify()
        return Settlement.RETRIED

    async def dead_letter(self, delivery: Delivery, reason: str) -> Settlement:
        result = await self._settle(
            delivery, lambda job, now: _killed(job, now, reason, job.last_error)
        )
        return Settlement.DEAD if isinstance(result, StoredJob) else Settlement.LOST

    async def release(self, delivery: Delivery) -> Settlement:
        def give_back(job: StoredJob, now: float) -> StoredJob:
            return job.next(
                now,
                attempts=job.attempts - 1,
                token=None,
                lease_expires_at=None,
                run_at=min(job.run_at, now),
            )

        result = await self._settle(delivery, give_back)
        if not isinstance(result, StoredJob):
            return Settlement.LOST
        self._notify()
        return Settlement.RELEASED

    async def cancel(self, id: str) -> bool:
        if not _valid_id(id):
            return False
        key = self._key(id)
        seen = self._view.get(id)
        etag = None if seen is None else seen.etag
        for _ in range(_SETTLE_TRIES):
            try:
                if etag is None:
                    etag = (await self.store.head(key)).etag
                await self.store.delete(key, if_match=etag)
            except PreconditionFailed:
                etag = None
                continue
            except NotFound:
                self._forget(id)
                return False
            self._forget(id)
            return True
        # It keeps changing under us (a busy holder renewing): it exists, so remove it.
        await self.store.delete(key)
        self._forget(id)
        return True

    async def requeue(self, id: str) -> bool:
        if not _valid_id(id):
            return False
        for _ in range(_SETTLE_TRIES):
            fetched = await self._fetch(id)
            if fetched is None or not fetched[1].dead:
                return False
            etag, job = fetched
            now = self.clock.now()
            new = job.next(now, dead=False, dead_reason=None, attempts=0, run_at=now)
            try:
                await self._swap(id, new, etag)
            except (PreconditionFailed, NotFound):
                continue
            self._notify()
            return True
        return False

    async def get(self, id: str) -> JobRecord | None:
        if not _valid_id(id):
            return None
        fetched = await self._fetch(id)
        if fetched is None:
            return None
        return self._record(fetched[1], self.clock.now())

    async def _load(
        self, infos: Iterable[ObjectInfo], *, payload: bool
    ) -> list[tuple[str, StoredJob | None]]:
        """The records behind listed objects, from the view where its etag is
        current (and it holds the payload, if ``payload``), else by GET.
        Gone or undecodable ones come back as None."""

        async def one(info: ObjectInfo) -> tuple[str, StoredJob | None]:
            job_id = info.key[len(self._jobs) :]
            seen = self._view.get(job_id)
            if seen is not None and seen.etag == info.etag:
                if seen.job is None:
                    return job_id, None
                if not (payload and seen.job.partial):
                    return job_id, seen.job
            before = self._etag(job_id)
            obj = await self._get(job_id)
            if obj is None:
                return job_id, None
            try:
                job = self._decode(job_id, obj.etag, obj.data, learn=self._etag(job_id) == before)
            except CorruptRecord:
                return job_id, None
            return job_id, job

        return list(await asyncio.gather(*(one(info) for info in infos)))

    async def list(
        self, status: JobStatus | None = None, *, cursor: str | None = None, limit: int = 100
    ) -> Page:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        now = self.clock.now()
        out: list[JobRecord] = []
        last: str | None = None
        after = None if cursor is None else self._key(cursor)
        while True:
            page = await self.store.list(self._jobs, start_after=after, limit=DEFAULT_PAGE_SIZE)
            pos = 0
            while pos < len(page):
                if len(out) == limit:
                    return Page(out, last)  # more keys follow the last one examined
                chunk = page[pos : pos + limit - len(out)]
                pos += len(chunk)
                for job_id, job in await self._load(chunk, payload=True):
                    last = job_id
                    if job is None:
                        continue
                    record = self._record(job, now)
                    if status is None or record.status == status:
                        out.append(record)
            if len(page) < DEFAULT_PAGE_SIZE:
                return Page(out, None)
            after = page[-1].key

    async def counts(self) -> dict[JobStatus, int]:
        """As QueueInspection's, but a record whose etag the view knows costs no GET."""
        totals = dict.fromkeys(QUEUE_STATUSES, 0)
        now = self.clock.now()
        after: str | None = None
        while True:
            page = await self.store.list(self._jobs, start_after=after, limit=DEFAULT_PAGE_SIZE)
            for _, job in await self._load(page, payload=False):
                if job is not None:
                    totals[self._status(job, now)] += 1
            if len(page) < DEFAULT_PAGE_SIZE:
                return totals
            after = page[-1].key

    async def next_due(self) -> float | None:
        """The earliest run-at or lease expiry in the view not yet seen due by
        a claim (as MemoryQueue: its timed heap's head); now, if the last claim
        came up short with listed records still unread (the next would read
        on)."""
        if self._unread and self._came_up_short:
            return self.clock.now()
        while self._timed:
            due, stamp, job_id = self._timed[0]
            if self._current(job_id, stamp) is not None:
                return due
            heapq.heappop(self._timed)
        return None

    def pending_here(self, id: str) -> bool:
        """True for a record this instance's view holds as waiting, or as
        claimed by this instance under a lease not yet lapsed, and that it
        wrote, read or listed unchanged within ``PENDING_HINT_SECONDS``: a peer
        may have taken it since, but not longer ago than that."""
        seen = self._view.get(id)
        if seen is None or seen.job is None or seen.guessed or seen.job.dead:
            return False
        if time.monotonic() - seen.confirmed >= PENDING_HINT_SECONDS:
            return False
        job = seen.job
        if job.token is None:
            return True
        lease = job.lease_expires_at
        return seen.own and lease is not None and lease > self.clock.now()

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    async def close(self) -> None:
        """Forget the view. The store is the caller's: it is not closed here."""
        self._view.clear()
        self._view_bytes = 0
        self._timed.clear()
        self._line.clear()


_CLAIM_ROUNDS = 8
"""Bound on the rounds of swaps (and re-listings between them) of one claim."""

_PROBE_READS = 4
"""Records read where the unread line jumped to, to see whether it is free."""

_MAX_SPREAD = 16
"""Bound on the claim window's widening under contention (see ``_spread``)."""

_TOKEN_SHAPE = "0" * 24
"""What every token looks like to the encoder (see :meth:`StoreQueue._claimed_elsewhere`)."""


def _new_token() -> str:
    token = secrets.token_hex(12)
    assert len(token) == len(_TOKEN_SHAPE)
    return token


def _payload_size(seen: _Seen | None) -> int:
    if seen is None or seen.job is None:
        return 0
    return len(seen.job.payload)


def _killed(job: StoredJob, now: float, reason: str, last_error: str | None) -> StoredJob:
    return job.next(
        now,
        dead=True,
        dead_reason=reason,
        last_error=last_error,
        token=None,
        lease_expires_at=None,
    )


def _valid_id(job_id: str) -> bool:
    """Whether an id could name a record (a lookup of one that cannot finds nothing)."""
    try:
        check_job_id(job_id)
    except ValueError:
        return False
    return True

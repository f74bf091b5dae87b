"""StoreQueue: the lease queue contract over any ObjectStore, shared by many processes.

Each job is one object, ``<prefix>/jobs/<id>`` (:mod:`runtime.store_queue.records`).
Every change after the create is a compare-and-swap on that object's etag
(``put_if_match``, ``delete(if_match=...)``), so two processes that race for a
job cannot both win: the loser gets PreconditionFailed and moves on. Leases
live in the records, so a lease that lapses is taken over by whichever
process next looks, with nothing running beside the workers.

This module is the contract's operations; what they lean on is in the
package's other modules: the per-process view of the records (``view``),
when to list the prefix again (``pacing``), what listed sizes say without a
read (``size_hints``), the order unread records are read in (``read_line``),
and how a write whose answer was lost is settled (``lost_answers``).
docs/queue.md tabulates the requests and explains each choice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import secrets
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field

from stepstone.store.base import (
    DEFAULT_PAGE_SIZE,
    ObjectInfo,
    ObjectStore,
    StoredObject,
)
from stepstone.store.errors import (
    AlreadyExists,
    NotFound,
    PreconditionFailed,
    StoreError,
    StoreUnavailable,
)
from stepstone.store.file import RecoverableObject
from stepstone.store.keys import validate_key

from ..capabilities import Page, QueueInspection, Waking
from ..clock import Clock, SystemClock
from ..queue import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_PRIORITY_AGING,
    QUEUE_STATUSES,
    Delivery,
    Enqueued,
    JobRecord,
    JobStatus,
    LeaseQueue,
    NewJob,
    Settlement,
    Wait,
    all_or_first_error,
    check_enqueue,
)
from ..run_id import check_run_id
from .lost_answers import landed
from .pacing import ScanPacing, in_slice
from .read_line import ReadLine
from .records import (
    CorruptRecord,
    StoredJob,
    decode,
    delivery_of,
    encode,
    encode_created,
    record_of,
    status_of,
)
from .size_hints import (
    claimed_elsewhere,
    guess_changed,
    held_elsewhere,
    listed_place,
    new_token,
    renewed_elsewhere,
)
from .view import Seen, View

log = logging.getLogger("stepstone.runtime.store_queue")

PENDING_HINT_SECONDS = 5.0
"""How long a record seen pending is taken to still be, for ``pending_here``:
what a handle awaiting a job a peer took may lose in latency."""

_SETTLE_TRIES = 3
"""A transition re-reads the record after a failed swap at most this often.

A swap fails when the view's etag is stale; one re-read decides whether the
token still owns the job. More than one retry only happens when some other
writer keeps changing a record this token owns, which is already a bug."""

_CLAIM_ROUNDS = 8
"""Bound on the rounds of swaps (and re-listings between them) of one claim."""


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


class StoreQueue(LeaseQueue, QueueInspection, Waking):
    """A LeaseQueue whose state lives entirely in an ObjectStore.

    ``scan_interval`` (real seconds, not the injected clock's: it is about
    request cost, not job semantics) spaces the listings that find other
    processes' work: after a listing of ``p`` pages the next waits
    ``p * scan_interval``, so a big backlog is not re-listed every second.
    The first claim always lists; ``scan_interval=0`` lists on every claim
    the view cannot fill. ``fetch_limit`` bounds the records read at once
    from what a listing showed, and the largest chunk they are read in
    (:mod:`runtime.store_queue.read_line`); ``fetch_concurrency`` bounds
    GETs in flight. ``max_view_entries`` and ``max_view_bytes`` (payload
    held) bound the view's memory; past them the least recently touched
    entries are forgotten (and read again if needed). An idle queue backs
    off: from the second listing in a row that found nothing new, each
    doubles the wait, up to ``idle_scan_max`` seconds (LISTs are billed: an
    idle worker listing every second costs ~$13 a month on S3, every 5 s
    ~$2.6); any work this instance makes, or a listing that finds a change,
    restores the usual pace. A job submitted by another process to an idle
    fleet is therefore found within ``idle_scan_max``. In a crowd (an
    instance that finds most records it tries for taken by others) each
    instance lists less often and reads only a slice of what is new, so the
    fleet's requests per job stay near one instance's
    (:mod:`runtime.store_queue.pacing`); then the longest wait is
    ``CROWD_WAIT`` (4) times ``idle_scan_max`` per listing, and a job no
    slice held is read at the listing after.
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
        self.fetch_limit = fetch_limit
        self.max_view_entries = max(1, max_view_entries)
        self.max_view_bytes = max_view_bytes
        self.claim_jitter = max(0.0, claim_jitter)
        self.stats = StoreQueueStats()
        self._jobs = f"{prefix}/jobs/"
        self._view = View(
            max_entries=max_view_entries,
            max_bytes=max_view_bytes,
            priority_aging=priority_aging,
            claim_jitter=claim_jitter,
        )
        self._pacing = ScanPacing(scan_interval, idle_scan_max, fetch_limit)
        self._unread = ReadLine(fetch_limit, self.claim_jitter)
        """What the last listing showed that the view does not know, read as
        claims need them (:meth:`_read_ahead`, :mod:`runtime.store_queue.read_line`)."""
        self._claiming: set[str] = set()
        self._passed: dict[str, str] = {}
        """New records the last listing left to others (outside this
        instance's slice), by etag: read if the next shows them unchanged."""
        self._lease_hint = 60.0
        """The last lease this instance claimed with: the guess for others' leases."""
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

    # -- reading records ---------------------------------------------------

    def _key(self, run_id: str) -> str:
        return self._jobs + run_id

    def _decode(self, run_id: str, etag: str, data: bytes, *, learn: bool = True) -> StoredJob:
        """Decode a record read from the store and (if ``learn``) remember it.
        An undecodable one is counted and logged once per version, remembered
        by etag so listings do not fetch it again, and raised as CorruptRecord."""
        key = self._key(run_id)
        try:
            job = decode(data, key=key)
            if job.id != run_id:
                raise CorruptRecord(f"holds job id {job.id!r}", key=key)
        except CorruptRecord as exc:
            seen = self._view.get(run_id)
            if seen is None or seen.etag != etag:
                self.stats.corrupt_records += 1
                self.stats.corrupt_keys.add(key)
                log.warning("skipping an undecodable queue record: %s", exc)
            if learn:
                self._view.file(run_id, Seen(etag, None, len(data)))
            raise
        if learn:
            self._view.learn_read(run_id, etag, job, len(data))
        return job

    async def _get(self, run_id: str) -> StoredObject | None:
        async with self._fetch_slots:
            try:
                obj = await self.store.get(self._key(run_id))
            except NotFound:
                return None
        self.stats.fetches += 1
        return obj

    async def _fetch(self, run_id: str) -> tuple[str, StoredJob] | None:
        """GET one record and learn it; None when it is gone. Raises CorruptRecord."""
        obj = await self._get(run_id)
        if obj is None:
            self._view.forget(run_id)
            return None
        return obj.etag, self._decode(run_id, obj.etag, obj.data)

    def _candidates(
        self,
        now: float,
        kinds: frozenset[str] | None,
        limit: int,
        skip: Collection[str] = (),
    ) -> list[str]:
        """Up to ``limit`` ids due now, in line order, of ``kinds`` if given,
        not in ``skip`` or being claimed."""
        busy = self._claiming.union(skip) if skip else self._claiming
        return self._view.candidates(now, kinds, limit, busy)

    # -- listing -----------------------------------------------------------

    async def _scan(self) -> None:
        """List the jobs prefix: confirm what the view knows, guess what it
        can from sizes (:mod:`runtime.store_queue.size_hints`), line up the
        rest to be read as claims need them (``_unread``), and drop entries
        whose objects are gone. Concurrent callers share one listing."""
        epoch = self._scan_epoch
        async with self._scan_lock:
            if self._scan_epoch != epoch:
                return  # someone listed while we waited: their view is ours
            now = self.clock.now()
            before = {run_id: seen.etag for run_id, seen in self._view.items()}
            listed: set[str] = set()
            unread: list[tuple[str, str | None, float]] = []
            passed: dict[str, str] = {}
            part = self._pacing.slice()
            count = 0
            async for info in self.store.scan(self._jobs):
                count += 1
                run_id = info.key[len(self._jobs) :]
                listed.add(run_id)
                seen = self._view.get(run_id)
                if seen is not None:
                    if seen.etag == info.etag:
                        seen.confirmed = time.monotonic()
                        continue
                    if (moved := guess_changed(seen, info, now, self._lease_hint)) is not None:
                        self._view.file(run_id, moved)
                        continue
                    if renewed_elsewhere(seen, info, now):
                        continue
                    if (guess := claimed_elsewhere(seen, info, now, self._lease_hint)) is not None:
                        self._view.file(run_id, guess)
                        continue
                    if seen.own:
                        # Perhaps listed before our own write landed: read it only
                        # if the view still holds that write when its turn comes.
                        unread.append((run_id, seen.etag, listed_place(info, self.priority_aging)))
                        continue
                    # Moved on: no claim may swap against the old version.
                    self._view.forget(run_id, seen.etag)
                elif (
                    part is not None
                    and not in_slice(run_id, part)
                    and self._passed.get(run_id) != info.etag
                ):
                    passed[run_id] = info.etag  # another's slice, this time
                    continue
                unread.append((run_id, None, listed_place(info, self.priority_aging)))
            for run_id, etag in before.items():
                if run_id not in listed:
                    self._view.forget(run_id, etag)
            self._unread.reset(unread)
            self._passed = passed
            self.stats.scans += 1
            self._scan_epoch += 1
            changed = bool(unread or passed) or len(listed) != len(before)
            self._pacing.listed(count, changed)

    async def _read_ahead(self, want: int, now: float) -> None:
        """Read the next ``want`` records of the unread line, at most the
        pacing's ``read_batch``. If any turned out taken since the listing (claimed
        elsewhere, or gone), this process has run into another's stretch: it
        jumps, and reads only a few where it lands, in case that is taken too;
        each batch found free doubles the next (:mod:`runtime.store_queue.pacing`)."""
        batch = self._unread.take(min(want, self._pacing.read_batch))
        jobs = await asyncio.gather(*(self._refresh(run_id, etag) for run_id, etag in batch))
        taken = sum(1 for job in jobs if job is None or (job.token and not job.claimable(now)))
        self._pacing.read(taken)
        self._pacing.tried(won=0, lost=taken)
        if taken:
            self._unread.jump()

    async def _refresh(self, run_id: str, known: str | None) -> StoredJob | None:
        """Read a record a listing showed had moved on from etag ``known``,
        unless this instance wrote it meanwhile (its answer would be older).
        Returns what the view then holds for it."""
        if self._view.etag(run_id) == known:
            obj = await self._get(run_id)
            if self._view.etag(run_id) == known:
                if obj is None:
                    self._view.forget(run_id, known)
                else:
                    with contextlib.suppress(CorruptRecord):
                        self._decode(run_id, obj.etag, obj.data)
        seen = self._view.get(run_id)
        return None if seen is None else seen.job

    def _notify(self) -> None:
        self._pacing.work_made()
        for listener in list(self._listeners):
            try:
                listener()
            except Exception:  # a listener's bug must not fail the enqueue
                log.exception("a queue listener failed")

    # -- the contract ------------------------------------------------------

    async def enqueue_many(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        now = self.clock.now()
        return await self._enqueue([self._new_record(job, now) for job in jobs])

    async def enqueue_claimed(
        self, job: NewJob, *, lease: float
    ) -> tuple[Enqueued, Delivery | None]:
        """The record is created holding the caller's lease: one create, where
        an enqueue and a claim take a create and a swap. A job due later is
        enqueued as usual."""
        now = self.clock.now()
        record = self._new_record(job, now)
        if record.run_at > now:
            [enqueued] = await self._enqueue([record])
            return enqueued, None
        claimed = record.next(
            now, attempts=1, claims=1, token=new_token(), lease_expires_at=now + lease
        )
        [enqueued] = all_or_first_error(await self._create([claimed]))
        return enqueued, delivery_of(claimed) if enqueued.created else None

    async def _enqueue(self, records: list[StoredJob]) -> list[Enqueued]:
        """Create ``records`` (``_create``) and tell the listeners if any is new."""
        answers = await self._create(records)
        if any(isinstance(a, Enqueued) and a.created for a in answers):
            self._notify()
        return all_or_first_error(answers)

    async def _create(self, records: list[StoredJob]) -> list[Enqueued | BaseException]:
        """One create-if-absent per record, all in one ``put_many_if_absent``
        (a FileStore makes them durable with one flush of its journal); what
        each did. A record that a recovery after a power cut writes back
        counts as claimed once more (``claims``), so its worker looks for an
        outcome before running it: the record may be one that was acked or
        cancelled just before the cut (docs/storage.md)."""
        encoded = [encode_created(record) for record in records]
        created = await self.store.put_many_if_absent(
            [
                RecoverableObject(self._key(r.id), data, recovered)
                for r, (data, recovered) in zip(records, encoded, strict=True)
            ]
        )
        answers: list[Enqueued | BaseException] = []
        unsure: list[tuple[int, StoredJob, bytes, StoreError]] = []
        for record, (data, _), result in zip(records, encoded, created, strict=True):
            if isinstance(result, str):  # (the common case, answered without a coroutine)
                self._view.learn(record.id, result, record, len(data))
                answers.append(Enqueued(record.id, created=True, version=result))
            else:  # refused, or its answer lost: ``_created`` says which
                unsure.append((len(answers), record, data, result))
                answers.append(Enqueued(record.id, created=False))
        settled = await asyncio.gather(
            *(self._created(record, data, result) for _, record, data, result in unsure),
            return_exceptions=True,
        )
        for (i, *_), answer in zip(unsure, settled, strict=True):
            answers[i] = answer
        return answers

    def _new_record(self, job: NewJob, now: float) -> StoredJob:
        run_id = check_enqueue(
            job.payload,
            id=job.id,
            priority=job.priority,
            max_attempts=job.max_attempts,
            max_payload_bytes=self.max_payload_bytes,
        )
        return StoredJob(
            id=run_id,
            kind=job.kind,
            payload=bytes(job.payload),
            priority=job.priority,
            max_attempts=job.max_attempts or self.default_max_attempts,
            run_at=now if job.run_at is None else float(job.run_at),
            created_at=now,
            updated_at=now,
            nonce=secrets.token_hex(8),
            headers=dict(job.headers or {}),
        )

    async def _created(self, job: StoredJob, data: bytes, result: str | StoreError) -> Enqueued:
        """What one create of ``put_many_if_absent`` did, as an Enqueued."""
        if isinstance(result, AlreadyExists):
            return Enqueued(job.id, created=False)
        if isinstance(result, StoreUnavailable):
            # The create may have landed with only its answer lost. The nonce
            # makes our bytes unique: if the record holds them, it is ours.
            try:
                result = await landed(self.store, self._key(job.id), data, None, result)
            except PreconditionFailed:
                return Enqueued(job.id, created=False)
        if isinstance(result, StoreError):
            raise result
        self._view.learn(job.id, result, job, len(data))
        return Enqueued(job.id, created=True, version=result)

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
        if self._pacing.list_first(
            began, len(candidates) < n, (self._view[i].confirmed for i in candidates)
        ):
            await self._scan()
            now = self.clock.now()
        out: list[Delivery] = []
        tried: set[str] = set()
        refused_before = self._pacing.refusals
        for _ in range(_CLAIM_ROUNDS):
            need = n - len(out)
            # Under contention other processes hold the same view in the same
            # order and race for its head: take ours from a wider, shuffled head.
            candidates = self._candidates(now, wanted, need * self._pacing.spread, tried)
            if len(candidates) < need and self._unread:
                await self._read_ahead(need - len(candidates), now)
                candidates = self._candidates(now, wanted, need * self._pacing.spread, tried)
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
            if self._pacing.stale():
                await self._scan()  # cheaper than more refusals from a stale view
                now = self.clock.now()
        self._came_up_short = len(out) < n
        self._pacing.claimed(contended=self._pacing.refusals > refused_before)
        return out

    async def _claim_one(
        self, run_id: str, now: float, lease: float, fresh_since: float
    ) -> Delivery | None:
        seen = self._view.get(run_id)
        # Checked again here, not only when the candidates were picked: a
        # concurrent claim in this process may have taken it since, and its
        # etag in the view is then the one our swap would match.
        if (
            seen is None
            or seen.job is None
            or run_id in self._claiming
            or not seen.job.claimable(now)
        ):
            return None
        self._claiming.add(run_id)
        try:
            etag, job = seen.etag, seen.job
            if job.partial:  # a lapsed lease of another process: its payload is not here
                try:
                    fetched = await self._fetch(run_id)
                except (CorruptRecord, StoreUnavailable):
                    return None
                if fetched is None or not fetched[1].claimable(now):
                    return None
                etag, job = fetched
            new = job.next(
                now,
                attempts=job.attempts + 1,
                claims=job.claims + 1,
                token=new_token(),
                lease_expires_at=now + lease,
                wait=None,
                woken=False,
            )
            try:
                await self._swap(run_id, new, etag)
            except NotFound:
                self._pacing.refused(seen.confirmed, fresh_since)
                self._pacing.tried(won=0, lost=1)
                self._view.forget(run_id, etag)
                return None
            except PreconditionFailed:
                # Someone else moved it first, most likely by claiming it. Say
                # so (keeping the stale etag): the next listing then reads it
                # only if its size says otherwise.
                self.stats.lost_races += 1
                self._pacing.refused(seen.confirmed, fresh_since)
                self._pacing.tried(won=0, lost=1)
                current = self._view.get(run_id)
                if current is not None and current.etag == etag:
                    self._view.file(run_id, held_elsewhere(job, etag, now, self._lease_hint))
                return None
            except StoreUnavailable:
                # Not raised: the other claims of this batch landed, and failing
                # the batch would strand them. The write itself may have landed
                # with only its answer lost: then the record holds our token.
                try:
                    fetched = await self._fetch(run_id)
                except (CorruptRecord, StoreUnavailable):
                    return None
                if fetched is None or fetched[1].token != new.token:
                    return None
                self._pacing.tried(won=1, lost=0)
                return delivery_of(fetched[1])
            self._pacing.tried(won=1, lost=0)
            return delivery_of(new)
        finally:
            self._claiming.discard(run_id)

    async def _swap(self, run_id: str, new: StoredJob, etag: str) -> None:
        """Write ``new`` over version ``etag`` and learn it. Raises
        PreconditionFailed or NotFound when the record moved on or went, and
        StoreUnavailable only when the write certainly did not land."""
        data = encode(new)
        key = self._key(run_id)
        try:
            new_etag = await self.store.put_if_match(key, data, etag)
        except StoreUnavailable as error:
            new_etag = await landed(self.store, key, data, etag, error)
        self._view.learn(run_id, new_etag, new, len(data))

    async def _remove(self, run_id: str, etag: str) -> None:
        """Delete version ``etag``; like :meth:`_swap` for a delete."""
        key = self._key(run_id)
        try:
            await self.store.delete(key, if_match=etag)
        except StoreUnavailable as error:
            await landed(self.store, key, None, etag, error)
        self._view.forget(run_id)

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
        run_id = delivery.id
        key = self._key(run_id)
        seen = self._view.get(run_id)
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
                    known = await self._fetch(run_id)
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
                    await self._remove(run_id, etag)
                elif new is job:
                    if (await self.store.head(key)).etag != etag:
                        raise PreconditionFailed("moved on", key=key)
                else:
                    await self._swap(run_id, new, etag)
                return new
            except PreconditionFailed:
                known = None
            except NotFound:
                self._view.forget(run_id)
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

    async def suspend(self, delivery: Delivery, *, until: float, wait: Wait) -> Settlement:
        def give_back(job: StoredJob, now: float) -> StoredJob:
            if job.woken:  # woken while it ran: due at once, to look again
                return job.next(
                    now,
                    attempts=job.attempts - 1,
                    token=None,
                    lease_expires_at=None,
                    run_at=now,
                    woken=False,
                    wait=None,
                )
            return job.next(
                now,
                attempts=job.attempts - 1,
                token=None,
                lease_expires_at=None,
                run_at=until,
                wait=(wait.status.value, wait.detail),
            )

        result = await self._settle(delivery, give_back)
        if not isinstance(result, StoredJob):
            return Settlement.LOST
        if result.wait is None:
            self._notify()
            return Settlement.RETRIED
        return Settlement.SUSPENDED

    async def wake(self, run_id: str) -> bool:
        if not _valid_id(run_id):
            return False
        for _ in range(_SETTLE_TRIES):
            try:
                fetched = await self._fetch(run_id)
            except CorruptRecord:
                return False
            if fetched is None or fetched[1].dead:
                return False
            etag, job = fetched
            now = self.clock.now()
            # Due "now" by this process's clock may be the future by the clock
            # of the process that suspended the job (docs/guarantees.md, clock
            # agreement): due since its last change is due by both. For the
            # same reason a held job is marked even if its lease looks lapsed
            # here: its holder may still be running it.
            due = min(now, job.updated_at)
            if job.token is not None:
                if job.woken:
                    return True  # already marked
                new = job.next(now, woken=True)
            elif job.run_at > due:
                new = job.next(now, run_at=due, wait=None)
            else:
                return True  # due already
            try:
                await self._swap(run_id, new, etag)
            except (PreconditionFailed, NotFound):
                continue  # it moved on (claimed, settled): look again
            if new.token is None:
                self._notify()
            return True
        return True  # it keeps moving: it is live, and whoever moves it sees the work

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

    async def cancel(self, run_id: str) -> bool:
        if not _valid_id(run_id):
            return False
        key = self._key(run_id)
        seen = self._view.get(run_id)
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
                self._view.forget(run_id)
                return False
            self._view.forget(run_id)
            return True
        # It keeps changing under us (a busy holder renewing): it exists, so remove it.
        await self.store.delete(key)
        self._view.forget(run_id)
        return True

    async def withdraw(self, enqueued: Enqueued) -> bool:
        """A delete fenced on the etag the create answered."""
        etag = enqueued.version
        if etag is None or not _valid_id(enqueued.id):  # (only a create has a version)
            return False
        try:
            await self._remove(enqueued.id, etag)
        except (PreconditionFailed, NotFound):
            self._view.forget(enqueued.id, etag)  # (if the view still holds that version)
            return False
        return True

    async def discard_dead(self, run_id: str) -> bool:
        """Delete the record if it is dead, fenced on the dead version's etag
        (a requeue in between wins)."""
        return await self._if_dead(run_id, lambda etag, _: self._remove(run_id, etag))

    async def requeue(self, run_id: str) -> bool:
        async def revive(etag: str, job: StoredJob) -> None:
            now = self.clock.now()
            new = job.next(now, dead=False, dead_reason=None, attempts=0, run_at=now)
            await self._swap(run_id, new, etag)

        if not await self._if_dead(run_id, revive):
            return False
        self._notify()
        return True

    async def _if_dead(self, id: str, act: Callable[[str, StoredJob], Awaitable[None]]) -> bool:
        """Do ``act(etag, job)`` to the record if it is dead, a write fenced on
        that etag; a record that moved on meanwhile is looked at again. False
        when there is no dead record of ``id`` (or it kept moving)."""
        if not _valid_id(id):
            return False
        for _ in range(_SETTLE_TRIES):
            fetched = await self._fetch(id)
            if fetched is None or not fetched[1].dead:
                return False
            try:
                await act(*fetched)
            except (PreconditionFailed, NotFound):
                continue
            return True
        return False

    async def get(self, run_id: str) -> JobRecord | None:
        if not _valid_id(run_id):
            return None
        fetched = await self._fetch(run_id)
        if fetched is None:
            return None
        return record_of(fetched[1], self.clock.now())

    async def _load(
        self, infos: Iterable[ObjectInfo], *, payload: bool
    ) -> list[tuple[str, StoredJob | None]]:
        """The records behind listed objects, from the view where its etag is
        current (and it holds the payload, if ``payload``), else by GET.
        Gone or undecodable ones come back as None."""

        async def one(info: ObjectInfo) -> tuple[str, StoredJob | None]:
            run_id = info.key[len(self._jobs) :]
            seen = self._view.get(run_id)
            if seen is not None and seen.etag == info.etag:
                if seen.job is None:
                    return run_id, None
                if not (payload and seen.job.partial):
                    return run_id, seen.job
            before = self._view.etag(run_id)
            obj = await self._get(run_id)
            if obj is None:
                return run_id, None
            try:
                job = self._decode(
                    run_id, obj.etag, obj.data, learn=self._view.etag(run_id) == before
                )
            except CorruptRecord:
                return run_id, None
            return run_id, job

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
                for run_id, job in await self._load(chunk, payload=True):
                    last = run_id
                    if job is None:
                        continue
                    record = record_of(job, now)
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
                    totals[status_of(job, now)] += 1
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
        return self._view.next_due()

    def pending_here(self, run_id: str) -> bool:
        """True for a record this instance's view holds as waiting, or as
        claimed by this instance under a lease not yet lapsed, and that it
        wrote, read or listed unchanged within ``PENDING_HINT_SECONDS``: a peer
        may have taken it since, but not longer ago than that."""
        seen = self._view.get(run_id)
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


def _killed(job: StoredJob, now: float, reason: str, last_error: str | None) -> StoredJob:
    return job.next(
        now,
        dead=True,
        dead_reason=reason,
        last_error=last_error,
        token=None,
        lease_expires_at=None,
    )


def _valid_id(run_id: str) -> bool:
    """Whether an id could name a record (a lookup of one that cannot finds nothing)."""
    try:
        check_run_id(run_id)
    except ValueError:
        return False
    return True

"""StoreQueue: the lease queue contract over any ObjectStore, shared by many processes.

Each job is one object, ``<prefix>/jobs/<id>``
(:mod:`stepstone.runtime.store_queue.records`). Every change after the create
is a compare-and-swap on that object's etag (``put_if_match``,
``delete(if_match=...)``), so two processes that race for a job cannot both
win: the loser gets PreconditionFailed and moves on. Leases live in the
records, so a lease that lapses is taken over by whichever process next
looks, with nothing running beside the workers.

This module is the class: it holds one instance's parts and hands each
operation to the part that carries it out (the package docstring maps them).
docs/queue.md tabulates the requests and explains each choice.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Collection, Iterator, Sequence

from stepstone.store.base import ChangeNotices, ObjectStore
from stepstone.store.keys import validate_key

from ..capabilities import (
    ClaimedEnqueue,
    IdleHints,
    JobSurvey,
    Page,
    PendingHere,
    QueueInspection,
    Reclaiming,
    Survey,
    Waking,
    Withdrawing,
)
from ..clock import Clock, SystemClock
from ..decision import Ack, Dead, Decision, Release, Retry, Suspended
from ..listeners import Listeners
from ..queue import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_PRIORITY_AGING,
    Delivery,
    Enqueued,
    JobRecord,
    LeaseQueue,
    NewJob,
    Settlement,
    all_or_first_error,
)
from ..status import JobStatus
from . import creates
from .admin import RecordAdmin
from .claims import ClaimRace
from .discovery import Discovery
from .doorbell import Doorbell
from .inspection import RecordInspection
from .pacing import ScanPacing
from .reclaims import reclaim
from .record_cache import RecordCache
from .record_io import RecordIO, StoreQueueStats
from .records import StoredJob, delivery_of
from .size_hints import new_token
from .transitions import RecordTransitions

log = logging.getLogger("stepstone.runtime.store_queue")

DOORBELL_LOOK = 0.5
"""Seconds between an idle worker's looks at a bucket's doorbell (a HEAD),
by default: 2 HEADs a second, about $2.07 a month per idle worker on S3,
for a median pickup of about a quarter of a second (docs/queue.md)."""

PENDING_HINT_SECONDS = 5.0
"""How long a record seen pending is taken to still be, for ``pending_here``:
what a handle awaiting a job a peer took may lose in latency."""


class StoreQueue(
    LeaseQueue,
    QueueInspection,
    JobSurvey,
    Waking,
    Reclaiming,
    ClaimedEnqueue,
    Withdrawing,
    IdleHints,
    PendingHere,
):
    """A LeaseQueue whose state lives entirely in an ObjectStore.

    ``scan_interval`` (real seconds, not the injected clock's: it is about
    request cost, not job semantics) spaces the listings that find other
    processes' work: after a listing of ``p`` pages the next waits
    ``p * scan_interval``, so a big backlog is not re-listed every second.
    The first claim always lists; ``scan_interval=0`` lists on every claim
    the cache cannot fill. ``fetch_limit`` bounds the records read at once
    from what a listing showed, and the largest chunk they are read in
    (:mod:`stepstone.runtime.store_queue.read_line`); ``fetch_concurrency``
    bounds GETs in flight. ``max_cache_entries`` and ``max_cache_bytes``
    (payload held) bound the cache's memory; past them the least recently
    touched entries are forgotten (and read again if needed). An idle queue
    backs off, because LISTs are billed (docs/queue.md prices it): from the
    second listing in a row that found nothing new, each doubles the wait, up
    to ``idle_scan_max`` seconds; any work this instance makes, or a listing
    that finds a change, restores the usual pace. A job submitted by another
    process to an idle fleet is therefore found within ``idle_scan_max``. In
    a crowd (an instance that finds most records it tries for taken by
    others) each instance lists less often and reads only a slice of what is
    new, so the fleet's requests per job stay near one instance's
    (:mod:`stepstone.runtime.store_queue.pacing`); then the longest wait is
    ``CROWD_WAIT`` times ``idle_scan_max`` per listing, and a job no slice
    held is read at the listing after.

    ``doorbell`` is the seconds between an idle claimer's looks (a HEAD) at
    the doorbell, a small object every enqueue rewrites (at most once a
    second per instance): a look that finds it changed lists at once, so a
    job another process submits to an idle fleet is found within about
    ``doorbell`` seconds instead of ``idle_scan_max``, for a HEAD where a
    LIST would cost 12.5 (:mod:`stepstone.runtime.store_queue.doorbell`).
    By default 0.5 s on a bucket (``s3://``), and none (0) on other stores:
    a directory store's workers hear of new records from the store itself.
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
        max_cache_entries: int = 100_000,
        max_cache_bytes: int = 64 * 1024 * 1024,
        claim_jitter: float = 0.5,
        idle_scan_max: float = 5.0,
        doorbell: float | None = None,
    ) -> None:
        if default_max_attempts < 1:
            raise ValueError(f"default_max_attempts must be at least 1, got {default_max_attempts}")
        if scan_interval < 0 or fetch_concurrency < 1 or fetch_limit < 1:
            raise ValueError("scan_interval must be >= 0, fetch_concurrency and fetch_limit >= 1")
        if doorbell is not None and doorbell < 0:
            raise ValueError(f"doorbell must be >= 0 seconds (0: none), got {doorbell}")
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
        self.max_cache_entries = max(1, max_cache_entries)
        self.max_cache_bytes = max_cache_bytes
        self.claim_jitter = max(0.0, claim_jitter)
        self.stats = StoreQueueStats()
        self._listeners = Listeners()
        self._cache = RecordCache(
            max_entries=max_cache_entries,
            max_bytes=max_cache_bytes,
            priority_aging=priority_aging,
            claim_jitter=claim_jitter,
        )
        self._pacing = ScanPacing(scan_interval, idle_scan_max, fetch_limit)
        self._io = RecordIO(
            store, f"{prefix}/jobs/", self._cache, self.stats, fetch_concurrency=fetch_concurrency
        )
        self._discovery = Discovery(
            self._io,
            self._pacing,
            self._clock,
            priority_aging=priority_aging,
            fetch_limit=fetch_limit,
            claim_jitter=self.claim_jitter,
        )
        if doorbell is None:  # a bucket's: no notices there, and a LIST costs 12.5 HEADs
            doorbell = DOORBELL_LOOK if store.location.startswith("s3://") else 0.0
        self.doorbell = Doorbell(store, f"{prefix}/doorbell", doorbell)
        self._claims = ClaimRace(
            self._io, self._discovery, self._pacing, self._clock, self.doorbell
        )
        self._transitions = RecordTransitions(self._io, self._clock, self._notify)
        self._admin = RecordAdmin(self._io, self._clock, self._notify)
        self._inspection = RecordInspection(self._io, self._clock)
        self._stop_notices: Callable[[], None] | None = None
        self._subscribers = 0
        self._creating: dict[str, int] = {}
        """Ids this instance is creating: a notice of one is of its own write."""

    def __repr__(self) -> str:
        return f"<StoreQueue {self.store!r} prefix={self.prefix!r}>"

    @property
    def clock(self) -> Clock:
        return self._clock

    def _notify(self) -> None:
        self._pacing.work_made()
        self._listeners.call(on_error=_listener_failed)

    def _candidates(
        self,
        now: float,
        kinds: frozenset[str] | None,
        limit: int,
        skip: Collection[str] = (),
    ) -> list[str]:
        """The ids a claim would try now (:meth:`ClaimRace.candidates`)."""
        return self._claims.candidates(now, kinds, limit, skip)

    # -- enqueue (stepstone.runtime.store_queue.creates) --------------------

    def _new_record(self, job: NewJob, now: float) -> StoredJob:
        return creates.new_record(
            job,
            now,
            default_max_attempts=self.default_max_attempts,
            max_payload_bytes=self.max_payload_bytes,
        )

    async def enqueue_many(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        now = self.clock.now()
        return await self._enqueue([self._new_record(job, now) for job in jobs])

    async def enqueue_claimed(
        self, job: NewJob, *, lease: float, holder: str | None = None
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
            now, attempts=1, claims=1, token=new_token(holder), lease_expires_at=now + lease
        )
        with self._writing([claimed]):
            [enqueued] = all_or_first_error(await creates.create(self._io, [claimed]))
        return enqueued, delivery_of(claimed) if enqueued.created else None

    async def _enqueue(self, records: list[StoredJob]) -> list[Enqueued]:
        """Create ``records`` and tell the listeners if any is new."""
        with self._writing(records):
            answers = await creates.create(self._io, records)
        if any(isinstance(a, Enqueued) and a.created for a in answers):
            self._notify()
            await self.doorbell.ring()
        return all_or_first_error(answers)

    # -- claims (stepstone.runtime.store_queue.claims) ----------------------

    async def claim(
        self,
        n: int,
        *,
        lease: float,
        kinds: Collection[str] | None = None,
        holder: str | None = None,
    ) -> list[Delivery]:
        return await self._claims.claim(n, lease=lease, kinds=kinds, holder=holder)

    @property
    def holder_scope(self) -> str:
        """The store and prefix; a process's own MemoryStore is its alone."""
        scope = f"{self.store.location}|{self.prefix}"
        if scope.startswith("memory://"):
            scope += f"|{id(self.store)}"
        return scope

    async def reclaim(
        self,
        holder: str,
        *,
        lease: float,
        limit: int,
        within: float,
        kinds: Collection[str] | None = None,
    ) -> list[Delivery]:
        """See :class:`~stepstone.runtime.capabilities.Reclaiming`: one LIST,
        a GET of each record changed within ``within`` seconds, and a swap of
        each found held as ``holder``."""
        return await reclaim(
            self._io, self.clock, holder, lease=lease, limit=limit, within=within, kinds=kinds
        )

    async def next_due(self) -> float | None:
        """The earliest run-at or lease expiry in the cache not yet seen due by
        a claim (as MemoryQueue: its timed heap's head); now, if the last claim
        came up short with listed records still unread (the next would read
        on)."""
        if self._discovery.unread and self._claims.came_up_short:
            return self.clock.now()
        return self._cache.next_due()

    def next_look(self) -> float | None:
        """While claims come up short, the real seconds until the next look at
        the doorbell (a claim then looks)."""
        if not self._claims.came_up_short:
            return None
        return self.doorbell.seconds_to_look()

    # -- after a claim (stepstone.runtime.store_queue.transitions) ----------

    async def renew(self, delivery: Delivery, at_least: float) -> float | None:
        return await self._transitions.renew(delivery, at_least)

    async def settle(self, delivery: Delivery, decision: Decision) -> Settlement:
        transitions = self._transitions
        match decision:
            case Ack():
                return await transitions.ack(delivery)
            case Retry():
                return await transitions.nack(
                    delivery, delay=decision.delay, count=decision.count, error=decision.kept_error
                )
            case Suspended():
                return await transitions.suspend(delivery, until=decision.until, wait=decision.wait)
            case Dead():
                return await transitions.dead_letter(delivery, decision.reason)
            case Release():
                return await transitions.release(delivery)

    async def wake(
        self, run_id: str, waiting_for: JobStatus, *, arrived: str | None = None
    ) -> bool:
        return await self._transitions.wake(run_id, waiting_for, arrived)

    # -- outside a claim (stepstone.runtime.store_queue.admin) --------------

    async def cancel(self, run_id: str) -> bool:
        return await self._admin.cancel(run_id)

    async def withdraw(self, enqueued: Enqueued) -> bool:
        """A delete fenced on the etag the create answered."""
        return await self._admin.withdraw(enqueued)

    async def discard_dead(self, run_id: str) -> bool:
        """Delete the record if it is dead, fenced on the dead version's etag
        (a requeue in between wins)."""
        return await self._admin.discard_dead(run_id)

    async def requeue(self, run_id: str) -> bool:
        return await self._admin.requeue(run_id)

    # -- reading (stepstone.runtime.store_queue.inspection) -----------------

    async def get(self, run_id: str) -> JobRecord | None:
        return await self._inspection.get(run_id)

    async def list(
        self, status: JobStatus | None = None, *, cursor: str | None = None, limit: int = 100
    ) -> Page:
        return await self._inspection.page(status, cursor=cursor, limit=limit)

    async def counts(self) -> dict[JobStatus, int]:
        """As QueueInspection's, but a record whose etag the cache knows costs no GET."""
        return await self._inspection.counts()

    async def survey(self, *, reads: int) -> Survey:
        return await self._inspection.survey(reads=reads)

    # -- this process ------------------------------------------------------

    def pending_here(self, run_id: str) -> bool:
        """True for a record this instance's cache holds as waiting, or as
        claimed by this instance under a lease not yet lapsed, and that it
        wrote, read or listed unchanged within ``PENDING_HINT_SECONDS``: a peer
        may have taken it since, but not longer ago than that."""
        seen = self._cache.get(run_id)
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
        """As the contract's, and while anyone listens (a worker), the store's
        notices of records other processes create are heard too, where the
        store gives them (a FileStore on Linux): each new record is read as
        the next claim wants one and the listener called, so an idle worker
        starts another process's job at once instead of at its next listing.
        Listings go on at their pace: a notice is a hint."""
        remove = self._listeners.add(listener)
        self._subscribers += 1
        if self._subscribers == 1:
            self._start_notices()
        ended = False

        def unsubscribe() -> None:
            nonlocal ended
            if ended:
                return
            ended = True
            remove()
            self._subscribers -= 1
            if self._subscribers == 0 and self._stop_notices is not None:
                stop, self._stop_notices = self._stop_notices, None
                stop()

        return unsubscribe

    @contextlib.contextmanager
    def _writing(self, records: Sequence[StoredJob]) -> Iterator[None]:
        """While ``records`` are created here, notices of them are our own."""
        for record in records:
            self._creating[record.id] = self._creating.get(record.id, 0) + 1
        try:
            yield
        finally:
            for record in records:
                left = self._creating.pop(record.id) - 1
                if left:
                    self._creating[record.id] = left

    def _start_notices(self) -> None:
        if not isinstance(self.store, ChangeNotices):
            return
        try:
            self._stop_notices = self.store.watch_changes(self._io.jobs, self._noticed)
        except RuntimeError:  # no running event loop: listings alone find work
            self._stop_notices = None

    def _noticed(self, key: str | None) -> None:
        """The store placed ``key`` (None: notices were lost). A record this
        instance knows changed: its listings follow that. A new one: read it
        at the next claim, and wake the listeners."""
        if key is None:
            self._pacing.list_soon()
        else:
            run_id = self._io.run_id_of(key)
            if not run_id or run_id in self._creating or self._cache.get(run_id) is not None:
                return
            self._discovery.hint(run_id)
        self._listeners.call(on_error=_listener_failed)

    async def close(self) -> None:
        """Forget the cache and stop hearing the store's notices. The store is
        the caller's: it is not closed here."""
        await self.doorbell.close()
        if self._stop_notices is not None:
            stop, self._stop_notices = self._stop_notices, None
            stop()
        self._cache.clear()


def _listener_failed(error: Exception) -> None:
    """A listener's bug must not fail the enqueue (or settlement) that told it."""
    log.error("a queue listener failed", exc_info=error)

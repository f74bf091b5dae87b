"""MemoryQueue: the lease queue in one process's memory.

No durability: for tests, examples and embedded use where a lost job on a
crash is acceptable. Its semantics are the contract's, exactly; the
StoreQueue is tested against the same suite.

Ready jobs sit in a line ordered by (due + priority * aging), in lanes by
fairness key served round-robin (:mod:`stepstone.runtime.fair_line`); scheduled and
leased jobs sit in a second heap ordered by the time they next need a look
(run-at, lease expiry). Heap entries carry the record's version, and an entry
whose record has moved on since is skipped when popped, so no transition
has to search a heap.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import secrets
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from .capabilities import (
    ClaimedEnqueue,
    IdleHints,
    Page,
    PendingHere,
    QueueInspection,
    Waking,
    Withdrawing,
)
from .clock import Clock, SystemClock
from .decision import Ack, Dead, Decision, Release, Retry, Suspended
from .fair_line import FairLine
from .fairness import fairness_of
from .listeners import Listeners
from .queue import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_PAYLOAD_BYTES,
    DEFAULT_PRIORITY_AGING,
    Delivery,
    Enqueued,
    JobRecord,
    LeaseQueue,
    NewJob,
    Settlement,
    check_enqueue,
    enqueue_each,
    sort_key,
)
from .status import JobStatus, Wait, still_pending


@dataclass(slots=True)
class _Rec:
    id: str
    kind: str
    payload: bytes
    priority: int
    max_attempts: int
    headers: dict[str, str]
    run_at: float
    created_at: float
    updated_at: float
    attempts: int = 0
    claims: int = 0
    lapses: int = 0
    version: int = 0
    token: str | None = None
    lease_expires_at: float | None = None
    dead: bool = False
    last_error: str | None = None
    dead_reason: str | None = None
    wait: Wait | None = None
    woken: bool = False
    arrivals: tuple[str, ...] = ()
    serial: int = 0
    """Tells this record from another of its id made later (``withdraw``)."""
    fairness: tuple[str, int] = ("", 1)
    """Its fairness key and weight (:mod:`stepstone.runtime.fairness`)."""

    @property
    def made(self) -> str:
        """Which record this is, and which of its versions."""
        return f"{self.serial}.{self.version}"


class MemoryQueue(
    LeaseQueue,
    QueueInspection,
    Waking,
    ClaimedEnqueue,
    Withdrawing,
    IdleHints,
    PendingHere,
):
    """A lease queue in this process's memory: the whole contract, for tests,
    examples and a runner embedded in one process. A crash loses it."""

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        default_max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        priority_aging: float = DEFAULT_PRIORITY_AGING,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        self._clock = clock or SystemClock()
        self.default_max_attempts = default_max_attempts
        self.priority_aging = priority_aging
        self.max_payload_bytes = max_payload_bytes
        self._records: dict[str, _Rec] = {}
        self._ready = FairLine()
        self._timed: list[tuple[float, int, str, int]] = []
        self._seq = itertools.count()
        self._listeners = Listeners()
        self._token_prefix = secrets.token_hex(4)
        self._tokens = itertools.count(1)

    @property
    def clock(self) -> Clock:
        return self._clock

    # -- bookkeeping -------------------------------------------------------

    def _touch(self, rec: _Rec) -> None:
        """Record a change: bump the version (orphaning old heap entries) and
        file the record in the heap its new state belongs to."""
        rec.version += 1
        rec.updated_at = self.clock.now()
        if rec.dead:
            return
        if rec.token is not None:
            assert rec.lease_expires_at is not None
            entry = (rec.lease_expires_at, next(self._seq), rec.id, rec.version)
            heapq.heappush(self._timed, entry)
        elif rec.run_at > rec.updated_at:
            heapq.heappush(self._timed, (rec.run_at, next(self._seq), rec.id, rec.version))
        else:
            self._push_ready(rec)

    def _push_ready(self, rec: _Rec) -> None:
        key = sort_key(rec.run_at, rec.priority, self.priority_aging)
        fkey, weight = rec.fairness
        self._ready.push(key, rec.priority, fkey, weight, rec.id, rec.version)

    def _promote_due(self, now: float) -> None:
        """Move scheduled jobs that came due, and leases that lapsed, to ready."""
        while self._timed and self._timed[0][0] <= now:
            _, _, id_, version = heapq.heappop(self._timed)
            rec = self._records.get(id_)
            if rec is None or rec.version != version or rec.dead:
                continue
            self._push_ready(rec)

    def _notify(self) -> None:
        self._listeners.call()

    def _owned(self, delivery: Delivery) -> _Rec | None:
        rec = self._records.get(delivery.id)
        if rec is None or rec.dead or rec.token != delivery.token:
            return None
        return rec

    def _status(self, rec: _Rec, now: float) -> JobStatus:
        if rec.dead:
            return JobStatus.DEAD
        if rec.token is not None:
            return JobStatus.RUNNING
        if rec.run_at <= now:
            return JobStatus.READY
        return JobStatus.SCHEDULED if rec.wait is None else rec.wait.status

    def _record(self, rec: _Rec, now: float) -> JobRecord:
        return JobRecord(
            id=rec.id,
            kind=rec.kind,
            status=self._status(rec, now),
            priority=rec.priority,
            attempts=rec.attempts,
            max_attempts=rec.max_attempts,
            run_at=rec.run_at,
            created_at=rec.created_at,
            updated_at=rec.updated_at,
            payload=rec.payload,
            headers=dict(rec.headers),
            lease_expires_at=rec.lease_expires_at,
            last_error=rec.last_error,
            dead_reason=rec.dead_reason,
            wait=rec.wait if rec.token is None and rec.run_at > now else None,
            lapses=rec.lapses,
        )

    # -- the contract ------------------------------------------------------

    async def enqueue_many(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        return await enqueue_each(jobs, self._enqueue_one)

    async def _enqueue_one(self, job: NewJob) -> Enqueued:
        run_id, rec = self._add(job)
        if rec is None:
            return Enqueued(run_id, created=False)
        self._touch(rec)
        self._notify()
        return Enqueued(rec.id, created=True, version=rec.made)

    async def enqueue_claimed(
        self, job: NewJob, *, lease: float, holder: str | None = None
    ) -> tuple[Enqueued, Delivery | None]:
        run_id, rec = self._add(job)
        if rec is None:
            return Enqueued(run_id, created=False), None
        now = self.clock.now()
        if rec.run_at > now:
            self._touch(rec)
            self._notify()
            return Enqueued(rec.id, created=True, version=rec.made), None
        delivery = self._lease(rec, now, lease)
        return Enqueued(rec.id, created=True, version=rec.made), delivery

    def _add(self, job: NewJob) -> tuple[str, _Rec | None]:
        """``job``'s id and its new record, not yet placed in a heap
        (``_touch``); no record if the id is taken."""
        run_id = check_enqueue(
            job.payload,
            id=job.id,
            priority=job.priority,
            max_attempts=job.max_attempts,
            max_payload_bytes=self.max_payload_bytes,
            run_at=job.run_at,
        )
        if run_id in self._records:
            return run_id, None
        now = self.clock.now()
        rec = _Rec(
            id=run_id,
            kind=job.kind,
            payload=bytes(job.payload),
            priority=job.priority,
            max_attempts=job.max_attempts or self.default_max_attempts,
            headers=dict(job.headers or {}),
            run_at=now if job.run_at is None else job.run_at,
            created_at=now,
            updated_at=now,
            serial=next(self._seq),
            fairness=fairness_of(job.headers or {}),
        )
        self._records[run_id] = rec
        return run_id, rec

    async def claim(
        self,
        n: int,
        *,
        lease: float,
        kinds: Collection[str] | None = None,
        holder: str | None = None,
    ) -> list[Delivery]:
        now = self.clock.now()
        self._promote_due(now)
        wanted = None if kinds is None else set(kinds)

        def current(run_id: str, version: int) -> bool:
            rec = self._records.get(run_id)
            return rec is not None and rec.version == version and not rec.dead

        def accept(run_id: str) -> bool:
            return wanted is None or self._records[run_id].kind in wanted

        out: list[Delivery] = []
        for run_id, _, _ in self._ready.order(n, current, accept):
            out.append(self._lease(self._records[run_id], now, lease))
        return out

    def _lease(self, rec: _Rec, now: float, lease: float) -> Delivery:
        """Claim ``rec`` for ``lease`` seconds, under a new token: one attempt
        more, or one lapse more when it takes over a claim whose lease lapsed
        (that attempt never ended: this claim goes on with it)."""
        took_over = rec.token is not None
        if took_over:
            rec.lapses += 1
        else:
            rec.attempts += 1
        rec.claims += 1
        self._ready.served(*rec.fairness)
        rec.wait, rec.woken, rec.arrivals = None, False, ()
        rec.token = f"{self._token_prefix}-{next(self._tokens)}"
        rec.lease_expires_at = now + lease
        self._touch(rec)
        return Delivery(
            id=rec.id,
            kind=rec.kind,
            payload=rec.payload,
            attempt=rec.attempts,
            max_attempts=rec.max_attempts,
            token=rec.token,
            lease_expires_at=rec.lease_expires_at,
            priority=rec.priority,
            headers=rec.headers,
            enqueued_at=rec.created_at,
            claims=rec.claims,
            lapses=rec.lapses,
            took_over=took_over,
        )

    async def renew(self, delivery: Delivery, at_least: float) -> float | None:
        rec = self._owned(delivery)
        if rec is None:
            return None
        assert rec.lease_expires_at is not None
        wanted = self.clock.now() + at_least
        if wanted > rec.lease_expires_at:
            rec.lease_expires_at = wanted
            self._touch(rec)
        return rec.lease_expires_at

    async def settle(self, delivery: Delivery, decision: Decision) -> Settlement:
        match decision:
            case Ack():
                return await self._ack(delivery)
            case Retry():
                return await self._retry(
                    delivery, delay=decision.delay, count=decision.count, error=decision.kept_error
                )
            case Suspended():
                return await self._suspend(delivery, until=decision.until, wait=decision.wait)
            case Dead():
                return await self._dead(delivery, decision.reason)
            case Release():
                return await self._release(delivery)

    async def _ack(self, delivery: Delivery) -> Settlement:
        if self._owned(delivery) is None:
            return Settlement.LOST
        del self._records[delivery.id]
        return Settlement.ACKED

    async def _retry(
        self, delivery: Delivery, *, delay: float, count: bool, error: str
    ) -> Settlement:
        rec = self._owned(delivery)
        if rec is None:
            return Settlement.LOST
        rec.last_error = error or rec.last_error
        if count and rec.attempts >= rec.max_attempts:
            return self._kill(rec, error or "exhausted its attempts")
        if not count:
            rec.attempts -= 1
        rec.token = None
        rec.lease_expires_at = None
        rec.run_at = self.clock.now() + max(0.0, delay)
        self._touch(rec)
        if delay <= 0:
            self._notify()
        return Settlement.RETRIED

    async def _suspend(self, delivery: Delivery, *, until: float, wait: Wait) -> Settlement:
        rec = self._owned(delivery)
        if rec is None:
            return Settlement.LOST
        rec.attempts -= 1
        rec.token = None
        rec.lease_expires_at = None
        needed = tuple(n for n in dict.fromkeys(wait.pending) if n not in rec.arrivals)
        rec.arrivals = ()
        if rec.woken or (wait.pending and not needed):
            # What it waits for happened while it ran: look again now.
            rec.woken = False
            rec.run_at = self.clock.now()
            self._touch(rec)
            self._notify()
            return Settlement.RETRIED
        rec.run_at = until
        rec.wait = dataclasses.replace(wait, pending=needed)
        self._touch(rec)
        return Settlement.SUSPENDED

    async def wake(
        self, run_id: str, waiting_for: JobStatus, *, arrived: str | None = None
    ) -> bool:
        rec = self._records.get(run_id)
        if rec is None or rec.dead:
            return False
        if rec.token is not None:
            if arrived is None:
                rec.woken = True
            elif arrived not in rec.arrivals:  # its suspension takes it off
                rec.arrivals = (*rec.arrivals, arrived)
            return True
        if rec.wait is None or rec.wait.status is not waiting_for:
            return True  # not waiting for what arrived: its run-at stands
        left = still_pending(rec.wait.pending, arrived)
        if left is not None:
            if left != rec.wait.pending:
                rec.wait = dataclasses.replace(rec.wait, pending=left)
                self._touch(rec)
            return True
        now = self.clock.now()
        if rec.run_at > now:
            rec.run_at = now
            rec.wait = None
            self._touch(rec)
            self._notify()
        return True

    async def _dead(self, delivery: Delivery, reason: str) -> Settlement:
        rec = self._owned(delivery)
        if rec is None:
            return Settlement.LOST
        return self._kill(rec, reason)

    def _kill(self, rec: _Rec, reason: str) -> Settlement:
        rec.dead = True
        rec.dead_reason = reason
        rec.token = None
        rec.lease_expires_at = None
        self._touch(rec)
        return Settlement.DEAD

    async def _release(self, delivery: Delivery) -> Settlement:
        rec = self._owned(delivery)
        if rec is None:
            return Settlement.LOST
        rec.attempts -= 1
        rec.token = None
        rec.lease_expires_at = None
        rec.run_at = min(rec.run_at, self.clock.now())
        self._touch(rec)
        self._notify()
        return Settlement.RELEASED

    async def cancel(self, run_id: str) -> bool:
        return self._records.pop(run_id, None) is not None

    async def withdraw(self, enqueued: Enqueued) -> bool:
        rec = self._records.get(enqueued.id)
        if rec is None or enqueued.version is None or rec.made != enqueued.version:
            return False
        del self._records[enqueued.id]
        return True

    async def discard_dead(self, run_id: str) -> bool:
        rec = self._records.get(run_id)
        if rec is None or not rec.dead:
            return False
        del self._records[run_id]
        return True

    async def requeue(self, run_id: str) -> bool:
        rec = self._records.get(run_id)
        if rec is None or not rec.dead:
            return False
        rec.dead = False
        rec.dead_reason = None
        rec.attempts = 0
        rec.lapses = 0
        rec.run_at = self.clock.now()
        self._touch(rec)
        self._notify()
        return True

    async def get(self, run_id: str) -> JobRecord | None:
        rec = self._records.get(run_id)
        return None if rec is None else self._record(rec, self.clock.now())

    async def list(
        self, status: JobStatus | None = None, *, cursor: str | None = None, limit: int = 100
    ) -> Page:
        now = self.clock.now()
        ids = sorted(i for i in self._records if cursor is None or i > cursor)
        out: list[JobRecord] = []
        last: str | None = None
        for i in ids:
            last = i
            record = self._record(self._records[i], now)
            if status is None or record.status == status:
                out.append(record)
                if len(out) == limit:
                    break
        more = bool(ids) and last != ids[-1]
        return Page(out, last if more else None)

    def pending_here(self, run_id: str) -> bool:
        rec = self._records.get(run_id)
        return rec is not None and not rec.dead

    async def next_due(self) -> float | None:
        while self._timed:
            when, _, id_, version = self._timed[0]
            rec = self._records.get(id_)
            if rec is not None and rec.version == version and not rec.dead:
                return when
            heapq.heappop(self._timed)
        return None

    def next_look(self) -> float | None:
        """None: every claim sees every job (they live in this process)."""
        return None

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        return self._listeners.add(listener)

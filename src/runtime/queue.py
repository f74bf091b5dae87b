"""The LeaseQueue contract: how the worker gets jobs and gives them back.

This is all the worker and the workflow layer's submit and await path ask
of a queue, and every backend offers all of it. What some backends cannot
do (waking a suspended job; listing, counts and requeue, which only
operators' tools ask) is in :mod:`stepstone.runtime.capabilities`, offered
by the backends that can.

A job is enqueued once (an optional id deduplicates), claimed under a lease
that carries a fencing token, and settled exactly once by the holder of the
current token: ack (done, the record goes away), nack (retry later),
dead-letter, or release (back at once, the attempt not counted). A worker
whose lease lapsed and was taken over holds a stale token: every transition
it tries changes nothing and reports ``Settlement.LOST``.

Priorities are integers 0..9, lower first. To keep a steady stream of urgent
work from starving the rest, a job's place in line is its due time plus
``priority_aging`` seconds per priority level: a job of priority 5 that has
waited that many seconds longer than a priority-0 job goes first. Waiting
jobs age; none waits forever.
"""

from __future__ import annotations

import abc
import asyncio
import secrets
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypeVar

from . import plausible
from .clock import Clock
from .errors import PayloadTooLarge
from .run_id import check_storable_id

PRIORITY_HIGH = 0
PRIORITY_NORMAL = 5
PRIORITY_LOW = 9
DEFAULT_PRIORITY_AGING = 60.0
"""Seconds of waiting worth one priority level (see the module docstring)."""
DEFAULT_MAX_ATTEMPTS = 3
"""Attempts a job gets, the first included, unless its type, its submit or
the runner says otherwise. Stated once, here, for every queue and the runner."""

DEFAULT_LEASE = 10.0
"""Seconds a claim is leased for, renewed every third of it: a dead worker's
runs are taken over within about this long (docs/queue.md prices the
renewals). A job type whose code may hold its event loop longer than two
thirds of it says so (``Job.lease``)."""
T = TypeVar("T")

DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024
"""SQS's limit, kept on every backend so a job that runs on one runs on all."""


class JobStatus(StrEnum):
    """Where a job is: the one vocabulary of ``handle.status()``, outcome
    records, queue listings and the CLI.

    A queue holds a job while it is ``scheduled``, ``ready``, ``running``,
    suspended (``sleeping``, ``waiting_for_event``,
    ``waiting_for_callback``, ``waiting_for_children``,
    ``waiting_for_slot``, ``rate_limited``, ``waiting_for_version``) or
    ``dead``; its outcome record says how it ``succeeded``, ``failed`` or
    was ``cancelled``.
    """

    SCHEDULED = "scheduled"
    """Waiting for its run-at time (a first run or a retry's backoff)."""
    SLEEPING = "sleeping"
    """Suspended in ``ctx.sleep`` until its wake time; holds no worker."""
    WAITING_FOR_EVENT = "waiting_for_event"
    """Suspended in ``ctx.wait_for_event`` until the event comes (or its timeout)."""
    WAITING_FOR_CALLBACK = "waiting_for_callback"
    """Suspended awaiting a callback (``await ctx.callback(...)``) until it is
    completed (or its timeout)."""
    WAITING_FOR_CHILDREN = "waiting_for_children"
    """Suspended awaiting child jobs until they have ended."""
    WAITING_FOR_SLOT = "waiting_for_slot"
    """Suspended until a run holding a slot of its concurrency key ends."""
    RATE_LIMITED = "rate_limited"
    """Suspended by its type's rate limit until its turn to start."""
    WAITING_FOR_VERSION = "waiting_for_version"
    """Given back by a worker whose code cannot replay it, until a worker of
    the code version that recorded its history claims it (a rolling deploy)."""
    READY = "ready"
    """Due and waiting for a worker."""
    RUNNING = "running"
    """Claimed by a worker under a lease. A running job whose lease has expired
    is claimable again."""
    DEAD = "dead"
    """Failed for good; kept in the queue until requeued or cancelled."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        """True for the states an outcome record holds: nothing will change."""
        return self in _FINISHED

    @property
    def queued(self) -> bool:
        """True for the states a queue record holds."""
        return not self.finished


_FINISHED = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})
QUEUE_STATUSES: tuple[JobStatus, ...] = (
    JobStatus.SCHEDULED,
    JobStatus.READY,
    JobStatus.RUNNING,
    JobStatus.SLEEPING,
    JobStatus.WAITING_FOR_EVENT,
    JobStatus.WAITING_FOR_CALLBACK,
    JobStatus.WAITING_FOR_CHILDREN,
    JobStatus.WAITING_FOR_SLOT,
    JobStatus.RATE_LIMITED,
    JobStatus.WAITING_FOR_VERSION,
    JobStatus.DEAD,
)
"""The statuses a queue record can have."""
SUSPENDED_STATUSES = frozenset(
    {
        JobStatus.SLEEPING,
        JobStatus.WAITING_FOR_EVENT,
        JobStatus.WAITING_FOR_CALLBACK,
        JobStatus.WAITING_FOR_CHILDREN,
        JobStatus.WAITING_FOR_SLOT,
        JobStatus.RATE_LIMITED,
        JobStatus.WAITING_FOR_VERSION,
    }
)


@dataclass(frozen=True, slots=True)
class Wait:
    """What a suspended job waits for: shown by status, ``ls`` and ``show``.

    The queue keeps it with the record until the job is claimed again. The
    job is due at its run-at time, or when woken for what it waits for: a
    wake for another status leaves it (see
    :class:`~stepstone.runtime.capabilities.Waking`)."""

    status: JobStatus
    """One of the suspended statuses (SUSPENDED_STATUSES)."""
    detail: str = ""
    """For people: the event's name, how many children are left, a
    concurrency key and how many were ahead, a rate limit turn."""

    def __post_init__(self) -> None:
        if self.status not in SUSPENDED_STATUSES:
            raise ValueError(f"a wait's status is one of the suspended ones, not {self.status}")


class Settlement(StrEnum):
    """What a transition after a claim did."""

    ACKED = "acked"
    RETRIED = "retried"
    RELEASED = "released"
    SUSPENDED = "suspended"
    DEAD = "dead"
    LOST = "lost"
    """The token no longer owns the job: nothing changed."""


@dataclass(frozen=True, slots=True)
class NewJob:
    """One job for :meth:`LeaseQueue.enqueue_many`: the arguments of ``enqueue``."""

    payload: bytes
    kind: str = ""
    id: str | None = None
    priority: int = PRIORITY_NORMAL
    run_at: float | None = None
    max_attempts: int | None = None
    headers: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class Enqueued:
    id: str
    created: bool
    """False when a record with this id already existed (a duplicate)."""
    version: str | None = field(default=None, compare=False)
    """Which record the enqueue created, for ``withdraw`` (None: the queue
    cannot tell its records apart)."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """One claim of one job: what the worker runs and the token it settles with."""

    id: str
    kind: str
    payload: bytes
    attempt: int
    """1 on the first claim; counted claims so far, this one included."""
    max_attempts: int
    token: str
    lease_expires_at: float
    priority: int = PRIORITY_NORMAL
    headers: Mapping[str, str] = field(default_factory=dict)
    enqueued_at: float = 0.0
    claims: int = 1
    """Every claim so far, counted or not (a release or an uncounted nack hands
    the attempt back but not this). 1 means no earlier claim of this job can
    have left work behind; the workflow layer skips looking for memos then."""


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A job as the queue holds it, for inspection (CLI, status)."""

    id: str
    kind: str
    status: JobStatus
    priority: int
    attempts: int
    max_attempts: int
    run_at: float
    """When it is (or was) due."""
    created_at: float
    updated_at: float
    payload: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    lease_expires_at: float | None = None
    last_error: str | None = None
    dead_reason: str | None = None
    wait: Wait | None = None
    """What it waits for while suspended (its status says which kind)."""


def check_priority(priority: int) -> int:
    if not isinstance(priority, int) or not 0 <= priority <= 9:
        raise ValueError(f"priority must be an int from 0 (first) to 9 (last), got {priority!r}")
    return priority


def check_enqueue(
    payload: bytes,
    *,
    id: str | None,
    priority: int,
    max_attempts: int | None,
    max_payload_bytes: int,
    run_at: float | None = None,
) -> str:
    """The arguments every backend's ``enqueue`` checks, in one place; returns
    the job id (``id``, checked, or a fresh random one). A run-at or a
    ``max_attempts`` its record could not hold (:mod:`stepstone.runtime.plausible`:
    a run-at before a century ago or past the end of 9999, more attempts
    than ``MAX_COUNT``) is refused here rather than written."""
    check_priority(priority)
    if run_at is not None:
        try:
            plausible.due(run_at, "run_at")
        except plausible.Implausible as exc:
            raise ValueError(f"{exc}: a job is due from a century ago to the end of 9999") from exc
    if len(payload) > max_payload_bytes:
        raise PayloadTooLarge(
            f"payload of {len(payload)} bytes is over the queue's limit of "
            f"{max_payload_bytes} bytes"
        )
    if max_attempts is not None and not 1 <= max_attempts <= plausible.MAX_COUNT:
        raise ValueError(
            f"max_attempts must be from 1 to {plausible.MAX_COUNT}, got {max_attempts}"
        )
    return check_storable_id(id) if id is not None else secrets.token_hex(16)


def all_or_first_error(results: Sequence[T | BaseException | None]) -> list[T]:
    """``results`` (one per item of a batch: ``enqueue_many``, ``submit_many``),
    or the first error among them, raised once every item was tried."""
    out: list[T] = []
    for result in results:
        if isinstance(result, BaseException):
            raise result
        assert result is not None
        out.append(result)
    return out


async def enqueue_each(
    jobs: Sequence[NewJob], one: Callable[[NewJob], Awaitable[Enqueued]]
) -> list[Enqueued]:
    """``enqueue_many`` for a backend that enqueues one job at a time with
    ``one``: one id's jobs in order, different ids side by side. Every job
    is tried, then the first error met is raised. A batch of one id (an
    ``enqueue``) runs in the caller's task, without a task per id."""
    results: list[Enqueued | BaseException | None] = [None] * len(jobs)
    by_id: dict[object, list[int]] = {}
    for i, job in enumerate(jobs):
        by_id.setdefault(job.id if job.id is not None else object(), []).append(i)

    async def enqueue(indexes: list[int]) -> None:
        for i in indexes:
            try:
                results[i] = await one(jobs[i])
            except Exception as exc:
                results[i] = exc

    if len(by_id) == 1:
        [indexes] = by_id.values()
        await enqueue(indexes)
    else:
        await asyncio.gather(*(enqueue(indexes) for indexes in by_id.values()))
    return all_or_first_error(results)


class LeaseQueue(abc.ABC):
    """A queue of jobs claimed under fenced leases. See the module docstring.

    The abstract methods are the contract; the others are hints a backend
    gives where it can, with defaults that are always correct."""

    @property
    @abc.abstractmethod
    def clock(self) -> Clock:
        """The time run-at times and leases are read by. The worker judges
        lease expiry by it too, so both agree on when a lease lapses."""

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
        """Add a job: ``enqueue_many`` of one. With ``id``, a second enqueue of
        a live id adds nothing and answers ``created=False``. Raises
        PayloadTooLarge over the limit."""
        job = NewJob(payload, kind, id, priority, run_at, max_attempts, headers)
        [enqueued] = await self.enqueue_many([job])
        return enqueued

    @abc.abstractmethod
    async def enqueue_many(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        """Enqueue each job; returns, in order, what each did. Jobs of one id
        are enqueued in order (the first may create it, the rest are its
        duplicates). A backend may write them together: a StoreQueue on files
        makes the whole batch durable with one flush; one that enqueues a job
        at a time uses :func:`enqueue_each`.

        Every job is tried; then the first error met is raised (the jobs
        before and after it may have been enqueued)."""

    async def enqueue_claimed(
        self, job: NewJob, *, lease: float, holder: str | None = None
    ) -> tuple[Enqueued, Delivery | None]:
        """Enqueue ``job`` already claimed by the caller (``holder``, as
        ``claim`` takes it), leased for ``lease`` seconds: for a worker in the
        submitting process with free capacity and nothing else to take, one
        write where an enqueue and a claim take two.
        The delivery is the caller's to run, renew and settle as a claim's,
        or to ``release``; if the caller goes away instead, the lease lapses
        and any worker claims the job. None when the enqueue created no record
        (a live run has the id), or when the queue cannot write a record
        claimed (it then enqueues ``job`` as ``enqueue`` does, as this default
        does)."""
        [enqueued] = await self.enqueue_many([job])
        return enqueued, None

    async def withdraw(self, enqueued: Enqueued) -> bool:
        """Remove the record ``enqueued`` created, if nothing changed it since
        (claimed, settled, or gone and made again): for a submit that finds,
        once it made the record, that it is nobody's run. False when it
        changed or went, or when the queue cannot tell (this default); the
        caller decides what then."""
        return False

    @abc.abstractmethod
    async def claim(
        self,
        n: int,
        *,
        lease: float,
        kinds: Collection[str] | None = None,
        holder: str | None = None,
    ) -> list[Delivery]:
        """Claim up to ``n`` due jobs (of ``kinds`` if given) in priority order,
        each leased for ``lease`` seconds. Jobs whose lease expired are
        claimable again, with the attempt counted. ``holder`` names the
        claimer (a worker's id in its place): a queue that can reclaim
        (:class:`~stepstone.runtime.capabilities.Reclaiming`) marks each claim
        with it, so a restarted worker finds its own; others ignore it."""

    @abc.abstractmethod
    async def renew(self, delivery: Delivery, at_least: float) -> float | None:
        """Extend the lease to at least ``at_least`` seconds from now.

        Returns the new expiry, or None when the token has lost the job."""

    @abc.abstractmethod
    async def ack(self, delivery: Delivery) -> Settlement:
        """Done: remove the job. ACKED or LOST."""

    @abc.abstractmethod
    async def nack(
        self, delivery: Delivery, *, delay: float, count: bool = True, error: str | None = None
    ) -> Settlement:
        """Retry after ``delay`` seconds. RETRIED, or DEAD when a counted
        attempt was the last, or LOST. An uncounted nack hands the attempt back."""

    async def suspend(self, delivery: Delivery, *, until: float, wait: Wait) -> Settlement:
        """Give the job back, the attempt not counted, due again at ``until``
        (clock time) or when woken (see :class:`~stepstone.runtime.capabilities.Waking`),
        remembering ``wait`` for people to see. SUSPENDED; RETRIED when a wake
        came while the job was held (it is due at once); or LOST.

        This default is an uncounted nack, which forgets ``wait``; a backend
        that can keep it overrides this."""
        delay = max(0.0, until - self.clock.now())
        return await self.nack(delivery, delay=delay, count=False)

    @abc.abstractmethod
    async def dead_letter(self, delivery: Delivery, reason: str) -> Settlement:
        """Fail for good with ``reason``. DEAD or LOST."""

    @abc.abstractmethod
    async def release(self, delivery: Delivery) -> Settlement:
        """Give the job back at once, the attempt not counted. RELEASED or LOST."""

    @abc.abstractmethod
    async def cancel(self, run_id: str) -> bool:
        """Remove a job in any state; True if there was one. A worker holding
        it finds out at its next renew or settlement (LOST)."""

    @abc.abstractmethod
    async def discard_dead(self, run_id: str) -> bool:
        """Remove the job's record if it is dead, so that its id is free again
        (its run is being forgotten: retention, purge). A live job, and one
        requeued meanwhile, is left alone. True if a dead record went."""

    @abc.abstractmethod
    async def get(self, run_id: str) -> JobRecord | None:
        """The job's record, or None (never enqueued, acked or cancelled)."""

    async def next_due(self) -> float | None:
        """The earliest time something not claimable now may become claimable
        (a run-at, a backoff, a lease expiry), as far as this process knows.
        A hint for how long a worker may sleep; None when nothing is pending."""
        return None

    def next_look(self) -> float | None:
        """Real seconds until a claim would look for other processes' work in
        a way a wait would miss (a StoreQueue's look at its doorbell): how
        long an idle worker may sleep at most. None: whenever it polls."""
        return None

    def pending_here(self, run_id: str) -> bool:
        """Whether this process knows, without asking anyone, that the job has
        not ended: it waits unclaimed, or this process holds its lease, as of
        this process's own write or a recent look (a few seconds at most). A
        hint for callers polling for the job's end, who need not poll while it
        holds; False whenever the process does not know."""
        return False

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` when this process makes work available (an enqueue,
        a release, a requeue), so an idle worker wakes at once. Returns an
        unsubscribe function."""
        return lambda: None

    async def close(self) -> None:  # noqa: B027 - optional
        """Release resources."""


def sort_key(run_at: float, priority: int, aging: float) -> float:
    """A job's place in line: its due time, plus ``aging`` seconds per priority level."""
    return run_at + priority * aging

"""The LeaseQueue contract: how the worker gets jobs and gives them back.

This is all the worker and the workflow layer's submit and await path ask
of a queue, and every backend offers all of it. What some backends cannot
do (waking a suspended job; listing, counts and requeue, which only
operators' tools ask), and what helps one backend save requests (a claimed
enqueue, hints for an idle worker), is in
:mod:`stepstone.runtime.capabilities`, offered by the backends that can.

A job is enqueued once (an optional id deduplicates), claimed under a lease
that carries a fencing token, and settled exactly once by the holder of the
current token, with the :data:`~stepstone.runtime.decision.Decision` the
worker made of the attempt (done, retry later, suspended until a wake,
dead, or released at once). A worker whose lease lapsed and was taken over
holds a stale token: every transition it tries changes nothing and reports
``Settlement.LOST``.

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
from .decision import Decision
from .errors import PayloadTooLarge
from .run_id import check_storable_id
from .status import JobStatus, Wait

PRIORITY_HIGH = 0
"""The most urgent priority (``SubmitOptions(priority=...)``: 0 to 9, lower first)."""
PRIORITY_NORMAL = 5
"""The priority a job gets when its submit names none."""
PRIORITY_LOW = 9
"""The least urgent priority; waiting jobs age, so none starves."""
DEFAULT_PRIORITY_AGING = 60.0
"""Seconds of waiting worth one priority level (see the module docstring)."""
DEFAULT_MAX_ATTEMPTS = 3
"""Attempts a job gets, the first included, unless its type, its submit or
the runner says otherwise. Stated once, here, for every queue and the runner."""

DEFAULT_MAX_LAPSES = 10
"""Leases a run may lose to workers that die or hang (its **lapses**) before
it fails for good as ``expired``, unless the runner says otherwise. A lapse
costs no attempt: a worker killed under sixteen runs is no fault of
fifteen of them. The limit stops a run that kills every worker it lands on
(memory, a crash in native code) after this many, where counting nothing
would let it take the fleet down one worker after another for ever."""

DEFAULT_LEASE = 10.0
"""Seconds a claim is leased for, renewed every third of it: a dead worker's
runs are taken over within about this long (docs/queue.md prices the
renewals). A job type whose code may hold its event loop longer than two
thirds of it says so (``Job.lease``)."""
T = TypeVar("T")

DEFAULT_MAX_PAYLOAD_BYTES = 256 * 1024
"""SQS's limit, kept on every backend so a job that runs on one runs on all."""


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
    """What an enqueue did: the run id, and whether it made a new record."""

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
    lapses: int = 0
    """Claims of this job whose lease lapsed before they settled (their
    worker died, hung, or lost the store) and that another claim took over:
    counted apart from attempts (:data:`DEFAULT_MAX_LAPSES`)."""
    took_over: bool = False
    """This claim took over one whose lease lapsed (it counted the last of
    ``lapses``): the attempt it goes on with began under another claim."""


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
    lapses: int = 0
    """Claims taken over after their lease lapsed (see :attr:`Delivery.lapses`)."""


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
    """A queue of jobs claimed under fenced leases: the whole contract a
    backend implements (see the module docstring). Eight abstract members:

    - :attr:`clock`, the time run-at times and leases are read by;
    - :meth:`enqueue_many` (and :meth:`enqueue`, one job of it) adds jobs;
    - :meth:`claim` takes due jobs under a lease, :meth:`renew` extends it;
    - :meth:`settle` ends a claim as its :data:`Decision` says;
    - :meth:`cancel`, :meth:`discard_dead` and :meth:`get`, for a job by id.

    What only some backends can do, or only helps one save requests, is a
    capability of its own (:mod:`stepstone.runtime.capabilities`)."""

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
        """Enqueue each job; returns, in order, what each did.

        A job gets a record, due at its ``run_at`` (now when None), with
        ``max_attempts`` (the queue's default when None) and its ``headers``
        and ``payload`` kept as given; :func:`check_enqueue` checks the
        arguments every backend checks, and gives a fresh id to a job
        without one. A job whose id a live record already has (not acked,
        not cancelled, not discarded) adds nothing: ``created=False``. Jobs
        of one id are enqueued in order (the first may create it, the rest
        are its duplicates). A backend may write them together: a StoreQueue
        makes the whole batch durable with one flush on files; one that
        enqueues a job at a time uses :func:`enqueue_each`.

        Every job is tried; then the first error met is raised (the jobs
        before and after it may have been enqueued)."""

    @abc.abstractmethod
    async def claim(
        self,
        n: int,
        *,
        lease: float,
        kinds: Collection[str] | None = None,
        holder: str | None = None,
    ) -> list[Delivery]:
        """Claim up to ``n`` due jobs (of ``kinds`` if given), each leased for
        ``lease`` seconds under a fresh fencing token, first by
        :func:`sort_key` (priority with aging). A job whose lease lapsed is
        claimable again: that claim takes it over (``Delivery.took_over``,
        one more of its ``lapses``), its attempt not counted again; any
        other claim counts one (``Delivery.attempt``). Every claim counts in
        ``Delivery.claims``. ``holder`` names the claimer (a worker's id): a
        queue that can reclaim (:class:`~stepstone.runtime.capabilities.Reclaiming`)
        marks each claim with it, so a restarted worker finds its own; others
        ignore it. Returns fewer (or none) when fewer are due."""

    @abc.abstractmethod
    async def renew(self, delivery: Delivery, at_least: float) -> float | None:
        """Extend the lease to at least ``at_least`` seconds from now, if
        ``delivery``'s token still holds the job. Returns the new expiry, or
        None when the token has lost the job (it was taken over, cancelled
        or settled): nothing changed."""

    @abc.abstractmethod
    async def settle(self, delivery: Delivery, decision: Decision) -> Settlement:
        """End ``delivery``'s claim as ``decision`` says, if its token still
        holds the job; else change nothing and answer ``LOST``.

        - :class:`~stepstone.runtime.decision.Ack`: the job is done; its
          record goes. ``ACKED``.
        - :class:`~stepstone.runtime.decision.Retry`: due again ``delay``
          seconds from now, its last error kept (``Retry.kept_error``).
          With ``count``, the attempt is spent, and if it was the job's last
          (``attempt >= max_attempts``) the job is dead instead, with that
          error as its reason: ``DEAD``; else ``RETRIED``. Without it, the
          attempt is handed back (the next claim is the same attempt).
        - :class:`~stepstone.runtime.decision.Suspended`: given back, the
          attempt handed back, due again at ``until`` (clock time) or when
          woken for what ``wait`` waits for
          (:class:`~stepstone.runtime.capabilities.Waking`); ``wait`` kept
          for people to see. ``SUSPENDED``; ``RETRIED`` when a wake came
          while the job was held (it is due at once). A queue that cannot
          keep a wait gives the job back until ``until``, uncounted.
        - :class:`~stepstone.runtime.decision.Dead`: failed for good; the
          record stays, dead, with ``reason``, until requeued or discarded.
          ``DEAD``.
        - :class:`~stepstone.runtime.decision.Release`: given back at once,
          the attempt handed back (a drain). ``RELEASED``.

        Raises only when the queue could not be reached; the worker tries
        again, and failing that the lease lapses and the job comes back."""

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

    async def close(self) -> None:  # noqa: B027 - optional
        """Release resources."""


def sort_key(run_at: float, priority: int, aging: float) -> float:
    """A job's place in line: its due time, plus ``aging`` seconds per priority level."""
    return run_at + priority * aging

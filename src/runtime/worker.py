"""The worker: claims jobs from a LeaseQueue, runs their handlers, settles them.

One loop per worker, with at most ``concurrency`` handlers in flight. Each
turn of the loop:

1. **Watches** what is in flight: renews leases whose heartbeat is due, and
   cancels handlers past their attempt timeout.
2. **Fills** free slots by claiming a batch (kinds at their per-kind cap are
   left out of the claim, so their jobs stay queued rather than claimed and
   idle).
3. **Sleeps** until something can change: a handler finishes, the queue says
   work arrived in this process (``queue.subscribe``), the clock moves
   (a FakeClock's ``advance``), the next job comes due (``queue.next_due``),
   a heartbeat or timeout falls due, or ``poll_interval`` passes (other
   processes enqueue without telling us).

Each claimed job runs as its own task (:class:`_Job`): the handler runs in a
child task the worker can cancel, and when it ends, how it ended goes through
the pure :func:`runtime.decide.decide` and the decision is applied to the
queue: on_terminal first for terminal decisions (the workflow layer writes its
outcome record there), then ack / nack / dead_letter. An on_terminal that
fails because the store is out sends the job round again, uncounted; one that
fails for any other reason dead-letters it, so no job is claimed forever for
a result that can never be recorded. Settlement runs in the job's task, not
the loop, so a slow settle never holds up claiming.

Every settlement is fenced by the delivery's token. A worker that lost its
lease (it hung, the lease lapsed, another worker reclaimed the job) gets
``Settlement.LOST`` back: that is logged and counted, never reported to the
user as a success. When a renewal says the lease is gone, the handler is
cancelled at once and nothing is settled: the job belongs to someone else.

Cancellation: a job cancelled while it runs loses its queue record, so the
next heartbeat would find the lease gone, up to a heartbeat later. Sooner:
:meth:`Worker.cancel_running` stops the handler at once (the runner calls it
when it cancels a job its own worker holds), and ``is_cancelled`` is asked
about each attempt that has run ``cancel_check`` seconds, every
``cancel_check`` seconds after that (the workflow layer reads the run's
outcome record: one GET). A cancelled attempt is stopped and not settled;
the log says it was cancelled.

Graceful stop: stop claiming, give in-flight handlers ``drain_timeout``
seconds, then cancel the rest and release their jobs with the attempt not
counted (a deploy must not burn attempts). A handler that had already
finished by then is settled normally.

Time: every decision about *when* (run-at, lease expiry, attempt timeout)
reads the injected clock; heartbeats, poll intervals and the drain window
are real seconds, because they are about this process's liveness.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import logging
import math
import secrets
import warnings
from collections.abc import Awaitable, Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum
from types import TracebackType
from typing import Any, TypeVar

from stepstone.store.errors import StepstoneError, StoreUnavailable

from . import clock as clock_mod
from .backoff import Backoff
from .clock import Clock
from .decide import (
    Ack,
    AttemptEnd,
    Dead,
    Decision,
    Expired,
    Failure,
    FailureKind,
    NoHandler,
    Raised,
    Retry,
    Returned,
    Success,
    Suspended,
    Terminal,
    TimedOut,
    decide,
    describe,
    format_traceback,
    reported_error,
    truncate,
    uncounted_step,
    with_traceback,
)
from .errors import LeaseLost
from .observer import AttemptReport, WorkerObserver, error_type
from .queue import Delivery, LeaseQueue, Settlement
from .suspension import Suspend

__all__ = [
    "Attempt",
    "Backoff",
    "Failure",
    "FailureKind",
    "Handler",
    "Lease",
    "OnTerminal",
    "Success",
    "Terminal",
    "Worker",
    "WorkerStats",
]

logger = logging.getLogger("stepstone.runtime.worker")

R = TypeVar("R")

MIN_SLEEP = 0.005
"""Shortest idle sleep, so a job due 'now' that a claim did not return (its
kind is at its cap) cannot spin the loop."""
SETTLE_GRACE = 5.0
"""After the drain window, how long (at least) settlements already under way
get before stop gives up on them."""
SETTLE_TRIES = 3
"""Tries of one settlement call that raises before leaving the job to its lease."""
QUEUE_ERROR_BACKOFF = 0.1
"""First pause after a queue error; doubles per consecutive error."""
QUEUE_ERROR_BACKOFF_POLLS = 10.0
"""The pause after queue errors is capped at this many poll intervals."""


# -- what a handler sees ------------------------------------------------------


class Lease:
    """The worker's hold on one job, as its handler sees it.

    The worker renews it in the background every ``heartbeat`` seconds; a
    handler about to do something long can ask for more with
    :meth:`ensure_at_least`. What is held for as long as the lease (a
    concurrency slot) is renewed with it: :meth:`also_renew`.
    """

    def __init__(
        self,
        delivery: Delivery,
        queue: LeaseQueue,
        clock: Clock,
        on_lost: Callable[[], None],
    ) -> None:
        self._delivery = delivery
        self._queue = queue
        self._clock = clock
        self._on_lost = on_lost
        self._expires_at = delivery.lease_expires_at
        self._lost = False
        self._also: list[Callable[[float], Awaitable[bool]]] = []

    @property
    def expires_at(self) -> float:
        """When the lease runs out, on the clock, as far as this worker knows."""
        return self._expires_at

    @property
    def lost(self) -> bool:
        """True once a renewal found another token (or none) on the job."""
        return self._lost

    async def ensure_at_least(self, seconds: float) -> None:
        """Make sure at least ``seconds`` of lease remain, renewing now if fewer do.

        Raises LeaseLost if the job is no longer ours (the handler is being
        cancelled anyway; nothing it does from here on will be settled). A
        queue error from the renewal propagates: the lease could not be
        guaranteed, and the handler should not go on as if it had been.
        """
        if self._lost:
            raise LeaseLost(f"lease on job {self._delivery.id} was lost")
        if self._expires_at - self._clock.now() >= seconds:
            return
        if not await self.renew(seconds):
            raise LeaseLost(f"lease on job {self._delivery.id} was lost")

    async def renew(self, at_least: float) -> bool:
        """Renew to ``at_least`` seconds from now; False (and lost) if the token lost the job."""
        if self._lost:
            return False
        expires = await self._queue.renew(self._delivery, at_least)
        if expires is None:
            self._lose()
            return False
        self._expires_at = max(self._expires_at, expires)
        for extend in list(self._also):
            if not await extend(self._expires_at):
                self._lose()
                return False
        return True

    def also_renew(self, extend: Callable[[float], Awaitable[bool]]) -> Callable[[], None]:
        """After every renewal, call ``extend(expires_at)`` to carry something
        held with the lease to the same expiry; False from it (that thing was
        taken over) counts as losing the lease. Returns the function that
        stops it. An error from ``extend`` propagates like a queue error."""
        self._also.append(extend)
        return lambda: self._also.remove(extend) if extend in self._also else None

    def _lose(self) -> None:
        if not self._lost:
            self._lost = True
            self._on_lost()


@dataclass
class Attempt:
    """One attempt at one job: what a handler receives."""

    delivery: Delivery
    lease: Lease
    stopped: str | None = None
    """Why the worker stopped this attempt (``cancelled``, ``timed out``,
    ``drained``, ``lease lost``), or None while it may go on. An async handler
    is cancelled as well; a synchronous one, which Python cannot interrupt,
    should look before each piece of work it starts (a job's ``ctx.sync``
    calls do)."""

    @property
    def attempt(self) -> int:
        """1 on the first attempt; attempts so far, this one included."""
        return self.delivery.attempt

    @property
    def run_id(self) -> str:
        return self.delivery.id

    @property
    def job_id(self) -> str:
        """Deprecated: :attr:`run_id`."""
        warnings.warn(
            "Attempt.job_id is deprecated; use Attempt.run_id", DeprecationWarning, stacklevel=2
        )
        return self.delivery.id

    @property
    def kind(self) -> str:
        return self.delivery.kind

    @property
    def payload(self) -> bytes:
        return self.delivery.payload

    @property
    def final(self) -> bool:
        """True on the last allowed attempt: a failure now is for good."""
        return self.delivery.attempt >= self.delivery.max_attempts


Handler = Callable[[Attempt], Awaitable[object]] | Callable[[Attempt], object]
"""An async function (run on the loop) or a plain function (run in a thread)."""
IsCancelled = Callable[[Delivery], Awaitable[bool]]
"""Asked about an attempt that has run a while: was its job cancelled meanwhile?"""
OnTerminal = Callable[[Delivery, Terminal], Awaitable[None]]
"""Called with a job's final result before the queue forgets it. If it raises
StoreUnavailable, the job is not settled and runs again later; if it raises
anything else, the job is dead-lettered with the error in its reason."""


@dataclass
class WorkerStats:
    """Counters for tests, benchmarks and health checks."""

    claimed: int = 0
    succeeded: int = 0
    retried: int = 0
    dead: int = 0
    released: int = 0
    suspended: int = 0
    """Settlements that gave a suspended job back to wait (uncounted)."""
    lost: int = 0
    """Settlements (or renewals) that found the job no longer ours."""
    cancelled: int = 0
    """Attempts stopped because their job was cancelled."""
    queue_errors: int = 0
    """Queue calls (claim, renew, settle, next_due) that raised."""
    peak_in_flight: int = 0


# -- the worker's own bookkeeping -------------------------------------------


class _Stop(Enum):
    """Why the worker cancelled a handler (None: it did not)."""

    LOST = "lease lost"
    TIMEOUT = "timed out"
    DRAIN = "drained"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class _Registration:
    handler: Handler
    is_async: bool
    max_in_flight: int | None
    timeout: float | None


@dataclass(eq=False)
class _Job:
    """One claimed job in flight: its delivery, lease, handler task and schedule."""

    delivery: Delivery
    registration: _Registration | None
    lease: Lease
    deadline: float | None
    """Clock time past which the attempt has timed out (None: no timeout)."""
    next_beat: float
    """Loop time of the next heartbeat renewal."""
    next_check: float
    """Loop time of the next look for a cancellation (inf: never)."""
    attempt: Attempt | None = None
    handler_task: asyncio.Task[object] | None = None
    task: asyncio.Task[None] | None = None
    stop: _Stop | None = None
    renewing: bool = False
    beat_task: asyncio.Task[None] | None = None
    began: float = 0.0
    """Loop time of the claim (set only when someone hears of attempts)."""
    claimed_at: float = 0.0
    """Clock time of the claim."""
    settled: Settlement | None = None
    """What the queue did with the job, once a settlement landed."""
    check_task: asyncio.Task[None] | None = None

    def where(self) -> str:
        d = self.delivery
        return f"job {d.id} (kind {d.kind!r}, attempt {d.attempt}/{d.max_attempts})"


def _idle(task: asyncio.Task[None] | None) -> bool:
    """No such task is under way (never started, or done)."""
    return task is None or task.done()


def _is_async(handler: object) -> bool:
    """Whether calling ``handler`` gives an awaitable: a coroutine function,
    a partial of one, or an object with an async ``__call__``."""
    target = handler
    while isinstance(target, functools.partial):
        target = target.func
    return inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(
        getattr(target, "__call__", None)  # noqa: B004 - looking for an async __call__
    )


# -- the worker ---------------------------------------------------------------


class Worker:
    """Runs the handlers registered for each job kind over jobs claimed from ``queue``.

    ``lease`` is the claim's lease in seconds, renewed every ``heartbeat``
    seconds (default lease/3; 0 disables renewal). ``attempt_timeout`` bounds
    one attempt (``register(timeout=)`` overrides it per kind). ``backoff``
    spaces retries. ``on_terminal`` hears every job's final result before the
    queue lets go of it. ``is_cancelled`` is asked, every ``cancel_check``
    seconds once an attempt has run that long, whether its job was cancelled
    (None: the heartbeat finds out, when the lease turns out gone). ``clock``
    defaults to the queue's own (``queue.clock``) so both judge lease expiry
    and run-at by the same time.

    By default a job of a kind nobody registered is claimed and dead-lettered
    (``FailureKind.UNKNOWN``), so a typo'd or retired job type fails loudly
    instead of waiting forever. A fleet in which different workers run
    different kinds over one queue must pass ``only_registered=True``, or
    each worker would dead-letter the others' jobs.

    With a FakeClock, heartbeats still tick in real seconds: advancing the
    clock past a lease between two beats lapses it, as a process that stalled
    that long would in production.
    """

    def __init__(
        self,
        queue: LeaseQueue,
        *,
        concurrency: int = 16,
        lease: float = 60.0,
        heartbeat: float | None = None,
        poll_interval: float = 1.0,
        attempt_timeout: float | None = None,
        backoff: Backoff = Backoff(),  # noqa: B008 - frozen, so sharing it is safe
        drain_timeout: float = 30.0,
        clock: Clock | None = None,
        on_terminal: OnTerminal | None = None,
        is_cancelled: IsCancelled | None = None,
        cancel_check: float | None = 1.0,
        name: str | None = None,
        only_registered: bool = False,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        if lease <= 0:
            raise ValueError(f"lease must be positive, got {lease}")
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be positive, got {poll_interval}")
        if heartbeat is not None and not 0 <= heartbeat < lease:
            # A beat as long as the lease would renew only after it lapsed.
            raise ValueError(f"heartbeat must be >= 0 and shorter than the lease, got {heartbeat}")
        if attempt_timeout is not None and attempt_timeout <= 0:
            raise ValueError(f"attempt_timeout must be positive, got {attempt_timeout}")
        if cancel_check is not None and cancel_check <= 0:
            raise ValueError(f"cancel_check must be positive (or None), got {cancel_check}")
        self.queue = queue
        self.concurrency = concurrency
        self.lease = lease
        self.heartbeat = lease / 3 if heartbeat is None else heartbeat
        self.poll_interval = poll_interval
        self.attempt_timeout = attempt_timeout
        self.backoff = backoff
        self.drain_timeout = drain_timeout
        self.clock: Clock = clock or queue.clock
        self.on_terminal = on_terminal
        self.is_cancelled = is_cancelled
        self.cancel_check = cancel_check
        self.name = name or f"worker-{secrets.token_hex(3)}"
        self.only_registered = only_registered
        self.stats = WorkerStats()
        self.observer: WorkerObserver | None = None
        """Hears each claim and each attempt's end (metrics); see runtime.observer."""
        self.on_attempt_over: Callable[[AttemptReport], Awaitable[None]] | None = None
        """Awaited with each attempt's report once it is settled, before its slot
        frees (the attempt history writes there); what it raises is logged."""

        self._handlers: dict[str, _Registration] = {}
        self._jobs: set[_Job] = set()
        self._held: dict[str, int] = {}  # job id -> deliveries of it in flight here
        self._by_kind: dict[str, int] = {}
        self._loop_task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeup: asyncio.Event | None = None
        self._stopping = False
        self._drain_window: float | None = None
        self._unsubscribe: list[Callable[[], None]] = []
        self._claim_errors = 0
        self._claim_not_before = 0.0
        self._last_claim_at = float("-inf")
        self._claiming = False  # a claim is under way
        self._drained = False  # the last claim found no more than it took, and no work came since
        self._threads: ThreadPoolExecutor | None = None

    # -- configuration -------------------------------------------------------

    def register(
        self,
        kind: str,
        handler: Handler,
        *,
        max_in_flight: int | None = None,
        timeout: float | None = None,
    ) -> None:
        """Run ``handler`` for jobs of ``kind``, at most ``max_in_flight`` at
        once in this worker, each attempt bounded by ``timeout`` seconds.

        A plain (non-async) handler runs in a thread. Python cannot stop a
        thread, so a sync handler that times out, is drained or cancelled keeps
        running in the background until it looks at ``Attempt.stopped``; its
        job is settled (timeout), released (drain) or left to the cancel
        regardless, and whatever it returns afterwards is ignored.
        """
        if kind in self._handlers:
            raise ValueError(f"a handler is already registered for job type `{kind}`")
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, got {max_in_flight}")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self._handlers[kind] = _Registration(handler, _is_async(handler), max_in_flight, timeout)

    @property
    def in_flight(self) -> int:
        return len(self._jobs)

    def in_flight_by_kind(self) -> dict[str, int]:
        """Jobs in flight here, by kind (a copy; safe to call from another thread)."""
        return self._by_kind.copy()

    def holds(self, run_id: str) -> bool:
        """Whether this worker has the job in flight under a lease that has not
        lapsed by its clock (so whoever waits for the job's end here will hear
        of it without asking the store). A lapsed lease may have let another
        process take the job over and finish it."""
        if run_id not in self._held:
            return False
        now = self.clock.now()
        return any(
            job.delivery.id == run_id and not job.lease.lost and job.lease.expires_at > now
            for job in self._jobs
        )

    def cancel_running(self, run_id: str) -> bool:
        """The job was cancelled (its outcome recorded, its queue record
        dropped): stop its attempt here at once, if one runs here. Nothing is
        settled; the log says it was cancelled. True if one was running."""
        found = False
        for job in list(self._jobs):
            if job.delivery.id == run_id and job.handler_task is not None:
                self._cancel(job, _Stop.CANCELLED)
                found = True
        return found

    def ready_for(self, kind: str) -> bool:
        """Whether a job of ``kind`` may be handed to this worker as it is
        enqueued (``take``, after ``LeaseQueue.enqueue_claimed``): the worker
        runs on this event loop with a free slot and room under the kind's
        cap (a claim under way may not count on that room: a capped kind
        waits for it), and its last claim found nothing more to take and it
        heard of no work since, so no job waiting in the queue is passed
        over for the slot."""
        try:
            here = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            here = False
        registration = self._handlers.get(kind)
        if not (
            here
            and self._drained
            and not self._stopping
            and self._loop_task is not None
            and registration is not None
            and len(self._jobs) < self.concurrency
        ):
            return False
        cap = registration.max_in_flight
        return cap is None or (not self._claiming and self._by_kind.get(kind, 0) < cap)

    def take(self, delivery: Delivery) -> bool:
        """Run ``delivery`` (a claim made for this worker) as a claimed job,
        if ``ready_for`` its kind still; False, and nothing done, if not."""
        if not self.ready_for(delivery.kind):
            return False
        self._begin(delivery, self.clock.now())
        return True

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        """Start the loop as a background task and return at once."""
        if self._loop_task is not None:
            raise RuntimeError(f"{self.name} was already started")
        self._loop = asyncio.get_running_loop()
        self._wakeup = asyncio.Event()
        self._stopping = False
        self._drained = False
        self._unsubscribe = [
            self.queue.subscribe(self._work_came),
            clock_mod.subscribe(self.clock, self.wake),
        ]
        self._loop_task = asyncio.create_task(self._run(), name=f"{self.name} loop")
        logger.info("%s started (concurrency %d)", self.name, self.concurrency)

    async def stop(self, drain_timeout: float | None = None) -> None:
        """Stop claiming, drain, and return when the loop has ended.

        In-flight handlers get ``drain_timeout`` seconds (default: the
        worker's) to finish and be settled; the rest are cancelled and their
        jobs released with the attempt not counted.
        """
        task = self._loop_task
        if task is None:
            return
        if not self._stopping:
            self._stopping = True
            self._drain_window = self.drain_timeout if drain_timeout is None else drain_timeout
            self.wake()
        await asyncio.shield(task)

    async def __aenter__(self) -> Worker:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def wake(self) -> None:
        """Look for work now instead of at the next poll. Safe from any thread."""
        loop, event = self._loop, self._wakeup
        if loop is None or event is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            event.set()
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(event.set)

    def _work_came(self) -> None:
        """The queue has work for us: claim it, and hand nothing over meanwhile."""
        self._drained = False
        self.wake()

    # -- the loop --------------------------------------------------------------

    async def _run(self) -> None:
        assert self._wakeup is not None
        try:
            while not self._stopping:
                self._wakeup.clear()
                try:
                    self._watch()
                    await self._fill()
                    # (A stop during the fill has set the wake-up: the sleep
                    # below returns at once and the loop condition ends it.)
                    pause = await self._idle_for()
                except Exception:
                    # A bug of ours, not a queue outage (those are handled
                    # where they happen): log it and keep the worker alive.
                    logger.exception("%s: unexpected error in the worker loop", self.name)
                    pause = self.poll_interval
                await self._sleep(pause)
            await self._drain()
        finally:
            for unsubscribe in self._unsubscribe:
                unsubscribe()
            self._unsubscribe = []
            logger.info("%s stopped", self.name)

    def _watch(self) -> None:
        """Start due heartbeats and cancellation checks, and cancel handlers
        past their deadline."""
        now_real = asyncio.get_running_loop().time()
        now = self.clock.now()
        for job in list(self._jobs):
            if job.stop is not None:
                continue
            handler = job.handler_task
            late = job.deadline is not None and now >= job.deadline
            if late and handler is not None and not handler.done():
                self._cancel(job, _Stop.TIMEOUT)
                continue
            # Beats go on after the handler returns, while on_terminal and the
            # settlement run: the lease must outlive the whole attempt.
            if self.heartbeat > 0 and now_real >= job.next_beat and not job.renewing:
                job.renewing = True
                job.next_beat = now_real + self.heartbeat
                job.beat_task = asyncio.create_task(
                    self._beat(job), name=f"heartbeat {job.delivery.id}"
                )
            if now_real >= job.next_check and handler is not None and not handler.done():
                job.next_check = now_real + self._check_interval()
                if self.is_cancelled is not None and _idle(job.check_task):
                    job.check_task = asyncio.create_task(
                        self._check_cancelled(job, self.is_cancelled),
                        name=f"cancel check {job.delivery.id}",
                    )

    def _check_interval(self) -> float:
        """Seconds between cancellation checks of one attempt (inf: none)."""
        if self.is_cancelled is None or self.cancel_check is None:
            return math.inf
        return self.cancel_check

    async def _check_cancelled(self, job: _Job, is_cancelled: IsCancelled) -> None:
        """Stop the attempt if its job was cancelled. A check that fails is
        tried again at the next one (the heartbeat is the backstop)."""
        try:
            if await is_cancelled(job.delivery):
                self._cancel(job, _Stop.CANCELLED)
        except Exception as error:
            self._log(job, logging.DEBUG, "cancellation check failed: %s", describe(error))

    async def _beat(self, job: _Job) -> None:
        """Renew one job's lease; a lost token cancels its handler (via Lease.on_lost)."""
        try:
            await job.lease.renew(self.lease)
        except Exception as error:
            self.stats.queue_errors += 1
            self._log(job, logging.WARNING, "lease renewal failed: %s", describe(error))
            # Try again sooner than a full heartbeat: the lease is running down.
            soon = asyncio.get_running_loop().time() + self.heartbeat / 4
            job.next_beat = min(job.next_beat, soon)
        finally:
            job.renewing = False
            self.wake()

    async def _fill(self) -> None:
        """Claim jobs into free slots until the queue has no more or the slots are full."""
        loop = asyncio.get_running_loop()
        while not self._stopping and loop.time() >= self._claim_not_before:
            free = self.concurrency - len(self._jobs)
            kinds, n = self._claim_plan(free)
            if n <= 0:
                return
            claimed_at = self.clock.now()
            self._claiming = True
            try:
                deliveries = await self.queue.claim(n, lease=self.lease, kinds=kinds)
            except Exception as error:
                self._drained = False
                self._queue_failed("claim", error)
                return
            finally:
                self._claiming = False
            # (work heard of during the claim woke us: the next claim takes it,
            # along with jobs handed over meanwhile, while slots are free)
            self._drained = len(deliveries) < n
            self._claim_errors = 0
            self._last_claim_at = claimed_at
            # (jobs handed over while the claim was under way may have taken slots)
            room = min(n, self.concurrency - len(self._jobs))
            for delivery in deliveries[:room]:
                self._begin(delivery, claimed_at)
            if len(deliveries) > n:
                logger.warning(
                    "%s: the queue returned %d deliveries for a claim of %d; releasing the extra",
                    self.name,
                    len(deliveries),
                    n,
                )
            if len(deliveries) > room:
                await self._give_back(deliveries[room:])
            if len(deliveries) < n:
                return

    async def _give_back(self, surplus: list[Delivery]) -> None:
        """Release deliveries there is no room for: running them would break
        the concurrency bound."""
        for delivery in surplus:
            try:
                await self.queue.release(delivery)
            except Exception as error:
                self.stats.queue_errors += 1
                logger.warning(
                    "%s: releasing job %s failed (%s); it returns when its lease expires",
                    self.name,
                    delivery.id,
                    describe(error),
                    extra={
                        "run_id": delivery.id,
                        "kind": delivery.kind,
                        "attempt": delivery.attempt,
                    },
                )

    def _claim_plan(self, free: int) -> tuple[Collection[str] | None, int]:
        """Which kinds to claim and how many.

        No cap hit: every kind (``None``, so a job of a kind nobody registered
        is claimed and dead-lettered rather than left to sit forever), unless
        ``only_registered``. Some kind at its cap: only the registered kinds
        below theirs. Either way the
        batch is no bigger than the smallest remaining cap among kinds it may
        return, so one claim can never overshoot a cap.
        """
        if free <= 0:
            return None, 0
        room = {
            kind: reg.max_in_flight - self._by_kind.get(kind, 0)
            for kind, reg in self._handlers.items()
            if reg.max_in_flight is not None
        }
        if self.only_registered or any(left <= 0 for left in room.values()):
            kinds = [k for k in self._handlers if room.get(k, 1) > 0]
            if not kinds:
                return kinds, 0
        else:
            kinds = None
        allowed = [left for kind, left in room.items() if kinds is None or kind in kinds]
        return (kinds, min([free, *allowed]))

    async def _idle_for(self) -> float:
        """Real seconds to sleep before the next turn, if nothing wakes us first."""
        loop = asyncio.get_running_loop()
        now_real, now = loop.time(), self.clock.now()
        wait = self.poll_interval
        if now_real < self._claim_not_before:
            wait = self._claim_not_before - now_real
        elif len(self._jobs) < self.concurrency:
            try:
                due = await self.queue.next_due()
            except Exception as error:
                self._queue_failed("next_due", error)
                due = None
            # A time after our last claim: sleep until then. One at or before
            # it was due when we claimed and the claim did not return it (its
            # kind is at its cap): claiming again at once would not either.
            if due is not None and due > self._last_claim_at:
                wait = min(wait, due - now)
        return max(MIN_SLEEP, min(wait, self._watch_pause()))

    def _watch_pause(self) -> float:
        """Real seconds until :meth:`_watch` next has something to do (inf: nothing)."""
        now_real, now = asyncio.get_running_loop().time(), self.clock.now()
        wait = float("inf")
        for job in self._jobs:
            if job.stop is not None:
                continue
            handler = job.handler_task
            if job.deadline is not None and handler is not None and not handler.done():
                wait = min(wait, job.deadline - now)
            if self.heartbeat > 0 and not job.renewing:
                wait = min(wait, job.next_beat - now_real)
            if handler is not None and not handler.done():
                wait = min(wait, job.next_check - now_real)
        return wait

    async def _sleep(self, seconds: float) -> None:
        assert self._wakeup is not None
        try:
            async with asyncio.timeout(seconds):
                await self._wakeup.wait()
        except TimeoutError:
            pass

    def _queue_failed(self, operation: str, error: Exception) -> None:
        """Log a queue error and hold off claiming for a (growing, capped) pause.

        One line per failure: a store outage can last minutes, and a
        traceback per retry would bury everything else in the log. Only an
        error that is none of stepstone's (a bug, not an outage) brings its
        traceback, on the first failure of a streak.
        """
        self.stats.queue_errors += 1
        self._claim_errors += 1
        pause = self._retry_pause()
        self._claim_not_before = asyncio.get_running_loop().time() + pause
        unexpected = not isinstance(error, StepstoneError) and self._claim_errors == 1
        logger.warning(
            "%s: queue %s failed (%s); retrying in %.2fs",
            self.name,
            operation,
            describe(error),
            pause,
            exc_info=error if unexpected else None,
        )

    def _retry_pause(self) -> float:
        exponent = min(max(self._claim_errors - 1, 0), 30)
        cap = self.poll_interval * QUEUE_ERROR_BACKOFF_POLLS
        return min(min(QUEUE_ERROR_BACKOFF, self.poll_interval) * 2.0**exponent, cap)

    # -- one job -----------------------------------------------------------------

    def _begin(self, delivery: Delivery, claimed_at: float) -> None:
        """Start a claimed job: its handler task (unless it cannot run) and its job task."""
        loop = asyncio.get_running_loop()
        registration = self._handlers.get(delivery.kind)
        timeout = None
        if registration is not None:
            timeout = registration.timeout or self.attempt_timeout
        job: _Job
        lease = Lease(delivery, self.queue, self.clock, lambda: self._cancel(job, _Stop.LOST))
        job = _Job(
            delivery=delivery,
            registration=registration,
            lease=lease,
            deadline=None if timeout is None else self.clock.now() + timeout,
            next_beat=loop.time() + self.heartbeat,
            next_check=loop.time() + self._check_interval(),
            claimed_at=claimed_at,
        )
        self._jobs.add(job)
        self._held[delivery.id] = self._held.get(delivery.id, 0) + 1
        self._by_kind[delivery.kind] = self._by_kind.get(delivery.kind, 0) + 1
        self.stats.claimed += 1
        self.stats.peak_in_flight = max(self.stats.peak_in_flight, len(self._jobs))
        if self.observer is not None or self.on_attempt_over is not None:
            job.began = loop.time()
        if self.observer is not None:
            self._observe(job, lambda observer: observer.claimed(delivery))
        runnable = registration is not None and delivery.attempt <= delivery.max_attempts
        if runnable:
            assert registration is not None
            job.attempt = Attempt(delivery, lease)
            job.handler_task = asyncio.create_task(
                self._call(registration, job.attempt),
                name=f"handler {delivery.kind} {delivery.id}",
            )
        job.task = asyncio.create_task(self._execute(job), name=f"job {delivery.id}")
        self._log(job, logging.DEBUG, "claimed")

    async def _call(self, registration: _Registration, attempt: Attempt) -> object:
        if registration.is_async:
            result = registration.handler(attempt)
            return await result if inspect.isawaitable(result) else result
        result = await self.in_thread(registration.handler, attempt)
        # A sync callable that hands back an awaitable (a lambda around an
        # async function) still gets it run.
        return await result if inspect.isawaitable(result) else result

    async def in_thread(self, fn: Callable[..., R], /, *args: Any) -> R:
        """``fn(*args)`` in the worker's thread pool, with the caller's context
        variables: where every synchronous handler runs, and where a handler
        runs synchronous work of its own (a job's ``def run``).

        What asyncio.to_thread does, on the worker's own pool, one thread per
        slot: the default executor has min(32, cores + 4) threads, which would
        quietly cap synchronous work below ``concurrency`` on a small machine.
        The pool is made on first use, so a concurrency set before then (the
        CLI's ``--concurrency``) sizes it.
        """
        if self._threads is None:
            self._threads = ThreadPoolExecutor(self.concurrency, thread_name_prefix=self.name)
        call = functools.partial(contextvars.copy_context().run, fn, *args)
        return await asyncio.get_running_loop().run_in_executor(self._threads, call)

    def _cancel(self, job: _Job, why: _Stop) -> None:
        """Cancel a job's handler for ``why``, unless it already finished.

        A finished handler is left alone: its result stands and is settled,
        however close to a deadline it came.
        """
        handler = job.handler_task
        if job.stop is not None or handler is None or handler.done():
            return
        job.stop = why
        if job.attempt is not None:
            job.attempt.stopped = why.value
        handler.cancel(why.value)
        self.wake()

    async def _execute(self, job: _Job) -> None:
        """Wait for the handler, then settle what it did. Never raises."""
        ended: AttemptEnd | None = None
        decision: Decision | None = None
        try:
            ended = await self._ended(job)
            if ended is not None:
                decision = decide(job.delivery, ended, self.backoff, self.clock.now())
                await self._apply(job, decision, ended)
        except Exception:
            self._log(job, logging.ERROR, "settling failed", exc_info=True)
        finally:
            if self.observer is not None or self.on_attempt_over is not None:
                await self._attempt_over(job, ended, decision)
            for side_task in (job.beat_task, job.check_task):
                if side_task is not None and not side_task.done():
                    side_task.cancel()
            self._jobs.discard(job)
            if (held := self._held.get(job.delivery.id, 1) - 1) > 0:
                self._held[job.delivery.id] = held
            else:
                self._held.pop(job.delivery.id, None)
            left = self._by_kind.get(job.delivery.kind, 1) - 1
            if left > 0:
                self._by_kind[job.delivery.kind] = left
            else:
                self._by_kind.pop(job.delivery.kind, None)
            self.wake()

    async def _attempt_over(
        self, job: _Job, ended: AttemptEnd | None, decision: Decision | None
    ) -> None:
        """Tell the observer and ``on_attempt_over`` how the attempt ended. Never raises."""
        settled = job.settled
        if settled is None and job.lease.lost:
            settled = Settlement.LOST
        report = AttemptReport(
            job.delivery,
            settled,
            error_type(ended, decision),
            asyncio.get_running_loop().time() - job.began,
            claimed_at=job.claimed_at,
            ended_at=self.clock.now(),
            decision=decision,
            cancelled=job.stop is _Stop.CANCELLED,
        )
        self._observe(job, lambda observer: observer.attempt_over(report))
        task = asyncio.current_task()
        if self.on_attempt_over is None or (task is not None and task.cancelling()):
            return  # (cancelled: the drain gave up on this job; so do we)
        try:
            await self.on_attempt_over(report)
        except Exception:
            self._log(job, logging.ERROR, "on_attempt_over failed", exc_info=True)

    async def _ended(self, job: _Job) -> AttemptEnd | None:
        """How the attempt ended, or None when there is nothing to settle
        (the lease was lost, or the drain cut the attempt short and it was released)."""
        delivery = job.delivery
        if delivery.attempt > delivery.max_attempts:
            return Expired()
        if job.handler_task is None:
            return NoHandler()
        handler = job.handler_task
        await asyncio.wait([handler])
        if job.stop is _Stop.CANCELLED or (
            (job.stop is _Stop.LOST or job.lease.lost) and await self._was_cancelled(job)
        ):
            self.stats.cancelled += 1
            job.stop = _Stop.CANCELLED  # (found so after a lost lease, too)
            self._log(job, logging.INFO, "cancelled while running; stopped, not settled")
            return None
        if job.stop is _Stop.LOST or job.lease.lost:
            self.stats.lost += 1
            self._log(job, logging.WARNING, "lease lost while running; not settled")
            return None
        if not handler.cancelled() and handler.exception() is None:
            # It returned: the work is done, even if a timeout or the drain
            # asked it to stop a moment too late (or it ignored the request).
            return Returned(handler.result())
        if job.stop is _Stop.DRAIN:
            await self._release(job)
            return None
        if job.stop is _Stop.TIMEOUT:
            assert job.registration is not None
            return TimedOut(job.registration.timeout or self.attempt_timeout or 0.0)
        if handler.cancelled():
            # Nobody here cancelled it: the handler raised CancelledError itself
            # (or cancelled its own task). That is its failure, not a shutdown.
            return Raised(asyncio.CancelledError("handler raised CancelledError"))
        error = handler.exception()
        assert error is not None
        if isinstance(error, Suspend):
            return Raised(error)  # no failure, and frequent: no traceback to format
        return Raised(error, format_traceback(reported_error(error)))

    async def _was_cancelled(self, job: _Job) -> bool:
        """Whether a lease found gone was taken by a cancel (asked once, so
        the log can say which; a lost lease is rare)."""
        if self.is_cancelled is None:
            return False
        try:
            return await self.is_cancelled(job.delivery)
        except Exception:
            return False

    async def _apply(self, job: _Job, decision: Decision, ended: AttemptEnd) -> None:
        """Carry out a decision: on_terminal first for a terminal one, then the
        queue. A failed attempt is logged once, with its traceback when the
        attempt counts (an uncounted retry, a store outage or RetryLater, is one line)."""
        delivery = job.delivery
        error = reported_error(ended.error) if isinstance(ended, Raised) else None
        if isinstance(decision, Retry):
            self._log(
                job,
                logging.INFO,
                "failed (%s); retrying in %.3gs%s",
                decision.error,
                decision.delay,
                "" if decision.count else " (attempt not counted)",
                exc_info=error if decision.count else None,
            )
            text = with_traceback(decision.error, decision.traceback)
            await self._settle(
                job,
                "nack",
                lambda: self.queue.nack(
                    delivery, delay=decision.delay, count=decision.count, error=text
                ),
            )
            return
        if isinstance(decision, Suspended):
            wait = decision.wait
            self._log(job, logging.DEBUG, "suspended (%s %s)", wait.status.value, wait.detail)
            await self._settle(
                job,
                "suspend",
                lambda: self.queue.suspend(delivery, until=decision.until, wait=wait),
            )
            return
        if not await self._report(job, decision):
            return
        if isinstance(decision, Ack):
            await self._settle(job, "ack", lambda: self.queue.ack(delivery))
        else:
            self._log(job, logging.WARNING, "failed for good: %s", decision.reason, exc_info=error)
            await self._dead_letter(job, decision.reason)

    async def _dead_letter(self, job: _Job, reason: str) -> None:
        delivery = job.delivery
        await self._settle(job, "dead_letter", lambda: self.queue.dead_letter(delivery, reason))

    async def _settle(
        self, job: _Job, operation: str, call: Callable[[], Awaitable[Settlement]]
    ) -> None:
        """Run one settlement, retrying a queue error a few times (the heartbeat
        keeps the lease meanwhile). If it never lands, the job stays claimed
        and comes back when its lease lapses, which is the honest outcome for
        "we could not say how it ended"."""
        for attempt in range(SETTLE_TRIES):
            try:
                settled = await call()
            except Exception as error:
                self.stats.queue_errors += 1
                last = attempt == SETTLE_TRIES - 1
                self._log(
                    job,
                    logging.ERROR if last else logging.WARNING,
                    "%s failed (%s)%s",
                    operation,
                    describe(error),
                    "; the job returns when its lease expires" if last else "; retrying",
                )
                if not last:
                    await asyncio.sleep(min(QUEUE_ERROR_BACKOFF, self.poll_interval) * 2**attempt)
                continue
            self._count(job, settled, operation)
            return

    async def _report(self, job: _Job, decision: Ack | Dead) -> bool:
        """Hand the terminal result to on_terminal; returns whether to go on
        and settle as decided.

        If on_terminal raises, the result was not recorded. A store outage
        (StoreUnavailable) passes: the job is nacked, uncounted, to run again
        later. Anything else would fail the same way on every claim (an
        outcome object that does not decode, a key the store refuses), so the
        job is dead-lettered at once with that error in its reason: a job
        ends in bounded time, never claimed again and again for nothing.
        """
        if self.on_terminal is None:
            return True
        if self.clock.now() >= job.lease.expires_at:
            # Our lease ran out while the handler ran: the job may be another
            # worker's now. Check before reporting a result nobody waits for.
            try:
                ours = await job.lease.renew(self.lease)
            except Exception:
                ours = True  # cannot tell; the settlement below is fenced anyway
            if not ours:
                self.stats.lost += 1
                self._log(job, logging.WARNING, "lease lost before the result was reported")
                return False
        try:
            await self.on_terminal(job.delivery, decision.terminal)
        except StoreUnavailable as error:
            delay = self.backoff.delay(uncounted_step(job.delivery), job.delivery.id)
            message = truncate(f"result not recorded: {describe(error)}")
            self._log(job, logging.WARNING, "%s; retrying in %.3gs", message, delay)
            delivery = job.delivery
            await self._settle(
                job,
                "nack",
                lambda: self.queue.nack(delivery, delay=delay, count=False, error=message),
            )
            return False
        except Exception as error:
            message = f"result not recorded: {describe(error)}"
            self._log(job, logging.ERROR, "%s; the job is dead", message, exc_info=True)
            reason = message if isinstance(decision, Ack) else f"{decision.reason} ({message})"
            await self._dead_letter(job, truncate(reason))
            return False
        return True

    async def _release(self, job: _Job) -> None:
        self._log(job, logging.INFO, "cut short by shutdown; releasing (attempt not counted)")
        try:
            settled = await self.queue.release(job.delivery)
        except Exception as error:
            self.stats.queue_errors += 1
            self._log(
                job,
                logging.WARNING,
                "release failed (%s); the job returns when its lease expires",
                describe(error),
            )
            return
        self._count(job, settled, "release")

    def _count(self, job: _Job, settled: Settlement, operation: str) -> None:
        job.settled = settled
        if settled is Settlement.LOST:
            self.stats.lost += 1
            self._log(
                job,
                logging.WARNING,
                "%s found the job no longer ours (lease lost or job cancelled); nothing changed",
                operation,
            )
            return
        if settled is Settlement.ACKED:
            self.stats.succeeded += 1
        elif settled is Settlement.RETRIED:
            self.stats.retried += 1
        elif settled is Settlement.DEAD:
            self.stats.dead += 1
        elif settled is Settlement.RELEASED:
            self.stats.released += 1
        elif settled is Settlement.SUSPENDED:
            self.stats.suspended += 1
        self._log(job, logging.DEBUG, "%s: %s", operation, settled.value)

    # -- shutdown ------------------------------------------------------------------

    async def _drain(self) -> None:
        """Give in-flight jobs the drain window, then cancel and release the rest.

        Heartbeats and attempt timeouts keep running meanwhile: a drain
        window longer than the lease must not cost a job its lease.
        """
        loop = asyncio.get_running_loop()
        window = max(0.0, self.drain_timeout if self._drain_window is None else self._drain_window)
        if self._jobs:
            logger.info("%s draining %d job(s) for up to %gs", self.name, len(self._jobs), window)
        await self._tend(loop.time() + window)
        for job in list(self._jobs):
            self._cancel(job, _Stop.DRAIN)
        # What is left: released stragglers, and settlements of handlers that
        # finished in time. Both are short queue calls, unless on_terminal or
        # the queue hangs; bound the wait.
        await self._tend(loop.time() + max(window, SETTLE_GRACE))
        stuck = [job.task for job in self._jobs if job.task is not None]
        for task in stuck:
            # Still claimed by us: the job comes back when its lease lapses.
            logger.error("%s: %s did not settle after the drain; abandoning it", self.name, task)
            task.cancel()
        if stuck:
            await asyncio.wait(stuck)
        if self._threads is not None:
            # Threads of drained or timed-out sync handlers cannot be stopped;
            # don't wait for them (they finish on their own, unobserved).
            self._threads.shutdown(wait=False, cancel_futures=True)
            self._threads = None

    async def _tend(self, deadline: float) -> None:
        """Keep heartbeats and timeouts going until no job is left or ``deadline`` (loop time)."""
        loop = asyncio.get_running_loop()
        assert self._wakeup is not None
        while self._jobs:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            self._wakeup.clear()
            self._watch()
            await self._sleep(min(remaining, max(MIN_SLEEP, self._watch_pause())))

    def _observe(self, job: _Job, tell: Callable[[WorkerObserver], None]) -> None:
        """Tell the observer; what it raises is logged, never the job's business."""
        if self.observer is None:
            return
        try:
            tell(self.observer)
        except Exception:
            self._log(job, logging.ERROR, "the worker's observer failed", exc_info=True)

    # -- logging ---------------------------------------------------------------------

    def _log(
        self,
        job: _Job,
        level: int,
        message: str,
        *args: Any,
        exc_info: bool | BaseException | None = False,
    ) -> None:
        if not logger.isEnabledFor(level):
            return  # skip building the prefix and extra: twice per job at DEBUG
        d = job.delivery
        logger.log(
            level,
            "%s: %s: " + message,
            self.name,
            job.where(),
            *args,
            exc_info=exc_info,
            extra={"run_id": d.id, "kind": d.kind, "attempt": d.attempt},
        )

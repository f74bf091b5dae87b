"""The Worker: claims jobs from a LeaseQueue, runs their handlers, settles them.

One loop per worker, with at most ``concurrency`` handlers in flight (its
capacity). Each round of the loop:

1. **Fills** free capacity by claiming a batch (kinds at their per-kind cap
   are left out of the claim, so their jobs stay queued rather than claimed
   and idle: :mod:`stepstone.runtime.worker.claims`).
2. **Sleeps** until something can change: a handler finishes, the queue says
   work arrived in this process (``queue.subscribe``), the clock moves
   (a FakeClock's ``advance``), the next job comes due (``queue.next_due``),
   or ``poll_interval`` passes (other processes enqueue without telling us).

Beside the loop, from the start to the end of the drain, the heartbeats keep a
task of their own (:mod:`stepstone.runtime.worker.heartbeats`): it renews leases
whose heartbeat is due and cancels handlers past their attempt timeout, so
a claim the store is slow to answer never holds back a renewal.

Each claimed job then runs as its own task, and is settled there
(:mod:`stepstone.runtime.worker.attempts`, :mod:`stepstone.runtime.worker.settle`);
a stop drains what is in flight (:mod:`stepstone.runtime.worker.drain`).

A store that cannot be used as it answers (a StoreConfigError from a claim:
the bucket is gone, the credentials are refused, the provider refuses
conditions that hold) stops the worker with one error logged and told to
``on_store_broken``: retrying it would only hide it, the runs waiting on
this worker would wait for ever without a word.

Time: every decision about *when* (run-at, lease expiry, attempt timeout)
reads the injected clock; heartbeats, poll intervals and the drain window
are real seconds, because they are about this process's liveness.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import TracebackType

from stepstone.store.errors import StoreConfigError

from .. import clock as clock_mod
from ..backoff import Backoff
from ..capabilities import IdleHints, Prefetching, Reclaiming
from ..clock import Clock
from ..error_text import describe
from ..observer import WorkerObserver
from ..queue import DEFAULT_LEASE, DEFAULT_MAX_LAPSES, Delivery, LeaseQueue
from .attempts import Attempts
from .callbacks import AttemptCallbacks
from .claims import ClaimLoop
from .drain import drain
from .hand_off import may_take
from .handlers import Handler, Registration, is_async
from .heartbeats import Heartbeats
from .identity import WorkerIdentity
from .in_flight import InFlight, Stop
from .lease import check_lease
from .logs import JobLog, logger
from .pauses import Wakeup
from .presence import Presence
from .settle import SealText, Settler
from .stats import WorkerStats
from .threads import JobThreads


class Worker:
    """Runs the handlers registered for each job kind over jobs claimed from ``queue``.

    ``lease`` is the claim's lease in seconds, renewed every ``heartbeat``
    seconds (default lease/3; 0 disables renewal). ``attempt_timeout`` bounds
    one attempt (``register(timeout=)`` overrides it per kind). ``backoff``
    spaces retries. ``callbacks`` are the layer above's part in each attempt
    (:class:`~stepstone.runtime.worker.callbacks.AttemptCallbacks`): it hears
    every job's final result before the queue lets go of it, is asked, every
    ``cancel_check`` seconds once an attempt has run that long, whether its
    job was cancelled, and hears how each attempt ended; without them the
    worker settles as decided and a cancel is found by the heartbeat, when the
    lease turns out gone. ``observer`` hears each claim and each attempt's end
    (metrics: :mod:`stepstone.runtime.observer`). ``threads`` is where plain
    handlers run; without it the worker makes its own, one thread per unit
    of capacity, and shuts it down when it stops. ``clock`` defaults to the
    queue's own (``queue.clock``) so both judge lease expiry and run-at by
    the same time.

    By default a job of a kind nobody registered is claimed and dead-lettered
    (``FailureKind.UNKNOWN``), so a typo'd or retired job type fails loudly
    instead of waiting forever. A fleet in which different workers run
    different kinds over one queue must pass ``only_registered=True``, or
    each worker would dead-letter the others' jobs.

    With a FakeClock, heartbeats still tick in real seconds: advancing the
    clock past a lease between two beats lapses it, as a process that stalled
    that long would in production.

    ``worker_id`` is the worker's id, which outlives the process
    (:mod:`stepstone.runtime.worker.identity`): on a queue that can reclaim
    (StoreQueue), a worker started again under its id on the same host takes
    back at once the runs its killed life held, instead of waiting out their
    leases. Two live workers on one host may not share an id: the second
    one's ``start`` raises WorkerIdInUse. Without one a worker takes the
    host's name, or the next free one on this host (``host-2``, ...).

    ``max_lapses``: a run whose leases lapsed this many times (its workers
    died or hung under it; each costs no attempt) is dead as ``expired``
    when a worker takes over the last, without running again.

    ``seal_text`` (None: the texts are kept as they are) seals each error
    text the queue keeps of a claim (:mod:`stepstone.runtime.worker.settle`).
    """

    def __init__(
        self,
        queue: LeaseQueue,
        *,
        concurrency: int = 16,
        lease: float = DEFAULT_LEASE,
        heartbeat: float | None = None,
        poll_interval: float = 1.0,
        attempt_timeout: float | None = None,
        backoff: Backoff = Backoff(),  # noqa: B008 - frozen, so sharing it is safe
        drain_timeout: float = 30.0,
        clock: Clock | None = None,
        callbacks: AttemptCallbacks | None = None,
        observer: WorkerObserver | None = None,
        threads: JobThreads | None = None,
        cancel_check: float | None = 1.0,
        worker_id: str | None = None,
        only_registered: bool = False,
        presence: Presence | None = None,
        on_store_broken: Callable[[StoreConfigError], None] | None = None,
        max_lapses: int = DEFAULT_MAX_LAPSES,
        seal_text: SealText | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        check_lease(lease)
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be positive, got {poll_interval}")
        if heartbeat is not None and not 0 <= heartbeat < lease:
            # A beat as long as the lease would renew only after it lapsed.
            raise ValueError(f"heartbeat must be >= 0 and shorter than the lease, got {heartbeat}")
        if attempt_timeout is not None and attempt_timeout <= 0:
            raise ValueError(f"attempt_timeout must be positive, got {attempt_timeout}")
        if cancel_check is not None and cancel_check <= 0:
            raise ValueError(f"cancel_check must be positive (or None), got {cancel_check}")
        if max_lapses < 1:
            raise ValueError(f"max_lapses must be at least 1, got {max_lapses}")
        self.queue = queue
        self._concurrency = concurrency
        self.lease = lease
        self.heartbeat = lease / 3 if heartbeat is None else heartbeat
        self.poll_interval = poll_interval
        self.attempt_timeout = attempt_timeout
        self.backoff = backoff
        self.drain_timeout = drain_timeout
        self.clock: Clock = clock or queue.clock
        self.cancel_check = cancel_check
        self.max_lapses = max_lapses
        self._identity = WorkerIdentity(worker_id)
        self.only_registered = only_registered
        self._presence = presence
        self.stats = WorkerStats()
        self._callbacks = callbacks
        self._observer = observer
        self._own_threads = threads is None
        self._threads = JobThreads(concurrency, name=self.worker_id) if threads is None else threads

        self._handlers: dict[str, Registration] = {}
        self._jobs = InFlight()
        log = JobLog(self._identity)
        self._heartbeats = Heartbeats(
            self._jobs,
            self.clock,
            is_cancelled=None if callbacks is None else callbacks.is_cancelled,
            cancel_check=cancel_check,
            stats=self.stats,
            log=log,
            wake=self.wake,
        )
        self._settler = Settler(
            queue,
            self.clock,
            backoff=backoff,
            lease=lease,
            poll_interval=poll_interval,
            on_terminal=None if callbacks is None else callbacks.on_terminal,
            stats=self.stats,
            log=log,
            seal_text=seal_text,
        )
        self._attempts = Attempts(
            queue,
            self.clock,
            self._jobs,
            self._handlers,
            heartbeats=self._heartbeats,
            settler=self._settler,
            threads=self._threads,
            callbacks=callbacks,
            observer=observer,
            backoff=backoff,
            attempt_timeout=attempt_timeout,
            lease=lease,
            heartbeat=self.heartbeat,
            max_lapses=max_lapses,
            stats=self.stats,
            log=log,
            wake=self.wake,
        )
        self._claims = ClaimLoop(
            queue,
            self.clock,
            self._jobs,
            self._handlers,
            lease=lease,
            poll_interval=poll_interval,
            only_registered=only_registered,
            stats=self.stats,
            begin=self._attempts.begin,
            identity=self._identity,
        )
        self._loop_task: asyncio.Task[None] | None = None
        self._heartbeats_task: asyncio.Task[None] | None = None
        self._wakeup: Wakeup | None = None
        self._stopping = False
        self._drain_window: float | None = None
        self._unsubscribe: list[Callable[[], None]] = []
        self._on_store_broken = on_store_broken
        self.store_broken: StoreConfigError | None = None
        """What stopped the worker, if the store did (module docstring)."""

    # -- configuration -------------------------------------------------------

    @property
    def worker_id(self) -> str:
        """The worker's id (the default one settles on a free id at the start).
        Set before the worker starts (the CLI's ``--worker-id``), it is the id
        the worker must have: a live worker holding it on this host makes the
        start raise WorkerIdInUse."""
        return self._identity.id

    @worker_id.setter
    def worker_id(self, value: str) -> None:
        self._identity.want(value)

    @property
    def seal_text(self) -> SealText | None:
        """What seals the error texts the queue keeps (None: kept as they
        are); set it before the worker starts."""
        return self._settler.seal_text

    @seal_text.setter
    def seal_text(self, seal: SealText | None) -> None:
        self._settler.seal_text = seal

    @property
    def holder(self) -> str:
        """What this worker's claims are marked with (``LeaseQueue.claim``'s ``holder``)."""
        return self._identity.holder

    @property
    def concurrency(self) -> int:
        """Jobs in flight at most (the worker's capacity). Set before the
        worker starts (the CLI's ``--concurrency``), it resizes the threads
        plain handlers run in too, as they are sized by it."""
        return self._concurrency

    @concurrency.setter
    def concurrency(self, value: int) -> None:
        if value < 1:
            raise ValueError(f"concurrency must be at least 1, got {value}")
        self._concurrency = value
        self._threads.resize(value)

    @property
    def observer(self) -> WorkerObserver | None:
        """What hears each claim and each attempt's end (given when the worker was built)."""
        return self._observer

    def register(
        self,
        kind: str,
        handler: Handler,
        *,
        max_in_flight: int | None = None,
        timeout: float | None = None,
        lease: float | None = None,
    ) -> None:
        """Run ``handler`` for jobs of ``kind``, at most ``max_in_flight`` at
        once in this worker, each attempt bounded by ``timeout`` seconds.

        ``lease`` gives the kind's jobs a lease of their own, renewed every
        third of it, where two thirds of the worker's is too short a stall
        (an async handler that holds the event loop, say): each such job is
        claimed for the worker's lease and renewed to its own at once (one
        more request per job), and its runs are taken over that much later
        when their worker dies.

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
        if lease is not None:
            check_lease(lease)
        self._handlers[kind] = Registration(
            handler, is_async(handler), max_in_flight, timeout, lease
        )

    # -- what is in flight -----------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Jobs this worker holds now."""
        return len(self._jobs)

    def in_flight_by_kind(self) -> dict[str, int]:
        """Jobs in flight here, by kind (a copy; safe to call from another thread)."""
        return self._jobs.by_kind()

    def held_runs(self) -> list[str]:
        """The run ids in flight here, once each (what the worker's record lists)."""
        return self._jobs.run_ids()

    def holds(self, run_id: str) -> bool:
        """Whether this worker has the job in flight under a lease that has not
        lapsed by its clock (so whoever waits for the job's end here will hear
        of it without asking the store). A lapsed lease may have let another
        process take the job over and finish it."""
        jobs = self._jobs.of_run(run_id)
        if not jobs:
            return False
        now = self.clock.now()
        return any(not job.lease.lost and job.lease.expires_at > now for job in jobs)

    def cancel_running(self, run_id: str) -> bool:
        """The job was cancelled (its outcome recorded, its queue record
        dropped): stop its attempt here at once, if one runs here. Nothing is
        settled; the log says it was cancelled. True if one was running."""
        found = False
        for job in self._jobs.of_run(run_id):
            if job.handler_task is not None:
                self._attempts.stop(job, Stop.CANCELLED)
                found = True
        return found

    # -- hand-off (stepstone.runtime.worker.hand_off) --------------------------

    def ready_for(self, kind: str) -> bool:
        """Whether a job of ``kind`` may be handed to this worker as it is
        enqueued (``take``, after ``ClaimedEnqueue.enqueue_claimed``): it runs on
        this event loop with free capacity and room under the kind's cap, and
        no job waiting in the queue is passed over for it."""
        try:
            here = self._wakeup is not None and asyncio.get_running_loop() is self._wakeup.loop
        except RuntimeError:
            here = False
        return may_take(
            kind,
            open_here=here and not self._stopping and self._loop_task is not None,
            claims=self._claims,
            handlers=self._handlers,
            jobs=self._jobs,
            capacity=self._concurrency,
        )

    def take(self, delivery: Delivery) -> bool:
        """Run ``delivery`` (a claim made for this worker) as a claimed job,
        if ``ready_for`` its kind still; False, and nothing done, if not."""
        if not self.ready_for(delivery.kind):
            return False
        self._attempts.begin(delivery, self.clock.now())
        return True

    # -- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        """Start the loop as a background task and return at once."""
        if self._loop_task is not None:
            raise RuntimeError(f"{self.worker_id} was already started")
        if isinstance(self.queue, Reclaiming):
            self._identity.take(self.queue.holder_scope)  # WorkerIdInUse: nothing started
        self._wakeup = Wakeup(asyncio.get_running_loop())
        self._stopping = False
        self._claims.work_came()
        self._unsubscribe = [clock_mod.subscribe(self.clock, self.wake)]
        if isinstance(self.queue, IdleHints):
            self._unsubscribe.append(self.queue.subscribe(self._work_came))
        self._heartbeats_task = asyncio.create_task(
            self._heartbeats.keep(), name=f"{self.worker_id} heartbeats"
        )
        self._loop_task = asyncio.create_task(self._run(), name=f"{self.worker_id} loop")
        if self._presence is not None:
            self._presence.start(self, sole_holder=self._identity.held)
        logger.info("%s started (concurrency %d)", self.worker_id, self._concurrency)

    async def stop(self, drain_timeout: float | None = None) -> None:
        """Stop claiming, drain, and return when the loop has ended.

        In-flight handlers get ``drain_timeout`` seconds (default: the
        worker's) to finish and be settled; the rest are cancelled and their
        jobs released with the attempt not counted. On a queue that receives
        ahead of its claims (``Prefetching``: SQS's long polls), the stop
        then waits those receives out (at most the long-poll wait) and gives
        back what they brought.
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
        if self._wakeup is not None:
            self._wakeup.set()
        self._heartbeats.poke()  # (a moved clock may have brought a timeout due)

    def _work_came(self) -> None:
        """The queue has work for us: claim it, and hand nothing over meanwhile."""
        self._claims.work_came()
        self.wake()

    # -- the loop --------------------------------------------------------------

    async def _run(self) -> None:
        wakeup = self._wakeup
        assert wakeup is not None
        try:
            await self._reclaim()
            while not self._stopping:
                wakeup.clear()
                try:
                    await self._claims.fill(self._concurrency, lambda: self._stopping)
                    # (A stop during the fill has set the wake-up: the sleep
                    # below returns at once and the loop condition ends it.)
                    pause = await self._claims.idle_for(self._concurrency)
                except StoreConfigError as error:
                    self._broken(error)
                    break
                except Exception:
                    # A bug of ours, not a queue outage (those are handled
                    # where they happen): log it and keep the worker alive.
                    logger.exception("%s: unexpected error in the worker loop", self.worker_id)
                    pause = self.poll_interval
                await wakeup.sleep(pause)
            await drain(
                self._jobs,
                window=self.drain_timeout if self._drain_window is None else self._drain_window,
                wakeup=wakeup,
                stop=self._attempts.stop,
                worker_id=self.worker_id,
            )
            if self._own_threads:
                # Threads of drained or timed-out sync handlers cannot be
                # stopped; don't wait for them (they finish on their own).
                self._threads.shutdown(wait=False)
            await self._give_back()
        finally:
            if self._heartbeats_task is not None:
                self._heartbeats_task.cancel()
                await asyncio.wait([self._heartbeats_task])
            for unsubscribe in self._unsubscribe:
                unsubscribe()
            self._unsubscribe = []
            if self._presence is not None:
                await self._presence.stop()  # marked stopped while the id is still held
            self._identity.release()
            logger.info("%s stopped", self.worker_id)

    async def _give_back(self) -> None:
        """A graceful stop gives back what the queue received ahead of its
        claims (``Prefetching``): visible to other workers at once, not
        after their leases. A failure is logged: those jobs come back when
        their leases lapse, as after a crash."""
        if not isinstance(self.queue, Prefetching):
            return
        try:
            await self.queue.give_back()
        except Exception:
            logger.warning(
                "%s: could not give back the jobs received ahead of claims; "
                "they come back when their leases lapse",
                self.worker_id,
                exc_info=True,
            )

    def _broken(self, error: StoreConfigError) -> None:
        """Stop for a store that cannot be used as it answers (module docstring)."""
        logger.error(
            "%s stopped: the store cannot be used as it answers: %s", self.worker_id, error
        )
        self.store_broken = error
        self._stopping = True
        if self._on_store_broken is not None:
            self._on_store_broken(error)

    async def _reclaim(self) -> None:
        """Take back the runs a killed life of this worker held (its id's
        lock, taken at the start, says that life is over), up to capacity."""
        if not (isinstance(self.queue, Reclaiming) and self._identity.after_a_kill):
            return
        kinds = list(self._handlers) if self.only_registered else None
        try:
            found = await self.queue.reclaim(
                self.holder,
                lease=self.lease,
                limit=self._concurrency,
                within=2 * max([self.lease, *(r.lease or 0 for r in self._handlers.values())]),
                kinds=kinds,
            )
        except Exception as error:
            logger.warning(
                "%s: could not look for the runs its previous life held (%s); "
                "they run again when their leases lapse",
                self.worker_id,
                describe(error),
            )
            return
        now = self.clock.now()
        for delivery in found:
            self._attempts.begin(delivery, now)
        if found:
            logger.info(
                "%s: took back %d run(s) its previous life held: %s",
                self.worker_id,
                len(found),
                ", ".join(d.id for d in found),
            )

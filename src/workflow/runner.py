"""JobRunner: submit jobs, run them, and answer for them.

One object serves both sides. In an API process it only submits and awaits
(no worker runs; ``submit`` works without ``async with``). In a worker
process ``async with runner:`` runs the worker loop, which claims jobs from
the lease queue, runs them with memoized steps, writes each run's outcome
record before acking, and sweeps finished runs after the retention window.

The runner is a facade: it holds the registry of job types and the
lifecycle, and wires the parts that do the work, each behind a narrow
interface:

- :mod:`stepstone.submitting`: the idempotent submit protocol;
- :mod:`stepstone.waiting`: handles waiting for outcomes, and wake-ups;
- :mod:`stepstone.executor`: one attempt run, and its outcome recorded;
- :mod:`stepstone.control`: ``status`` and ``cancel`` of one run;
- :mod:`stepstone.retention`: the sweep of finished runs;
- :mod:`stepstone.schedules`: jobs submitted at the ticks of a schedule;
- :mod:`stepstone.sync`: blocking forms of submit and handles, for code
  without an event loop;
- :mod:`stepstone.runtime`: the lease queue and the worker loop under it all.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterable, Sequence
from typing import Any, TypeVar, cast

from stepstone.runtime.backoff import Backoff
from stepstone.runtime.clock import Clock, SystemClock
from stepstone.runtime.decide import Terminal
from stepstone.runtime.observer import AttemptReport
from stepstone.runtime.queue import DEFAULT_MAX_ATTEMPTS, Delivery, LeaseQueue
from stepstone.runtime.store_queue import StoreQueue
from stepstone.runtime.worker import JobThreads, Worker
from stepstone.store import ObjectStore, open_store

from .control import cancel_run, job_state
from .envelope import incarnation_of
from .errors import CorruptOutcome, DuplicateJobName, UnknownJob
from .events import send_event
from .executor import Executor
from .handle import JobHandle, JobState, Submitted
from .history import AttemptInfo, AttemptLog, read_history
from .hooks import SettledHook, SettledHooks
from .job import Job
from .layout import Layout, check_run_id, run_id_for_key
from .metrics import MetricsObserver
from .outcome import Outcome
from .records import RunRecords
from .retention import Sweeper
from .schedules import Schedule, Scheduler
from .submitting import SubmitOptions, Submitter
from .sync import LoopThread, SyncHandle, call_on
from .waiting import Waiting

__all__ = ["JobRunner", "SubmitOptions"]

log = logging.getLogger("stepstone")

Out = TypeVar("Out")
S = TypeVar("S")
R = TypeVar("R")


class JobRunner:
    """Submits, runs and answers for jobs. See the module docstring.

    ``store`` is an ObjectStore or a URL (``memory://``, a directory,
    ``s3://bucket/prefix``); the queue defaults to a StoreQueue on the same
    store, so one bucket is all the infrastructure there is.
    """

    def __init__(
        self,
        store: ObjectStore | str,
        *,
        queue: LeaseQueue | None = None,
        jobs: Iterable[type[Job[Any]]] = (),
        state: Iterable[object] = (),
        concurrency: int = 16,
        lease: float = 60.0,
        heartbeat: float | None = None,
        retry_backoff: float = 1.0,
        retry_backoff_cap: float = 300.0,
        retry_jitter: float = 0.5,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        attempt_timeout: float | None = None,
        retention: float | None = None,
        sweep_interval: float | None = None,
        drain_timeout: float = 30.0,
        poll_interval: float = 1.0,
        only_registered: bool = False,
        clock: Clock | None = None,
        prefix: str = "",
        wait_recheck: float | None = None,
        schedules: Iterable[Schedule] = (),
        cancel_check: float | None = 1.0,
        on_settled: SettledHook | None = None,
        history: bool = True,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        self.clock: Clock = clock or SystemClock()
        self._owns_store = isinstance(store, str)
        self.store: ObjectStore = (
            open_store(store, clock=self.clock) if isinstance(store, str) else store
        )
        self.layout = Layout(prefix, key_limit=self.store.key_limit)
        self.queue: LeaseQueue = (
            queue if queue is not None else _default_queue(self.store, self.layout, self.clock)
        )
        self.max_attempts = max_attempts
        self.retention = retention
        self._jobs: dict[str, type[Job[Any]]] = {}
        self._state: dict[type, object] = {}
        self._running = False
        self._home: asyncio.AbstractEventLoop | None = None
        """The loop the worker runs on, while it runs: where blocking calls go."""
        self._private = LoopThread("stepstone-sync")
        """Where blocking calls go when no worker runs here (started on first use)."""
        self._metrics = MetricsObserver()
        """The worker's observer: records metrics while the runner runs, if on."""
        self._threads = JobThreads(concurrency)
        """Where synchronous job code runs: plain handlers, ``def run``, plain hooks."""
        self.worker = Worker(
            self.queue,
            concurrency=concurrency,
            lease=lease,
            heartbeat=heartbeat,
            poll_interval=poll_interval,
            attempt_timeout=attempt_timeout,
            backoff=Backoff(base=retry_backoff, cap=retry_backoff_cap, jitter=retry_jitter),
            drain_timeout=drain_timeout,
            clock=self.clock,
            cancel_check=cancel_check,
            only_registered=only_registered,
            callbacks=_AttemptCallbacks(self),
            observer=self._metrics,
            threads=self._threads,
        )
        self._records = RunRecords(self.store, self.layout)
        self._waiting = Waiting(
            self._records,
            self.queue,
            worker_running=lambda: self._running,
            heard_here=lambda run_id: self.worker.holds(run_id) or self.queue.pending_here(run_id),
        )
        self._submitter = Submitter(
            queue=self.queue,
            records=self._records,
            answers=self,
            max_attempts=max_attempts,
            worker=self.worker,
        )
        self._hooks = SettledHooks(
            on_settled, job_type=self._jobs.get, in_thread=self._threads.call
        )
        self._history = AttemptLog(
            self.store, self.layout, self.worker, self.clock, enabled=history
        )
        self._executor = Executor(
            records=self._records,
            submitter=self._submitter,
            worker=self.worker,
            in_thread=self._threads.call,
            clock=self.clock,
            state_of=self.state_of,
            settled=self._waiting.settled,
            wait_recheck=wait_recheck,
            unrecorded=self._waiting.unrecorded,
            hooks=self._hooks,
            history=self._history,
        )
        self._sweeper: Sweeper | None = (
            None if retention is None else Sweeper(self, retention, interval=sweep_interval)
        )
        self.scheduler = Scheduler(
            list(schedules),
            submitter=self._submitter,
            store=self.store,
            layout=self.layout,
            clock=self.clock,
        )
        for job_type in jobs:
            self.register(job_type)
        for value in state:
            self.add_state(value)

    @property
    def concurrency(self) -> int:
        """Jobs this runner's worker runs at once (synchronous ones included)."""
        return self.worker.concurrency

    # -- configuration -----------------------------------------------------

    def register(self, job_type: type[Job[Any]]) -> None:
        """Teach the worker to run ``job_type``. Two types may not share a NAME."""
        if not (isinstance(job_type, type) and issubclass(job_type, Job)):
            raise TypeError(f"register() takes a Job subclass, not {job_type!r}")
        name = job_type.NAME
        existing = self._jobs.get(name)
        if existing is not None and existing is not job_type:
            raise DuplicateJobName(
                f"job types {existing.__module__}.{existing.__qualname__} and "
                f"{job_type.__module__}.{job_type.__qualname__} share the NAME {name!r}; "
                "give one of them its own NAME"
            )
        self._jobs[name] = job_type
        self.worker.register(
            name,
            self._executor.handler_for(job_type),
            max_in_flight=job_type.max_in_flight,
            timeout=job_type.attempt_timeout,
        )

    def add_state(self, value: object) -> None:
        """Make ``value`` available to jobs as ``ctx.state(type(value))``."""
        self._state[type(value)] = value

    def state_of(self, kind: type[S]) -> S:
        value = self._state.get(kind)
        if value is None:
            for candidate in self._state.values():
                if isinstance(candidate, kind):
                    value = candidate
                    break
        if value is None:
            known = ", ".join(t.__qualname__ for t in self._state) or "none"
            raise LookupError(f"no state of type {kind.__qualname__} is registered (have: {known})")
        return cast(S, value)

    def job_type(self, name: str) -> type[Job[Any]]:
        try:
            return self._jobs[name]
        except KeyError:
            raise UnknownJob(f"no job type named {name!r} is registered") from None

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        """Start the worker, the retention sweeper and the schedules, and
        record metrics if a MeterProvider is set (:mod:`stepstone.metrics`)."""
        if self._running:
            return
        self._running = True
        self._home = asyncio.get_running_loop()
        self._metrics.start(self.worker)
        await self.worker.start()
        if self._sweeper is not None:
            self._sweeper.start()
        self.scheduler.start()

    async def stop(self, drain_timeout: float | None = None) -> None:
        """Stop claiming, let in-flight jobs finish within the drain window,
        give the rest back to the queue uncounted."""
        if not self._running:
            return
        self._running = False
        self._home = None
        await self.scheduler.stop()
        if self._sweeper is not None:
            await self._sweeper.stop()
        await self.worker.stop(drain_timeout)
        # Threads of drained or timed-out sync jobs cannot be stopped; don't
        # wait for them (they finish on their own, unobserved).
        self._threads.shutdown(wait=False)
        self._metrics.close()

    async def check_store(self) -> None:
        """Read the store once (a LIST of at most one key under the runner's
        prefix), to fail at start instead of retrying for ever.

        Raises StoreConfigError when retrying cannot help (the bucket does
        not exist, the credentials are refused or lack permission, the
        region is wrong) and StoreUnavailable when the store cannot be
        reached. ``stepstone worker`` calls it before it starts; an
        application that starts a worker itself can too.
        """
        await self.store.list(self.layout.outcomes(), limit=1)

    async def close(self) -> None:
        """Stop, close the store if the runner opened it from a URL, and stop
        the private loop of blocking calls, if they started one."""
        await self.stop()
        private = self._private.loop_if_running()
        here = asyncio.get_running_loop()
        if private is not None and private is not here:
            # Blocking calls did their I/O there (an S3 client belongs to its loop).
            closing = asyncio.run_coroutine_threadsafe(self._close_store(), private)
            await asyncio.wrap_future(closing)
            await asyncio.to_thread(self._private.stop)
        else:
            await self._close_store()

    async def _close_store(self) -> None:
        if self._owns_store:
            await self.queue.close()
            await self.store.close()

    def close_sync(self) -> None:
        """``close()`` for code without an event loop: the end of a Flask or
        Django process that used :meth:`submit_sync` (``atexit.register(runner.close_sync)``)."""
        self._blocking(self.close())
        self._private.stop()

    async def __aenter__(self) -> JobRunner:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- submitting and answering ---------------------------------------------

    async def submit(self, job: Job[Out], options: SubmitOptions | None = None) -> JobHandle[Out]:
        """Submit ``job``; returns a handle to await. A job with an idempotency
        key runs once per key: a duplicate submit joins the live run or reads
        its outcome (see :mod:`stepstone.submitting`)."""
        return await self._submitter.submit(job, options)

    async def submit_many(
        self, jobs: Sequence[Job[Out]], options: SubmitOptions | None = None
    ) -> list[JobHandle[Out]]:
        """Submit every job of ``jobs`` (each with ``options``); returns their
        handles in order. Each job is answered as ``submit`` answers it (a
        keyed duplicate joins its live run or reads its outcome), but the
        jobs to enqueue are written together: on files, one flush makes the
        whole batch durable. Inputs are all encoded first, so one that cannot
        be raises before anything is submitted; an answer that is an error
        (InputMismatch) is raised after the others are submitted."""
        return await self._submitter.submit_many(jobs, options)

    def submit_sync(self, job: Job[Out], options: SubmitOptions | None = None) -> SyncHandle[Out]:
        """``submit`` for code without an event loop (a Django or Flask view,
        a script): blocks until the job is submitted and returns a
        :class:`~stepstone.sync.SyncHandle`, whose ``result(timeout)`` blocks
        for the result. Safe from any number of threads at once; raises
        RuntimeError inside a running event loop (await ``submit`` there). The
        work runs on the worker's loop when this runner's worker runs, else
        on a private loop in a background thread (see :mod:`stepstone.sync`)."""
        return SyncHandle(self._blocking(self.submit(job, options)), self._blocking)

    def handle_sync(self, job_id: str, job_type: type[Job[Out]]) -> SyncHandle[Out]:
        """``handle`` for code without an event loop: a blocking handle on a
        job submitted earlier (by any process)."""
        return SyncHandle(self.handle(job_id, job_type), self._blocking)

    def _blocking(self, coro: Coroutine[Any, Any, R]) -> R:
        """Run ``coro`` on the runner's loop from a thread without one; block."""
        home = self._home
        if home is not None and home.is_running():
            return call_on(home, coro)
        return self._private.run(coro)

    def handle(self, job_id: str, job_type: type[Job[Out]]) -> JobHandle[Out]:
        """A handle on a job submitted earlier (by any process), to await or inspect.

        Raises InvalidJobId for a string that is not a job id."""
        check_run_id(job_id)
        return JobHandle(self, job_id, job_type.output_type(), newly_submitted=False)

    async def wait(
        self,
        job_id: str,
        output: Any,
        *,
        fresh: bool = False,
        input_hash: str | None = None,
        submitted: Submitted | None = None,
    ) -> Outcome[Any]:
        """The outcome of ``job_id`` as soon as there is one, its result typed as
        ``output`` (what awaiting a handle does). Given the run's
        ``input_hash``, an outcome of another input raises CorruptOutcome.
        A run ``submitted`` here is polled by how long its kind's runs took."""
        return await self._waiting.wait(
            job_id, output, fresh=fresh, input_hash=input_hash, submitted=submitted
        )

    async def outcome(
        self, job_id: str, output: Any, input_hash: str | None = None
    ) -> Outcome[Any] | None:
        """The outcome of ``job_id`` from its record; None while it runs."""
        record = await self._records.outcome(check_run_id(job_id), input_hash)
        return None if record is None else record.typed(output)

    async def status(self, job_id: str) -> JobState | None:
        """Where the job is: its outcome if it has one, else its queue record;
        None if nothing is known of it. Raises InvalidJobId for a string that
        is not a job id, before reading anything."""
        return await job_state(self._records, self.queue, check_run_id(job_id))

    async def history(self, job_id: str) -> list[AttemptInfo]:
        """Each claim of the run so far, in order: who claimed it (host, pid,
        worker id), when, how it ended, and its error with the traceback's
        last frames. Claims still running are not in it until they end; a
        claim whose worker stopped before it could say reads UNRECORDED. []
        when nothing is known of the run. See :mod:`stepstone.history`."""
        run_id = check_run_id(job_id)
        try:
            outcome = await self._records.outcome(run_id)
        except CorruptOutcome as exc:
            log.warning("job %s: %s", run_id, exc, extra={"job_id": run_id})
            outcome = None
        incarnation = None if outcome is None else outcome.incarnation
        if incarnation is None:
            queued = await self.queue.get(run_id)
            incarnation = None if queued is None else incarnation_of(queued.payload)
        found = await read_history(self.store, self.layout, run_id, incarnation, outcome)
        for key, why in found.unreadable:
            log.warning("job %s: cannot read %s: %s", run_id, key, why, extra={"job_id": run_id})
        return found.attempts

    async def send_event(self, job: str | Job[Any], name: str, payload: Any = None) -> None:
        """Send event ``name`` with ``payload`` to a live run, to be taken by its
        ``ctx.wait_for_event(name)`` (now, or when it gets there). ``job`` is
        the run's id, or a job with an idempotency key (which names its run).
        Works from any process, a worker or not. Raises EventRefused if the run
        is not live (never submitted, swept, or finished)."""
        if isinstance(job, Job):
            key = job.idempotency_key()
            if key is None:
                raise TypeError(
                    f"{type(job).__qualname__} has no idempotency key, so an instance "
                    "does not name a run: pass the job id (handle.id)"
                )
            job_id = run_id_for_key(key)
        else:
            job_id = check_run_id(job)
        await send_event(self._records, self.queue, self.clock, job_id, name, payload)

    async def cancel(self, job_id: str) -> bool:
        """Cancel a job that has not finished: record it cancelled, drop it from
        the queue, then call its on_settled hooks here. False if it had already
        finished (or was never submitted).

        An attempt running in this runner's worker stops at once; one running
        in another process stops within ``cancel_check`` seconds (its worker
        reads the run's outcome), or at its next lease renewal."""
        cancelled = await cancel_run(self._records, self.queue, self.clock, check_run_id(job_id))
        if cancelled is None:
            return False
        record, job_input = cancelled
        self.worker.cancel_running(job_id)
        self._waiting.settled(record)
        await self._hooks.run(record, job_input)
        return True


def _default_queue(store: ObjectStore, layout: Layout, clock: Clock) -> LeaseQueue:
    prefix = f"{layout.prefix}/queue" if layout.prefix else "queue"
    return StoreQueue(store, prefix=prefix, clock=clock)


class _AttemptCallbacks:
    """The runner's part in each attempt of its worker (``AttemptCallbacks``):
    its executor records the outcome and looks for a cancel, its attempt log
    writes the history. The worker is built before them, so they are looked
    up at each call."""

    def __init__(self, runner: JobRunner) -> None:
        self._runner = runner

    async def on_terminal(self, delivery: Delivery, terminal: Terminal) -> None:
        await self._runner._executor.on_terminal(delivery, terminal)

    async def is_cancelled(self, delivery: Delivery) -> bool:
        return await self._runner._executor.is_cancelled(delivery)

    async def attempt_over(self, report: AttemptReport) -> None:
        await self._runner._history.attempt_over(report)

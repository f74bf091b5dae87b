"""JobRunner: submit jobs, run them, and answer for them.

One object serves both sides. In an API process it only submits and awaits
(no worker runs; ``submit`` works without ``async with``). In a worker
process ``async with runner:`` runs the worker loop, which claims jobs from
the lease queue, runs them with memoized steps, writes each run's outcome
record before acking, and sweeps finished runs after the retention window.

The runner is a facade: it holds the registry of job types and the
lifecycle, and builds the parts that do the work, each given what it needs
when it is built:

- :mod:`stepstone.submit`: the idempotent submit protocol, the hand-off to
  this process's worker, events sent to runs;
- :mod:`stepstone.handles`: handles, the outcome watch that wakes them,
  blocking forms for code without an event loop;
- :mod:`stepstone.execute`: one attempt run, the run's end recorded, cancels;
- :mod:`stepstone.records`: the objects a run leaves, their history and
  their retention;
- :mod:`stepstone.schedules`: jobs submitted at the ticks of a schedule;
- :mod:`stepstone.runtime`: the lease queue and the worker loop under it all.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar, cast, overload

from stepstone.errors import CorruptOutcome, DuplicateJobName, UnknownJob
from stepstone.execute.admission import Limits
from stepstone.execute.attempts import AttemptRunner
from stepstone.execute.cancelling import Canceller
from stepstone.execute.durable_waits import wait_recheck_for
from stepstone.execute.ending import RunEnding
from stepstone.execute.hook_threads import HookThreads
from stepstone.execute.hooks import SettledHook, SettledHooks
from stepstone.execute.versions import VERSION_WAIT, build_id_from
from stepstone.handles.answers import RunAnswers
from stepstone.handles.handle import JobHandle
from stepstone.handles.state import JobState
from stepstone.handles.streams import StreamReader
from stepstone.handles.sync import LoopThread, SyncHandle, call_on
from stepstone.handles.watch import OutcomeWatch
from stepstone.job import IdempotencyKey, Job, RunRef, run_id_of
from stepstone.ops import actions
from stepstone.ops.actions import Bulk, cancel_many, retry_many
from stepstone.ops.by_attributes import find_runs
from stepstone.ops.listing import RunFilter, RunSummary
from stepstone.ops.reads import parse_status
from stepstone.ops.replay import Replayed, replay, replay_many
from stepstone.records.attempt_log import AttemptLog
from stepstone.records.attempts import AttemptInfo
from stepstone.records.audit_log import AUDIT_RETENTION
from stepstone.records.envelope import incarnation_of
from stepstone.records.error_texts import ErrorSealing
from stepstone.records.fit_to_run import check_fit_to_run
from stepstone.records.history import read_history
from stepstone.records.layout import Layout
from stepstone.records.outcome import Outcome
from stepstone.records.payloads import PayloadCodec, Payloads
from stepstone.records.retention import Sweeper
from stepstone.records.run_records import RunRecords
from stepstone.runtime.backoff import Backoff
from stepstone.runtime.capabilities import PendingHere, Waking
from stepstone.runtime.clock import Clock, SystemClock
from stepstone.runtime.queue import (
    DEFAULT_LEASE,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_LAPSES,
    LeaseQueue,
)
from stepstone.runtime.status import JobStatus
from stepstone.runtime.store_queue import StoreQueue
from stepstone.runtime.worker import JobThreads, Worker
from stepstone.runtime.worker.presence import BEAT, Presence
from stepstone.schedules import Schedule, Scheduler
from stepstone.store import ObjectStore, open_store
from stepstone.store.base import PresignsPuts
from stepstone.submit import callback_watch
from stepstone.submit.callback_watch import CallbackWatch
from stepstone.submit.callbacks import complete_callback
from stepstone.submit.created_here import CreatedHere
from stepstone.submit.events import send_event
from stepstone.submit.hand_off import HandOff
from stepstone.submit.many import submit_many
from stepstone.submit.options import SubmitOptions
from stepstone.submit.submitter import Submitter
from stepstone.telemetry.metrics import RunnerMetrics

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

    ``worker_id`` names this runner's worker across restarts: started again
    under it on the same host, the worker takes back at once the runs its
    killed life held (:mod:`stepstone.runtime.worker.identity`). By default
    it is the host's name (a container's), or the next free one when
    several workers share a host; two live workers on one host given one id
    are refused (``start`` raises WorkerIdInUse). The worker's record, which
    ``stepstone workers`` reads, is written every ``worker_beat`` s (None: never).

    ``build_id`` names the code this runner's worker runs (default: the
    ``STEPSTONE_BUILD_ID`` environment variable; without either, each job
    type's ``VERSION``, else a digest of its module's source): a run this
    worker cannot replay because another version recorded its history is
    given back for a worker of that version, for up to ``version_wait``
    seconds (docs/versioning.md, "Deploying").

    On a store that presigns PUTs (S3), each worker looks for callbacks
    completed through their URLs every ``callback_look`` seconds (one LIST;
    None: never, and a completion by URL reaches its run when the run looks
    again on its own, ``wait_recheck``); given ``callback_notices``, the URL
    of an SQS queue that the bucket's event notifications of
    ``callbacks/`` go to, it hears of each at once
    (:mod:`stepstone.submit.callback_watch`, docs/streams.md).

    A worker given ``retention`` (seconds) sweeps finished runs older than
    that, and the audit records of operators' actions (``stepstone audit``)
    older than ``audit_retention`` (90 days by default; None keeps them);
    without ``retention`` it sweeps neither.

    ``codec``: a payload codec, or several applied in order (compression
    before encryption: ``[ZstdCodec(), AesGcmCodec(keys)]``), that seals
    every payload this runner writes (inputs, step results, events, stream
    items, callback values, results, progress) and opens those it reads
    (docs/security.md). Every process of the fleet that reads payloads
    needs it, with the keys of every payload still in the bucket.

    ``seal_errors``: seal with ``codec`` the text of every error this
    runner's worker writes (a failed run's message and traceback, each
    failed attempt's, the queue's last error; not the failure's kind nor
    the exception's class), which whoever holds the key reads as it was
    (``handle.result()``, ``runner.status``, ``stepstone show``). Off by
    default: operators read errors without keys, and the engine's own
    texts are no user data. It needs a codec (``start`` raises ValueError
    without one); docs/security.md.

    ``max_attempts`` counts the attempts a run's own code spends (an error,
    a timeout); a worker that dies or hangs under a run costs it no attempt
    but a lapse, and a run fails ``expired`` once its leases lapsed
    ``max_lapses`` times (docs/guarantees.md says why).
    """

    def __init__(
        self,
        store: ObjectStore | str,
        *,
        queue: LeaseQueue | None = None,
        jobs: Iterable[type[Job[Any]]] = (),
        state: Iterable[object] = (),
        concurrency: int = 16,
        lease: float = DEFAULT_LEASE,
        heartbeat: float | None = None,
        retry_backoff: float = 1.0,
        retry_backoff_cap: float = 300.0,
        retry_jitter: float = 0.5,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_lapses: int = DEFAULT_MAX_LAPSES,
        attempt_timeout: float | None = None,
        retention: float | None = None,
        sweep_interval: float | None = None,
        audit_retention: float | None = AUDIT_RETENTION,
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
        worker_id: str | None = None,
        worker_beat: float | None = BEAT,
        build_id: str | None = None,
        version_wait: float = VERSION_WAIT,
        callback_look: float | None = callback_watch.EVERY,
        callback_notices: str | None = None,
        codec: PayloadCodec | Sequence[PayloadCodec] | None = None,
        seal_errors: bool = False,
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
            queue
            if queue is not None
            else StoreQueue(self.store, prefix=self.layout.queue(), clock=self.clock)
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

        # The parts, each built with what it needs (bottom up).
        waking = self.queue if isinstance(self.queue, Waking) else None
        wait_recheck = wait_recheck_for(waking is not None, wait_recheck)
        pending_here = (
            self.queue.pending_here if isinstance(self.queue, PendingHere) else _knows_nothing
        )
        threads_name = worker_id or "stepstone-worker"
        self._threads = JobThreads(concurrency, name=threads_name)
        self._records = records = RunRecords(self.store, self.layout, Payloads(_codecs(codec)))
        self._sealing = ErrorSealing(records.payloads, on=seal_errors)
        self._watch = OutcomeWatch(
            records,
            self.queue,
            worker_running=lambda: self._running,
            heard_here=lambda run_id: self.worker.holds(run_id) or pending_here(run_id),
        )
        self._hooks = SettledHooks(
            on_settled,
            job_type=self._jobs.get,
            threads=HookThreads(name=threads_name),
            payloads=records.payloads,
        )
        self._history = AttemptLog(
            self.store,
            self.layout,
            self.clock,
            worker=lambda: self.worker.worker_id,
            enabled=history,
            sealing=self._sealing,
        )
        self._limits = Limits(
            store=self.store,
            layout=self.layout,
            clock=self.clock,
            waking=waking,
            wait_recheck=wait_recheck,
            grace=lease,
            payloads=records.payloads,
        )
        self._metrics = RunnerMetrics(self.queue, self.clock)
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
            worker_id=worker_id,
            max_lapses=max_lapses,
            seal_text=self._sealing.seal if seal_errors else None,
            callbacks=RunEnding(
                records=records,
                watch=self._watch,
                hooks=self._hooks,
                history=self._history,
                limits=self._limits,
                waking=waking,
                clock=self.clock,
                sealing=self._sealing,
            ),
            observer=self._metrics,
            threads=self._threads,
            on_store_broken=self._watch.store_broken,
            presence=None
            if worker_beat is None
            else Presence(self.store, self.layout.workers(), clock=self.clock, every=worker_beat),
        )
        self._canceller = Canceller(
            records=records,
            queue=self.queue,
            clock=self.clock,
            worker=self.worker,
            watch=self._watch,
            hooks=self._hooks,
        )
        self._answers = RunAnswers(records, self.queue, self._watch, self._canceller)
        created_here = CreatedHere()
        self._submitter = Submitter(
            queue=self.queue,
            records=records,
            answers=self._answers,
            max_attempts=max_attempts,
            created_here=created_here,
            clock=self.clock,
            hand_off=HandOff(self.queue, self.worker),
        )
        self._attempts = AttemptRunner(
            records=records,
            submitter=self._submitter,
            created_here=created_here,
            in_thread=self._threads.call,
            limits=self._limits,
            history=self._history,
            clock=self.clock,
            state_of=self.state_of,
            wakes=waking is not None,
            wait_recheck=wait_recheck,
            build_id=build_id_from(build_id),
            version_wait=version_wait,
        )
        self._sweeper: Sweeper | None = (
            None
            if retention is None
            else Sweeper(self, retention, interval=sweep_interval, audit_retention=audit_retention)
        )
        self._callback_watch: CallbackWatch | None = None
        presigns = isinstance(self.store, PresignsPuts)
        if callback_look is not None and waking is not None and presigns:
            self._callback_watch = CallbackWatch(
                self.store, self.layout, waking, every=callback_look, notices=callback_notices
            )
        self.scheduler = Scheduler(
            list(schedules),
            submitter=self._submitter,
            store=self.store,
            layout=self.layout,
            clock=self.clock,
            cancel=self.cancel,
        )
        for job_type in jobs:
            self.register(job_type)
        for value in state:
            self.add_state(value)

    @property
    def concurrency(self) -> int:
        """Jobs this runner's worker runs at once (synchronous ones included)."""
        return self.worker.concurrency

    @property
    def codec(self) -> list[PayloadCodec]:
        """The payload codecs this runner seals and opens payloads with, in
        the order applied (empty: none); set it before the worker starts
        (``stepstone worker --codec``, docs/security.md)."""
        return list(self._records.payloads.codecs)

    @codec.setter
    def codec(self, codec: PayloadCodec | Sequence[PayloadCodec] | None) -> None:
        self._records.payloads.use(_codecs(codec))

    @property
    def seal_errors(self) -> bool:
        """Whether this runner's worker seals the error texts it writes
        with the payload codecs (``JobRunner(seal_errors=...)``); set it
        before the worker starts (``stepstone worker --seal-errors``)."""
        return self._sealing.on

    @seal_errors.setter
    def seal_errors(self, on: bool) -> None:
        self._sealing.on = on
        self.worker.seal_text = self._sealing.seal if on else None

    @property
    def build_id(self) -> str | None:
        """The code this runner's worker runs, as each memo it writes records
        (None: each job type's VERSION, else a digest of its source); set it
        before the worker starts (``stepstone worker --build-id``)."""
        return self._attempts.build_id

    @build_id.setter
    def build_id(self, build_id: str | None) -> None:
        self._attempts.build_id = build_id

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
            self._attempts.handler_for(job_type),
            max_in_flight=job_type.max_in_flight,
            timeout=job_type.attempt_timeout,
            lease=job_type.lease,
        )

    def add_state(self, value: object) -> None:
        """Make ``value`` available to jobs as ``ctx.state(type(value))``."""
        self._state[type(value)] = value

    def state_of(self, kind: type[S]) -> S:
        """The application object of type ``kind`` given in ``JobRunner(state=[...])``
        (an instance of a subclass will do); raises ``LookupError`` when there is
        none. Jobs reach it as ``ctx.state(kind)``."""
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
        """The job type registered under ``name`` (its ``NAME``); raises
        ``UnknownJob`` when none is."""
        try:
            return self._jobs[name]
        except KeyError:
            raise UnknownJob(f"no job type named {name!r} is registered") from None

    # -- lifecycle -----------------------------------------------------------

    async def open(self) -> None:
        """Open the store's client now (S3's: its configuration read, its
        connection pool made), so the first submit pays no setup. ``start``
        does it; an API process, which submits without starting, calls it as
        it starts (a FastAPI lifespan). Repeatable; ``close`` undoes it."""
        await self.store.open()

    async def start(self) -> None:
        """Open the store (:meth:`open`), start the worker, the retention
        sweeper and the schedules, and record metrics if a MeterProvider is
        set (:mod:`stepstone.telemetry`)."""
        if self._running:
            return
        if self._sealing.on and not self._records.payloads:
            raise ValueError(
                "seal_errors needs a payload codec to seal with (codec=..., "
                "stepstone worker --codec or STEPSTONE_CODEC)"
            )
        await self.open()
        await self.worker.start()  # WorkerIdInUse: nothing else started
        self._running = True
        self._home = asyncio.get_running_loop()
        self._metrics.start(in_flight=self.worker.in_flight_by_kind)
        if self._sweeper is not None:
            self._sweeper.start()
        if self._callback_watch is not None:
            self._callback_watch.start()
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
        if self._callback_watch is not None:
            await self._callback_watch.stop()
        await self.worker.stop(drain_timeout)
        self._threads.shutdown()
        self._metrics.stop()

    async def check_store(self) -> None:
        """Read the store (a LIST of at most one key under the runner's
        prefix, and the copy mark) and try one compare-and-swap that must not
        land (on a key that does not exist), to fail at start instead of
        retrying for ever, running on a store that ignores conditional
        writes, or running a copy's runs again.

        Raises StoreConfigError when retrying cannot help (the bucket does
        not exist, the credentials are refused or lack permission, the
        region is wrong, the store ignores or refuses conditional writes:
        :func:`stepstone.store.conformance.refuse_unconditional`, the store
        is marked as a copy: ``Layout.copy_mark``) and StoreUnavailable when
        the store cannot be reached. ``stepstone worker`` calls it before it
        starts; an application that starts a worker itself can too.
        """
        await check_fit_to_run(self.store, self.layout)

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
        """Stop, and close what the runner opened (:meth:`close`): a store it
        opened from a URL (an S3 client's connections) is not left open. The
        runner can be started again; the store opens again on first use."""
        await self.close()

    # -- submitting and answering ---------------------------------------------

    async def submit(self, job: Job[Out], options: SubmitOptions | None = None) -> JobHandle[Out]:
        """Submit ``job``; returns a handle to await. A job with an idempotency
        key runs once per key: a duplicate submit joins the live run or reads
        its outcome (see :mod:`stepstone.submit.submitter`)."""
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
        (InputMismatch) is raised after the others are submitted, with their
        handles (``InputMismatch.handles``)."""
        return await submit_many(self._submitter, jobs, options)

    def submit_sync(self, job: Job[Out], options: SubmitOptions | None = None) -> SyncHandle[Out]:
        """``submit`` for code without an event loop (a Django or Flask view,
        a script): blocks until the job is submitted and returns a
        :class:`~stepstone.handles.sync.SyncHandle`, whose ``result(timeout)`` blocks
        for the result. Safe from any number of threads at once; raises
        RuntimeError inside a running event loop (await ``submit`` there). The
        work runs on the worker's loop when this runner's worker runs, else
        on a private loop in a background thread (see :mod:`stepstone.handles.sync`)."""
        return SyncHandle(self._blocking(self.submit(job, options)), self._blocking)

    @overload
    def handle_sync(self, run: RunRef, job_type: type[Job[Out]]) -> SyncHandle[Out]: ...
    @overload
    def handle_sync(self, run: Job[Out], job_type: None = None) -> SyncHandle[Out]: ...
    @overload
    def handle_sync(self, run: str | IdempotencyKey, job_type: None = None) -> SyncHandle[Any]: ...

    def handle_sync(self, run: RunRef, job_type: type[Job[Any]] | None = None) -> SyncHandle[Any]:
        """``handle`` for code without an event loop: a blocking handle on a
        run submitted earlier (by any process), named as :meth:`handle` takes it."""
        return SyncHandle(self.handle(run, job_type), self._blocking)

    def _blocking(self, coro: Coroutine[Any, Any, R]) -> R:
        """Run ``coro`` on the runner's loop from a thread without one; block."""
        home = self._home
        if home is not None and home.is_running():
            return call_on(home, coro)
        return self._private.run(coro)

    @overload
    def handle(self, run: RunRef, job_type: type[Job[Out]]) -> JobHandle[Out]: ...
    @overload
    def handle(self, run: Job[Out], job_type: None = None) -> JobHandle[Out]: ...
    @overload
    def handle(self, run: str | IdempotencyKey, job_type: None = None) -> JobHandle[Any]: ...

    def handle(self, run: RunRef, job_type: type[Job[Any]] | None = None) -> JobHandle[Any]:
        """A handle on a run submitted earlier (by any process), to await or
        inspect: ``run`` is its id, an :class:`~stepstone.job.IdempotencyKey`,
        or a job with an idempotency key. ``job_type`` gives the result its
        type (a keyed job gives its own); without it the result is as
        decoded (a model's fields as a dict), as for a process that does not
        import the job's code.

        Raises InvalidRunId for a string that is not a run id."""
        if job_type is None and isinstance(run, Job):
            job_type = type(run)
        output = Any if job_type is None else job_type.output_type()
        return JobHandle(self._answers, run_id_of(run), output, newly_submitted=False)

    async def outcome(
        self, run: RunRef, output: Any, input_hash: str | None = None
    ) -> Outcome[Any] | None:
        """The outcome of ``run`` (its id, an IdempotencyKey, or a keyed job) from its record,
        its result typed as ``output``; None while the run goes on."""
        return await self._answers.outcome(run_id_of(run), output, input_hash)

    async def status(self, run: RunRef) -> JobState | None:
        """Where the run is: its outcome if it has one, else its queue record;
        None if nothing is known of it. ``run`` is its id, an IdempotencyKey, or
        a job with an idempotency key. Raises InvalidRunId for a string that is not a run
        id, before reading anything."""
        return await self._answers.status(run_id_of(run))

    async def runs(
        self,
        *,
        status: JobStatus | str | None = None,
        kind: str | None = None,
        since: datetime | float | None = None,
        version: str | None = None,
        key_prefix: str | None = None,
        attributes: Mapping[str, str] | None = None,
        limit: int | None = 100,
    ) -> list[RunSummary]:
        """Runs, newest first by when they were submitted (what ``stepstone
        ls`` lists): of ``status``, of ``kind`` (a job type's NAME), submitted
        since ``since`` (an aware datetime or epoch seconds), under ``version``
        (``Job.VERSION``), with an idempotency key starting ``key_prefix``; at
        most ``limit`` (None: all). Live runs come from the queue, finished
        ones from their outcome records; a queue that cannot list (SQS) lists
        finished runs only, given a finished ``status``, and raises
        InspectError otherwise. Records that do not decode are logged and
        left out.

        ``attributes``: runs having each of these (``SubmitOptions(attributes=...)``,
        ``ctx.set_attributes``); they are found through the index of
        attributes, so what this costs grows with the runs that match, not
        with the runs in the store (:mod:`stepstone.ops.by_attributes`); it
        lists no queue, but reads the queue records of the runs it shows."""
        if isinstance(since, datetime):
            if since.tzinfo is None:
                raise ValueError("runs(since=) takes an aware datetime (with a tzinfo)")
            since = since.timestamp()
        chosen = RunFilter(
            status=None if status is None else parse_status(str(status)),
            kind=kind,
            since=since,
            version=version,
            key_prefix=key_prefix,
            attributes=None if attributes is None else dict(attributes),
        )
        listed = await find_runs(self, chosen, limit=limit)
        for record in listed.unreadable:
            log.warning("cannot read %s: %s", record.key, record.reason)
        return listed.rows

    async def history(self, run: RunRef) -> list[AttemptInfo]:
        """Each claim of the run so far, in order: who claimed it (host, pid,
        worker id), when, how it ended, and its error with the traceback's
        last frames. Claims still running are not in it until they end; a
        claim whose worker stopped before it could say reads UNRECORDED. []
        when nothing is known of the run. See :mod:`stepstone.records.history`."""
        run_id = run_id_of(run)
        try:
            outcome = await self._records.outcome(run_id)
        except CorruptOutcome as exc:
            log.warning("run %s: %s", run_id, exc, extra={"run_id": run_id})
            outcome = None
        incarnation = None if outcome is None else outcome.incarnation
        if incarnation is None:
            queued = await self.queue.get(run_id)
            incarnation = None if queued is None else incarnation_of(queued.payload)
        found = await read_history(
            self.store, self.layout, run_id, incarnation, outcome, self._records.payloads
        )
        for key, why in found.unreadable:
            log.warning("run %s: cannot read %s: %s", run_id, key, why, extra={"run_id": run_id})
        return found.attempts

    async def send_event(
        self, job: RunRef, name: str, payload: Any = None, *, key: str | None = None
    ) -> bool:
        """Send event ``name`` with ``payload`` to a live run, to be taken by its
        ``ctx.wait_for_event(name)`` (now, or when it gets there). ``job`` is
        the run's id, an IdempotencyKey, or a job with an idempotency key.
        Works from any process, a worker or not. Raises EventRefused if the run
        is not live (never submitted, swept, or finished).

        ``key`` (a webhook's delivery id) makes the send idempotent: a send of
        ``name`` to the run with a key already sent is the same event, not
        another, however often a lost answer makes the caller retry. Returns
        True if this call delivered the event, False if a send with its key
        had (whose payload stands)."""
        return await send_event(
            self._records, self.queue, self.clock, run_id_of(job), name, payload, key
        )

    @overload
    def stream(
        self,
        run: RunRef,
        name: str,
        *,
        start: int = 0,
        follow: bool = True,
        poll: float | None = None,
    ) -> StreamReader[Any]: ...

    @overload
    def stream(
        self,
        run: RunRef,
        name: str,
        type: type[S],
        *,
        start: int = 0,
        follow: bool = True,
        poll: float | None = None,
    ) -> StreamReader[S]: ...

    def stream(
        self,
        run: RunRef,
        name: str,
        type: Any = Any,
        *,
        start: int = 0,
        follow: bool = True,
        poll: float | None = None,
    ) -> StreamReader[Any]:
        """A reader of the stream ``name`` of ``run`` (its id, an
        :class:`~stepstone.job.IdempotencyKey`, or a keyed job), from any process, one that
        never held the run's handle included: ``async for value in
        runner.stream(run_id, "tokens", str)``. See :meth:`JobHandle.stream`.
        Raises InvalidRunId for a string that is not a run id; reading raises
        RunNotFound for a run nothing is known of."""
        return self._answers.stream(
            run_id_of(run), name, type, start=start, follow=follow, poll=poll
        )

    async def complete_callback(self, callback_id: str, value: Any = None) -> bool:
        """Complete the callback ``callback_id`` (``cb.id`` in the run that
        made it) with ``value``, sent as JSON, and wake its run, from any
        process, a worker or not: True. The first completion wins: False if
        it had been completed already (by this or through its URL), whose
        value stands. Raises CallbackRefused, saying why, when it can take
        none (no such callback, it expired, its run is not live, the value is
        over 1 MiB as JSON); EncodingError for a value that is not JSON-able.
        See :mod:`stepstone.submit.callbacks`."""
        return await complete_callback(self._records, self.queue, self.clock, callback_id, value)

    async def cancel(self, run: RunRef, *, leave_children: bool = False) -> bool:
        """Cancel a run (its id, an IdempotencyKey, or a keyed job) that has not finished: record
        it cancelled, drop it from the queue, then call its on_settled hooks
        here. False if it had already finished (or was never submitted).

        The children it created (``ctx.submit``) that have not finished are
        cancelled with it, and theirs, unless ``leave_children``; a child it
        joined, which another submitted, goes on.

        An attempt running in this runner's worker stops at once; one running
        in another process stops within ``cancel_check`` seconds (its worker
        reads the run's outcome), or at its next lease renewal."""
        return await self._answers.cancel(run_id_of(run), leave_children=leave_children)

    async def retry(self, run: RunRef) -> None:
        """Requeue a dead run (its id, an IdempotencyKey, or a keyed job), as
        ``stepstone retry`` does: its failed outcome is removed and it is
        queued again with its attempts reset, keeping its incarnation, so the
        steps it finished replay from their memos. Awaiting its handle
        afterwards gives the new outcome.

        Raises InspectError, saying why, for a run that is not dead (live,
        finished, unknown) or a queue that cannot requeue (SQS without an id
        store cannot find a dead job)."""
        run_id = run_id_of(run)
        unreadable = await actions.retry(self, run_id)
        self._watch.restarted(run_id)  # (a handle held here awaits the new outcome)
        if unreadable is not None:
            log.warning(
                "run %s: removed %s, which would not decode: %s",
                run_id,
                unreadable.key,
                unreadable.reason,
                extra={"run_id": run_id},
            )

    async def replay(self, run: RunRef, *, from_step: str | None = None) -> Replayed:
        """Run an ended run (succeeded, failed, cancelled or dead) again as a
        new incarnation, keeping its memos before the first call of step
        ``from_step`` (None: keeping none) and running from that step on,
        with the input it was submitted with. ``run`` is its id, an
        IdempotencyKey, or a keyed job. The old incarnation's memos and attempt history stay, linked
        from the new one (``stepstone show``); awaiting the run's handle
        afterwards gives the new outcome. See :mod:`stepstone.ops.replay`.

        Raises InspectError, saying why, for a run still live (wait for it to
        end, or cancel it), unknown or swept, whose input was not kept, or
        with no step ``from_step``."""
        replayed = await replay(self, run_id_of(run), from_step=from_step)
        self._watch.restarted(replayed.run_id)  # (a handle held here awaits the new outcome)
        return replayed

    async def replay_many(
        self, runs: Iterable[RunRef | RunSummary], *, from_step: str | None = None
    ) -> Bulk:
        """:meth:`replay` each of ``runs`` (ids, IdempotencyKeys, keyed jobs, or what
        :meth:`runs` listed); those that cannot be are in ``refused``, with why."""
        return self._restarted(await replay_many(self, _ids(runs), from_step=from_step))

    async def retry_many(self, runs: Iterable[RunRef | RunSummary]) -> Bulk:
        """Requeue each dead run of ``runs`` (``stepstone retry``): finished
        steps replay; those that cannot be are in ``refused``, with why."""
        return self._restarted(await retry_many(self, _ids(runs)))

    async def cancel_many(
        self, runs: Iterable[RunRef | RunSummary], *, leave_children: bool = False
    ) -> Bulk:
        """Cancel each of ``runs`` (a dead one is discarded from the queue,
        as ``stepstone cancel`` does), with their live children unless
        ``leave_children``; those that cannot be are in ``refused``."""
        return await cancel_many(self, _ids(runs), leave_children=leave_children)

    def _restarted(self, bulk: Bulk) -> Bulk:
        """Tell the handles held here of the runs ``bulk`` started again."""
        for run_id in bulk.done:
            self._watch.restarted(run_id)
        return bulk


def _codecs(codec: PayloadCodec | Sequence[PayloadCodec] | None) -> list[PayloadCodec]:
    """The codecs ``JobRunner(codec=...)`` names, in order; TypeError for what is none."""
    found = [] if codec is None else [codec] if isinstance(codec, PayloadCodec) else list(codec)
    for one in found:
        if not isinstance(one, PayloadCodec) or isinstance(one, type):
            raise TypeError(
                f"codec takes payload codecs (name, key_id, encode, decode), not {one!r}"
            )
    return found


def _knows_nothing(run_id: str) -> bool:
    return False


def _ids(runs: Iterable[RunRef | RunSummary]) -> list[str]:
    return [run.id if isinstance(run, RunSummary) else run_id_of(run) for run in runs]

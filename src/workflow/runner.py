"""JobRunner: submit jobs, run them, and answer for them.

One object serves both sides. In an API process it only submits and awaits
(no worker runs; ``submit`` works without ``async with``). In a worker
process ``async with runner:`` runs the worker loop, which claims jobs from
the lease queue, runs them with memoized steps, writes each run's outcome
record before acking, and sweeps finished runs after the retention window.

Submitting a job with an idempotency key is idempotent across processes and
restarts: the run id is the SHA-256 of the key, a finished run answers from
its outcome record, a live one is joined through the queue's dedup on the id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar, cast

from pydantic import ValidationError

from stepstone.runtime.backoff import Backoff
from stepstone.runtime.clock import Clock, SystemClock
from stepstone.runtime.errors import MalformedPayload, PermanentError
from stepstone.runtime.queue import Delivery, JobStatus, LeaseQueue
from stepstone.runtime.store_queue import StoreQueue
from stepstone.runtime.worker import Attempt, Failure, Success, Terminal, Worker
from stepstone.store import AlreadyExists, NotFound, ObjectStore, StoreUnavailable, open_store

from .codec import canonical_input, codec_for_type, unpack
from .context import JobContext, _extra, _Run
from .envelope import Envelope, input_hash
from .errors import (
    ClassifiedPermanent,
    DuplicateJobName,
    EncodingError,
    InputMismatch,
    UnknownJob,
    WorkflowError,
)
from .handle import JobHandle, JobState
from .job import ErrorClass, Job
from .layout import Layout, check_run_id, fresh_incarnation, fresh_run_id, run_id_for_key
from .observability import job_scope
from .outcome import JobError, Outcome, OutcomeRecord, OutcomeStatus
from .retention import Sweeper

log = logging.getLogger("stepstone")

Out = TypeVar("Out")
S = TypeVar("S")

RECENT_OUTCOMES = 10_000
"""Outcomes this process's worker recorded that no handle has asked for yet,
kept (newest last) so a handle awaited a moment later needs no read."""
RUNNING_POLL_BUDGET = 200.0
"""Outcome polls a second, about, across all the handles waiting in a runner
whose worker runs (see ``_wait_for``)."""
RUNNING_FIRST_POLL = 0.5
"""Seconds before a handle's first poll, doubling to 1 s, in a runner whose
worker runs (without one: 20 ms)."""
RESERVED_HEADER_PREFIX = "stepstone."


@dataclass(frozen=True, slots=True)
class SubmitOptions:
    """Per-submission overrides; every field defaults to the runner's setting."""

    priority: int | None = None
    """0 (first) to 9 (last); the queue's default when None."""
    run_at: datetime | None = None
    """Not before this time (an aware datetime)."""
    max_attempts: int | None = None
    """Overrides the job type's and the runner's max_attempts."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Metadata carried to ``ctx.headers``; keys starting ``stepstone.`` are reserved."""


@dataclass(frozen=True, slots=True)
class _Finished:
    """What the executor hands the worker for on_terminal: a recorded success."""

    record: OutcomeRecord
    already_recorded: bool = False


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
        max_attempts: int = 3,
        attempt_timeout: float | None = None,
        retention: float | None = None,
        sweep_interval: float | None = None,
        drain_timeout: float = 30.0,
        poll_interval: float = 1.0,
        only_registered: bool = False,
        clock: Clock | None = None,
        prefix: str = "",
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        self.clock: Clock = clock or SystemClock()
        self._owns_store = isinstance(store, str)
        self.store: ObjectStore = (
            open_store(store, clock=self.clock) if isinstance(store, str) else store
        )
        self.layout = Layout(prefix)
        self.queue: LeaseQueue = (
            queue if queue is not None else _default_queue(self.store, self.layout, self.clock)
        )
        self.max_attempts = max_attempts
        self.retention = retention
        self.concurrency = concurrency
        self._threads: ThreadPoolExecutor | None = None
        self._jobs: dict[str, type[Job[Any]]] = {}
        self._state: dict[type, object] = {}
        self._waiters: dict[str, list[asyncio.Future[OutcomeRecord]]] = {}
        self._recent: OrderedDict[str, OutcomeRecord] = OrderedDict()
        self._verified_new: OrderedDict[str, str] = OrderedDict()
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
            on_terminal=self._on_terminal,
            only_registered=only_registered,
        )
        self._sweeper: Sweeper | None = (
            None if retention is None else Sweeper(self, retention, interval=sweep_interval)
        )
        self._running = False
        for job_type in jobs:
            self.register(job_type)
        for value in state:
            self.add_state(value)

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
            self._handler_for(job_type),
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
        """Start the worker (and the retention sweeper)."""
        if self._running:
            return
        self._running = True
        await self.worker.start()
        if self._sweeper is not None:
            self._sweeper.start()

    async def stop(self, drain_timeout: float | None = None) -> None:
        """Stop claiming, let in-flight jobs finish within the drain window,
        give the rest back to the queue uncounted."""
        if not self._running:
            return
        self._running = False
        if self._sweeper is not None:
            await self._sweeper.stop()
        await self.worker.stop(drain_timeout)
        if self._threads is not None:
            # A drained sync job's thread cannot be stopped; let it finish alone.
            self._threads.shutdown(wait=False)
            self._threads = None

    async def close(self) -> None:
        await self.stop()
        if self._owns_store:
            await self.queue.close()
            await self.store.close()

    async def __aenter__(self) -> JobRunner:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- submitting ------------------------------------------------------------

    async def submit(self, job: Job[Out], options: SubmitOptions | None = None) -> JobHandle[Out]:
        """Submit ``job``; returns a handle to await. See the module docstring
        for what a job with an idempotency key does on a duplicate submit."""
        return await self._submit(job, options)

    async def _submit(
        self,
        job: Job[Out],
        options: SubmitOptions | None,
        *,
        run_id: str | None = None,
        _retries: int = 0,
    ) -> JobHandle[Out]:
        if not isinstance(job, Job):
            raise TypeError(f"submit() takes a Job instance, not {type(job).__name__}")
        options = options or SubmitOptions()
        name = job.NAME
        try:
            data = canonical_input(job)
        except Exception as exc:
            raise EncodingError(f"the input cannot be encoded: {exc}", job=name) from exc
        digest = input_hash(name, data)
        key = job.idempotency_key()
        keyed = key is not None or run_id is not None
        if key is not None:
            run_id = run_id_for_key(key)
        output = type(job).output_type()

        if keyed:
            assert run_id is not None
            cached = await self._read_outcome_record(run_id)
            if cached is not None:
                return self._answer_from(cached, digest, job, output)
        run_id = run_id or fresh_run_id()

        headers = dict(options.headers)
        for header in headers:
            if header.startswith(RESERVED_HEADER_PREFIX):
                raise ValueError(
                    f"header {header!r}: the {RESERVED_HEADER_PREFIX!r} prefix is reserved"
                )
        envelope = Envelope(name, data, fresh_incarnation(), digest, keyed)
        run_at = None
        if options.run_at is not None:
            if options.run_at.tzinfo is None:
                raise ValueError("SubmitOptions.run_at must be an aware datetime (with a tzinfo)")
            run_at = options.run_at.timestamp()
        kwargs: dict[str, Any] = {}
        if options.priority is not None:
            kwargs["priority"] = options.priority
        enqueued = await self.queue.enqueue(
            envelope.encode(),
            kind=name,
            id=run_id,
            run_at=run_at,
            max_attempts=options.max_attempts or type(job).max_attempts or self.max_attempts,
            headers=headers,
            **kwargs,
        )
        if enqueued.created:
            if keyed:
                # The run this key names may have ended between the outcome read
                # above and this enqueue (its ack removed the record, so ours was
                # created): then its outcome is the answer, not a new run. The
                # record just written is settled without running (see _execute).
                cached = await self._read_outcome_record(run_id)
                if cached is not None and cached.incarnation != envelope.incarnation:
                    return self._answer_from(cached, digest, job, output)
                # Nothing ended before our record existed: this worker, if it
                # claims the record first time round, need not look again.
                self._verified_new[run_id] = envelope.incarnation
                if len(self._verified_new) > RECENT_OUTCOMES:
                    self._verified_new.popitem(last=False)
            log.debug(
                "job %s (%s) submitted", run_id, name, extra={"job_id": run_id, "job_name": name}
            )
            return JobHandle(self, run_id, output, newly_submitted=True)

        # A live run has this id: join it, if it is the same input.
        record = await self.queue.get(run_id)
        if record is not None:
            try:
                theirs = Envelope.decode(record.payload).input_hash
            except MalformedPayload:
                theirs = None
            if theirs != digest:
                raise InputMismatch(run_id, name)
            return JobHandle(self, run_id, output, newly_submitted=False)
        # It finished between our two looks: its outcome is the answer.
        cached = await self._read_outcome_record(run_id)
        if cached is not None:
            return self._answer_from(cached, digest, job, output)
        if _retries >= 3:
            raise WorkflowError(
                f"job {name!r} ({run_id}): the queue refused a new run but holds none and "
                "no outcome is recorded; is another process purging it right now?"
            )
        return await self._submit(job, options, run_id=run_id, _retries=_retries + 1)

    def _answer_from(
        self, record: OutcomeRecord, digest: str, job: Job[Out], output: Any
    ) -> JobHandle[Out]:
        if record.input_hash != digest:
            raise InputMismatch(record.run_id, job.NAME)
        outcome: Outcome[Out] = self._typed(record, output)
        return JobHandle(self, record.run_id, output, newly_submitted=False, outcome=outcome)

    def handle(self, job_id: str, job_type: type[Job[Out]]) -> JobHandle[Out]:
        """A handle on a job submitted earlier (by any process), to await or inspect."""
        check_run_id(job_id)
        return JobHandle(self, job_id, job_type.output_type(), newly_submitted=False)

    # -- reading answers -------------------------------------------------------

    async def _read_outcome_record(self, run_id: str) -> OutcomeRecord | None:
        try:
            stored = await self.store.get(self.layout.outcome(run_id))
        except NotFound:
            return None
        return OutcomeRecord.decode(stored.data)

    async def _read_outcome(self, run_id: str, output: Any) -> Outcome[Any] | None:
        record = await self._read_outcome_record(run_id)
        return None if record is None else self._typed(record, output)

    def _typed(self, record: OutcomeRecord, output: Any) -> Outcome[Any]:
        result = None
        if record.status is OutcomeStatus.SUCCEEDED and record.result is not None:
            result = codec_for_type(output).decode(record.result)
        return Outcome(
            id=record.run_id,
            status=record.status,
            attempts=record.attempts,
            finished_at=record.finished_at,
            result=result,
            error=record.error,
            progress=record.progress,
            submitted_at=record.submitted_at,
            started_at=record.started_at,
        )

    async def _wait_for(self, run_id: str, output: Any, *, fresh: bool = False) -> Outcome[Any]:
        """The outcome, as soon as there is one: woken by this process's worker,
        else polling the record with backoff.

        No poll reads the store while this process's worker holds the run (it
        will hand over the outcome itself) or while this process's queue knows
        the run still waits, so a handle on a job this process runs costs no
        reads however long the job queues and runs. ``fresh``: the run was just created
        by this runner's submit, so the record cannot exist yet; with a worker
        running here, the first look waits for it instead of reading."""
        loop = asyncio.get_running_loop()
        # Without a worker here, the run is someone else's: look soon and
        # often. With one, most runs are this worker's (no reads needed) and
        # polling only catches runs that peers took, so it starts slower.
        delay = RUNNING_FIRST_POLL if self._running else 0.02
        recent = self._recent.pop(run_id, None)
        if recent is not None:
            return self._typed(recent, output)
        skip_read = fresh and self._running
        while True:
            future: asyncio.Future[OutcomeRecord] = loop.create_future()
            self._waiters.setdefault(run_id, []).append(future)
            try:
                record = None
                # While our worker holds the run, or our queue knows it still
                # waits (for our worker, most likely), there is nothing to read.
                quiet = self._running and (
                    self.worker.holds(run_id) or self.queue.pending_here(run_id)
                )
                if not (skip_read or quiet):
                    try:
                        record = await self._read_outcome_record(run_id)
                    except StoreUnavailable as exc:
                        # Waiting is polling: a read the store failed is one more
                        # poll that learned nothing (the caller's timeout bounds it).
                        log.debug("job %s: outcome not readable yet: %s", run_id, exc)
                skip_read = False
                if record is None:
                    wait = delay
                    if self._running:
                        # Our worker wakes us for runs it settles; polling only
                        # finds runs other processes settled. Spread it so all
                        # handles together read about RUNNING_POLL_BUDGET
                        # outcomes a second: N handles waiting T seconds cost
                        # O(N) reads, not O(N * T).
                        wait = max(delay, len(self._waiters) / RUNNING_POLL_BUDGET)
                    # asyncio.wait leaves the future alone on a timeout and,
                    # unlike wait_for(shield(...)), starts no task per wait.
                    await asyncio.wait((future,), timeout=wait)
                    if future.done() and not future.cancelled():
                        record = future.result()
                if record is not None:
                    return self._typed(record, output)
            finally:
                waiters = self._waiters.get(run_id)
                if waiters is not None and future in waiters:
                    waiters.remove(future)
                    if not waiters:
                        del self._waiters[run_id]
                future.cancel()
            delay = min(delay * 2, 1.0)

    async def status(self, job_id: str) -> JobState | None:
        """Where the job is: its outcome if it has one, else its queue record."""
        record = await self._read_outcome_record(job_id)
        if record is not None:
            progress = record.progress
            if progress is None and record.status is not OutcomeStatus.SUCCEEDED:
                progress = await self._read_progress(job_id)  # a failed run's last report
            return JobState(
                id=job_id,
                state=record.status.value,
                attempts=record.attempts,
                progress=progress,
                last_error=None if record.error is None else record.error.message,
            )
        queued = await self.queue.get(job_id)
        if queued is None:
            return None
        progress = await self._read_progress(job_id)
        state = {
            JobStatus.SCHEDULED: "scheduled",
            JobStatus.READY: "ready",
            JobStatus.CLAIMED: "running",
            JobStatus.DEAD: "dead",
        }[queued.status]
        return JobState(
            id=job_id,
            state=state,
            attempts=queued.attempts,
            progress=progress,
            last_error=queued.last_error or queued.dead_reason,
            run_at=queued.run_at,
            lease_expires_at=queued.lease_expires_at,
        )

    async def _read_progress(self, job_id: str) -> Any:
        with contextlib.suppress(NotFound):
            return unpack((await self.store.get(self.layout.progress(job_id))).data)
        return None

    async def cancel(self, job_id: str) -> bool:
        """Cancel a job that has not finished: record it cancelled, drop it from
        the queue. False if it had already finished (or was never submitted)."""
        queued = await self.queue.get(job_id)
        if queued is None:
            return False
        try:
            envelope = Envelope.decode(queued.payload)
            name, digest, incarnation = envelope.name, envelope.input_hash, envelope.incarnation
        except MalformedPayload:
            name, digest, incarnation = queued.kind, "", ""
        record = OutcomeRecord(
            run_id=job_id,
            name=name,
            status=OutcomeStatus.CANCELLED,
            input_hash=digest,
            incarnation=incarnation,
            attempts=queued.attempts,
            finished_at=self.clock.now(),
            error=JobError("cancelled", "the job was cancelled"),
        )
        try:
            await self.store.put_if_absent(self.layout.outcome(job_id), record.encode())
        except AlreadyExists:
            return False
        await self.queue.cancel(job_id)
        self._wake_waiters(record)
        return True

    # -- running -------------------------------------------------------------

    def _handler_for(self, job_type: type[Job[Any]]) -> Any:
        async def handle(attempt: Attempt) -> _Finished:
            with job_scope(job_type.NAME, attempt):  # log context, and a span with otel
                return await self._execute(job_type, attempt)

        return handle

    async def _execute(self, job_type: type[Job[Any]], attempt: Attempt) -> _Finished:
        delivery = attempt.delivery
        envelope = Envelope.decode(delivery.payload)
        run_id = delivery.id
        extra = {"job_id": run_id, "job_name": envelope.name, "attempt": delivery.attempt}

        # An outcome can already exist for a keyed run (a resubmit raced the
        # end of the previous run) or after an earlier claim (a crash between
        # the outcome write and the ack): then there is nothing to run. A
        # keyed run this process's submit created, and checked after creating
        # it, cannot have one on its first claim (the previous run's outcome
        # was written before its ack, which came before our create).
        verified = self._verified_new.pop(run_id, None) == envelope.incarnation
        if delivery.claims > 1 or (envelope.keyed and not verified):
            existing = await self._read_outcome_record(run_id)
            if existing is not None:
                log.info(
                    "job %s (%s): outcome already recorded; settling without running",
                    run_id,
                    envelope.name,
                    extra=extra,
                )
                return _Finished(existing, already_recorded=True)

        memo_keys: set[str] | None = None
        if delivery.claims > 1:
            prefix = self.layout.memos(run_id, envelope.incarnation)
            memo_keys = {info.key[len(prefix) :] async for info in self.store.scan(prefix)}

        try:
            job = job_type.model_validate_json(envelope.input)
        except ValidationError as exc:
            raise MalformedPayload(
                f"the input does not validate as {job_type.__qualname__}: {exc}"
            ) from exc

        run = _Run(
            runner=self,
            store=self.store,
            layout=self.layout,
            attempt=attempt,
            name=envelope.name,
            incarnation=envelope.incarnation,
            memo_keys=memo_keys,
            headers=delivery.headers,
        )
        started_at = self.clock.now()
        ctx = JobContext(run)
        log.info(
            "job %s (%s) attempt %d started", run_id, envelope.name, delivery.attempt, extra=extra
        )
        try:
            if job_type.is_async():
                result = await cast(Awaitable[Any], job.run(ctx))
            else:
                result = await self._run_in_thread(job, ctx)
        except (PermanentError, EncodingError) as exc:
            await _flush(run)
            if isinstance(exc, EncodingError):
                raise ClassifiedPermanent(exc) from exc
            raise
        except Exception as exc:
            await _flush(run)
            if job.classify(exc) is ErrorClass.PERMANENT:
                raise ClassifiedPermanent(exc) from exc
            raise
        await run.flush_progress()
        try:
            encoded = codec_for_type(job_type.output_type()).encode(result)
        except (TypeError, ValueError) as exc:
            error = EncodingError(f"the job's result cannot be stored: {exc}", job=envelope.name)
            raise ClassifiedPermanent(error) from exc
        record = OutcomeRecord(
            run_id=run_id,
            name=envelope.name,
            status=OutcomeStatus.SUCCEEDED,
            input_hash=envelope.input_hash,
            incarnation=envelope.incarnation,
            attempts=delivery.attempt,
            finished_at=self.clock.now(),
            result=encoded,
            progress=run.progress,
            submitted_at=delivery.enqueued_at or None,
            started_at=started_at,
        )
        return _Finished(record)

    async def _run_in_thread(self, job: Job[Any], ctx: JobContext) -> Any:
        """A synchronous ``run`` gets a thread of the runner's own pool, one per
        concurrent job, so sync jobs never wait on each other for threads."""
        if self._threads is None:
            self._threads = ThreadPoolExecutor(self.concurrency, thread_name_prefix="stepstone-job")
        return await asyncio.get_running_loop().run_in_executor(self._threads, job.run, ctx)

    async def _on_terminal(self, delivery: Delivery, terminal: Terminal) -> None:
        """Record the outcome, create-if-absent, before the worker acks or
        dead-letters. The first record written is the answer."""
        if isinstance(terminal, Success) and isinstance(terminal.result, _Finished):
            record = terminal.result.record
            if terminal.result.already_recorded:
                self._wake_waiters(record)
                return
        else:
            assert isinstance(terminal, Failure)
            record = self._failure_record(delivery, terminal)
        key = self.layout.outcome(delivery.id)
        try:
            await self.store.put_if_absent(key, record.encode())
        except AlreadyExists:
            existing = await self._read_outcome_record(delivery.id)
            if existing is not None:
                record = existing
        extra = {"job_id": delivery.id, "job_name": record.name, "attempt": delivery.attempt}
        if record.status is OutcomeStatus.SUCCEEDED:
            log.info(
                "job %s (%s) succeeded on attempt %d",
                delivery.id,
                record.name,
                delivery.attempt,
                extra=extra,
            )
        else:
            log.warning(
                "job %s (%s) %s: %s",
                delivery.id,
                record.name,
                record.status.value,
                record.error.message if record.error else "",
                extra=extra,
            )
        self._wake_waiters(record)

    def _failure_record(self, delivery: Delivery, failure: Failure) -> OutcomeRecord:
        try:
            envelope = Envelope.decode(delivery.payload)
            name, digest, incarnation = envelope.name, envelope.input_hash, envelope.incarnation
        except MalformedPayload:
            name, digest, incarnation = delivery.kind, "", ""
        return OutcomeRecord(
            run_id=delivery.id,
            name=name,
            status=OutcomeStatus.FAILED,
            input_hash=digest,
            incarnation=incarnation,
            attempts=failure.attempt,
            finished_at=self.clock.now(),
            error=JobError(failure.kind.value, failure.message, failure.error_type),
            submitted_at=delivery.enqueued_at or None,
        )

    def _wake_waiters(self, record: OutcomeRecord) -> None:
        waiters = self._waiters.pop(record.run_id, None)
        if not waiters:
            # Nobody waits yet: keep it for a handle that asks soon (a batch of
            # submits awaited one by one), so it neither reads nor waits.
            self._recent[record.run_id] = record
            if len(self._recent) > RECENT_OUTCOMES:
                self._recent.popitem(last=False)
            return
        for future in waiters:
            if not future.done():
                future.set_result(record)


async def _flush(run: _Run) -> None:
    try:
        await run.flush_progress()
    except Exception as exc:
        log.warning("job %s: final progress not written: %s", run.run_id, exc, extra=_extra(run))


def _default_queue(store: ObjectStore, layout: Layout, clock: Clock) -> LeaseQueue:
    prefix = f"{layout.prefix}/queue" if layout.prefix else "queue"
    return StoreQueue(store, prefix=prefix, clock=clock)

"""The executor: runs one attempt of a job and records how the run ended.

The worker (:mod:`stepstone.runtime.worker`) claims a job and calls the
handler this module makes for its type. The handler decodes the job's
envelope, replays or runs its steps through a :class:`~stepstone.JobContext`,
and returns the success record; a failure propagates as the exception the
job raised (classified permanent where the job says so) for the worker's
pure ``decide`` to judge. When the worker has decided a run is over, it
calls :meth:`Executor.on_terminal`, which writes the outcome record,
create-if-absent, before the worker acks or dead-letters: the first record
written is the answer, and a crash between the two leaves the record for the
next claim to find.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from pydantic import ValidationError

from stepstone.runtime.capabilities import Waking
from stepstone.runtime.clock import Clock
from stepstone.runtime.decide import Failure, FailureKind, Success, Terminal
from stepstone.runtime.errors import MalformedPayload, Permanent
from stepstone.runtime.queue import Delivery, JobStatus
from stepstone.runtime.suspension import Suspend
from stepstone.runtime.worker import Attempt, Worker
from stepstone.store import StoreUnavailable

from .codec import codec_for_type
from .context import JobContext
from .envelope import Envelope
from .errors import ClassifiedPermanent, CorruptMemo, CorruptOutcome, EncodingError
from .history import AttemptLog, Noted
from .hooks import SettledHooks
from .job import ErrorClass, Job
from .limits.gate import Limits
from .observability import job_scope
from .outcome import ErrorInfo, OutcomeRecord, Tombstone
from .records import RunRecords, answering
from .run import Run, log_extra
from .submitting import Submitter

log = logging.getLogger("stepstone")

RECHECK_WAKING = 3600.0
"""Longest a waiting run stays suspended on a queue that wakes it: a safety
net for a wake that was lost (its sender crashed between writing and waking)."""
RECHECK_POLLING = 30.0
"""Longest a waiting run stays suspended on a queue that cannot wake it (SQS):
how late it may see an event or a child's end."""


@dataclass(frozen=True, slots=True)
class Finished:
    """What a handler returns to the worker: the success record to write."""

    record: OutcomeRecord
    envelope: Envelope
    """The payload the attempt ran, decoded once for the attempt's whole path."""
    already_recorded: bool = False
    """The run's outcome was already recorded (by an earlier claim, or the
    previous run of its key): nothing ran, nothing is to be written."""


Handler = Callable[[Attempt], Awaitable[Finished]]


class Executor:
    """Runs attempts for one runner and records their outcomes.

    ``settled`` hears every outcome that stands, once it is recorded (the
    runner wakes the handles waiting for it), then ``hooks`` run for it
    before the worker acks; ``history`` learns which claims the outcome
    record describes, and when each began; ``unrecorded`` hears every run
    whose outcome could not be recorded, with the error; ``state_of`` gives jobs their
    registered state; ``in_thread`` runs synchronous jobs (the worker's
    thread pool).
    """

    def __init__(
        self,
        *,
        records: RunRecords,
        submitter: Submitter,
        worker: Worker,
        in_thread: Callable[..., Awaitable[Any]],
        clock: Clock,
        state_of: Callable[[type[Any]], Any],
        settled: Callable[[OutcomeRecord], None],
        unrecorded: Callable[[str, Exception], None],
        hooks: SettledHooks,
        history: AttemptLog,
        wait_recheck: float | None = None,
    ) -> None:
        self._records = records
        self._submitter = submitter
        self._in_thread = in_thread
        self._clock = clock
        self._state_of = state_of
        self._settled = settled
        self._unrecorded = unrecorded
        self._hooks = hooks
        self._history = history
        queue = worker.queue
        self._waking: Waking | None = queue if isinstance(queue, Waking) else None
        if wait_recheck is None:
            wait_recheck = RECHECK_WAKING if self._waking is not None else RECHECK_POLLING
        self._wait_recheck = wait_recheck
        self._limits = Limits(
            store=records.store,
            layout=records.layout,
            clock=clock,
            waking=self._waking,
            wait_recheck=wait_recheck,
            grace=worker.lease,
        )

    def handler_for(self, job_type: type[Job[Any]]) -> Handler:
        """The worker's handler for jobs of ``job_type``."""
        self._limits.register(job_type)

        async def handle(attempt: Attempt) -> Finished:
            self._history.begun(attempt.delivery)
            with job_scope(job_type.NAME, attempt):  # log context, and a span with otel
                return await self.run_attempt(job_type, attempt)

        return handle

    async def run_attempt(self, job_type: type[Job[Any]], attempt: Attempt) -> Finished:
        """Run one attempt of a job of ``job_type``; returns its success record."""
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
        verified = self._submitter.created_here(run_id, envelope.incarnation)
        if delivery.claims > 1 or (envelope.keyed and not verified):
            existing = await self._recorded(run_id, envelope)
            if existing is not None:
                log.info(
                    "job %s (%s): outcome already recorded; settling without running",
                    run_id,
                    envelope.name,
                    extra=extra,
                )
                return Finished(existing, envelope, already_recorded=True)

        memo_keys: set[str] | None = None
        if delivery.claims > 1:
            store, layout = self._records.store, self._records.layout
            prefix = layout.memos(run_id, envelope.incarnation)
            memo_keys = {info.key[len(prefix) :] async for info in store.scan(prefix)}

        try:
            job = job_type.model_validate_json(envelope.input)
        except ValidationError as exc:
            raise MalformedPayload(
                f"the input does not validate as {job_type.__qualname__}: {exc}"
            ) from exc

        run = Run(
            submitter=self._submitter,
            state_of=self._state_of,
            records=self._records,
            attempt=attempt,
            name=envelope.name,
            incarnation=envelope.incarnation,
            memo_keys=memo_keys,
            headers=delivery.headers,
            clock=self._clock,
            wakes=self._waking is not None,
            wait_recheck=self._wait_recheck,
        )
        # A slot of its concurrency key and its rate limit turn, or Suspend.
        admitted = await self._limits.admit(job_type, job, run)
        started_at = self._clock.now()
        ctx = JobContext(run)
        log.info(
            "job %s (%s) attempt %d started", run_id, envelope.name, delivery.attempt, extra=extra
        )
        try:
            if job_type.is_async():
                result = await cast(Awaitable[Any], job.run(ctx))
            else:
                result = await self._in_thread(job.run, ctx)
        except Suspend:
            await _flush(run)
            await admitted.suspending()
            raise
        except (Permanent, EncodingError, CorruptMemo) as exc:
            # (Retrying cannot mend a value that cannot be stored or a memo
            # that does not decode: the run fails for good, saying which.)
            await _flush(run)
            if not isinstance(exc, Permanent):
                raise ClassifiedPermanent(exc) from exc
            raise
        except Exception as exc:
            await _flush(run)
            if job.classify(exc) is ErrorClass.PERMANENT:
                raise ClassifiedPermanent(exc) from exc
            raise
        finally:
            await admitted.leave()
        await run.flush_progress()
        try:
            encoded = _stored_result(envelope.name, job_type.output_type(), result)
        except EncodingError as exc:
            raise ClassifiedPermanent(exc) from exc
        record = OutcomeRecord(
            run_id=run_id,
            name=envelope.name,
            status=JobStatus.SUCCEEDED,
            input_hash=envelope.input_hash,
            incarnation=envelope.incarnation,
            attempts=delivery.attempt,
            finished_at=self._clock.now(),
            result=encoded,
            progress=run.progress,
            submitted_at=delivery.enqueued_at or None,
            started_at=started_at,
            claims=delivery.claims,
            claimed_at=self._history.claimed_at(delivery),
            worker=self._history.worker_id(),
        )
        return Finished(record, envelope)

    async def _recorded(self, run_id: str, envelope: Envelope) -> OutcomeRecord | None:
        """The outcome that already answers this run, if one is recorded."""
        try:
            slot = await self._records.slot(run_id)
            if isinstance(slot.content, OutcomeRecord):
                key = self._records.layout.outcome(run_id)
                return answering(slot.content, key, envelope.input_hash)
        except CorruptOutcome as exc:
            # No answer for this run, and nothing it did could be recorded
            # (the object stands in the way): fail it now, unrun.
            raise ClassifiedPermanent(exc) from exc
        if isinstance(slot.content, Tombstone) and slot.content.incarnation == envelope.incarnation:
            # This very run was swept, and is claimed again since (a dead run
            # retried): it runs again, and its outcome is to be recorded.
            await self._records.clear_tombstone(run_id, slot.etag)
        return None

    async def is_cancelled(self, delivery: Delivery) -> bool:
        """Whether the run was cancelled while this attempt runs (one GET): the
        cancel records a cancelled outcome for the run's incarnation before it
        drops the queue record. Handles waiting here hear of it at once."""
        try:
            envelope = Envelope.decode(delivery.payload)
        except MalformedPayload:
            return False  # such a job does not run
        try:
            record = await self._records.outcome(delivery.id, envelope.input_hash)
        except CorruptOutcome:
            return False  # no answer for this run: its own end says so
        if record is None or record.status is not JobStatus.CANCELLED:
            return False
        if record.incarnation and record.incarnation != envelope.incarnation:
            return False  # an earlier run's, left behind: not this one's answer
        self._settled(record)
        return True

    async def on_terminal(self, delivery: Delivery, terminal: Terminal) -> None:
        """Record the run's outcome, create-if-absent, before the worker acks
        or dead-letters. The first record written is the answer.

        When it cannot be recorded for good (the object at its key does not
        decode, the store refuses the key), the handles waiting here raise
        the error, and the worker, hearing it, dead-letters the run."""
        try:
            await self._record(delivery, terminal)
        except StoreUnavailable:
            raise  # the worker tries again later
        except Exception as exc:
            self._unrecorded(delivery.id, exc)
            raise

    async def _record(self, delivery: Delivery, terminal: Terminal) -> None:
        envelope: Envelope | None
        if isinstance(terminal, Success) and isinstance(terminal.result, Finished):
            record, envelope = terminal.result.record, terminal.result.envelope
            if terminal.result.already_recorded:
                self._history.note(delivery, Noted.ANSWERED)
                await self._wake_parent(envelope)
                await self._settle(record, envelope)
                return
        else:
            assert isinstance(terminal, Failure)
            envelope = _envelope(delivery)
            record = self._failure_record(delivery, terminal, envelope)
            if terminal.kind is FailureKind.EXPIRED:
                await self._limits.abandoned(delivery)
        recorded = await self._records.record_outcome(record)
        extra = {"job_id": delivery.id, "job_name": record.name, "attempt": delivery.attempt}
        if recorded is record:
            self._history.note(delivery, Noted.DESCRIBED)
        elif recorded is not None:
            self._history.note(delivery, Noted.SUPERSEDED)
        if recorded is None:
            self._history.note(delivery, Noted.SWEPT)
            log.warning(
                "job %s (%s): the run was swept while attempt %d ran; its outcome is not "
                "recorded (the key's next run gets its own)",
                delivery.id,
                record.name,
                delivery.attempt,
                extra=extra,
            )
            return
        record = recorded
        if record.status is JobStatus.SUCCEEDED:
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
        await self._wake_parent(envelope)
        await self._settle(record, envelope)

    async def _settle(self, record: OutcomeRecord, envelope: Envelope | None) -> None:
        """The run's outcome stands: wake its handles here, then call its
        hooks (a cancelled run's are the cancelling process's to call)."""
        self._settled(record)
        if record.status is not JobStatus.CANCELLED:
            await self._hooks.run(record, None if envelope is None else envelope.input)

    async def _wake_parent(self, envelope: Envelope | None) -> None:
        """A child's outcome is recorded: wake the run waiting for it, if it
        has a parent (after the record, so the parent finds it when it looks)."""
        if self._waking is not None and envelope is not None and envelope.parent is not None:
            await self._waking.wake(envelope.parent)

    def _failure_record(
        self, delivery: Delivery, failure: Failure, envelope: Envelope | None
    ) -> OutcomeRecord:
        if envelope is not None:
            name, digest, incarnation = envelope.name, envelope.input_hash, envelope.incarnation
        else:
            name, digest, incarnation = delivery.kind, "", ""
        return OutcomeRecord(
            run_id=delivery.id,
            name=name,
            status=JobStatus.FAILED,
            input_hash=digest,
            incarnation=incarnation,
            attempts=failure.attempt,
            finished_at=self._clock.now(),
            error=ErrorInfo(failure.kind, failure.message, failure.error_type, failure.traceback),
            submitted_at=delivery.enqueued_at or None,
            claims=delivery.claims,
            claimed_at=self._history.claimed_at(delivery),
            worker=self._history.worker_id(),
        )


def _envelope(delivery: Delivery) -> Envelope | None:
    """The run's envelope, None when its payload does not decode."""
    try:
        return Envelope.decode(delivery.payload)
    except MalformedPayload:
        return None


def _stored_result(name: str, output: Any, result: object) -> bytes:
    """``result`` encoded for the outcome record, once it is known to read back
    as the job's declared ``output`` type (what awaiting a handle does): a
    job that returns a value of another type fails here, naming both, rather
    than succeed with a result no handle can read."""
    codec = codec_for_type(output)
    try:
        encoded = codec.encode(result)
    except (TypeError, ValueError) as exc:
        raise EncodingError(f"the job's result cannot be stored: {exc}", job=name) from exc
    try:
        codec.decode(encoded)
    except ValidationError as exc:
        expected = output.__name__ if isinstance(output, type) else str(output)
        reason = exc.errors()[0]["msg"] if exc.errors() else str(exc)
        raise EncodingError(
            f"the job returned a {type(result).__name__}, not its declared output type "
            f"{expected} ({reason})",
            job=name,
        ) from exc
    return encoded


async def _flush(run: Run) -> None:
    try:
        await run.flush_progress()
    except Exception as exc:
        log.warning("job %s: final progress not written: %s", run.run_id, exc, extra=log_extra(run))

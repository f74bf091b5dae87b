"""How a run's end is recorded: the worker's attempt callbacks.

When the worker has decided a run is over, it calls
:meth:`RunEnding.on_terminal`, which makes the outcome record (here alone,
for a success as for a failure: it is also the attempt record of the claim
that writes it) and writes it, create-if-absent, before the worker acks or
dead-letters: the first record written is the answer, and a crash between
the two leaves the record for the next claim to find. Once the outcome stands, every run waiting for
it is woken (its parent, and the runs that joined it), the handles
awaiting it here are told, and its ``on_settled`` hooks run.

The worker also asks, of an attempt that has run a while, whether its run
was cancelled meanwhile (:meth:`RunEnding.is_cancelled`, one GET), and
reports how every claim ended (:meth:`RunEnding.attempt_over`), which the
attempt history keeps.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from stepstone.errors import CorruptOutcome
from stepstone.execute.admission import Limits
from stepstone.execute.attempts import Finished
from stepstone.execute.hooks import SettledHooks
from stepstone.handles.watch import OutcomeWatch
from stepstone.records.attempt_log import AttemptLog
from stepstone.records.envelope import Envelope
from stepstone.records.error_texts import ErrorSealing
from stepstone.records.family import Family
from stepstone.records.outcome import ErrorInfo, OutcomeRecord, about_the_run
from stepstone.records.run_records import RunRecords
from stepstone.runtime.capabilities import Waking
from stepstone.runtime.clock import Clock
from stepstone.runtime.decision import Failure, FailureKind, Success, Terminal
from stepstone.runtime.errors import MalformedPayload
from stepstone.runtime.observer import AttemptReport
from stepstone.runtime.queue import Delivery
from stepstone.runtime.status import JobStatus
from stepstone.store import StoreUnavailable
from stepstone.store.parts import Body

log = logging.getLogger("stepstone")


class RunEnding:
    """Records how the runs of one runner end (the worker's ``AttemptCallbacks``).

    ``watch`` hears every outcome that stands, once it is recorded, and every
    run whose outcome could not be recorded; ``hooks`` run for each outcome
    that stands, before the worker acks; ``history`` learns which claims the
    outcome record describes; ``limits`` hears of runs whose lease lapsed;
    ``waking`` (None: the queue cannot wake runs) wakes the runs waiting for
    a finished one (:mod:`stepstone.records.family`). With ``sealing`` on,
    a failed run's error texts are sealed in the record written
    (:mod:`stepstone.records.error_texts`); this process goes on with them
    as they are.
    """

    def __init__(
        self,
        *,
        records: RunRecords,
        watch: OutcomeWatch,
        hooks: SettledHooks,
        history: AttemptLog,
        limits: Limits,
        waking: Waking | None,
        clock: Clock,
        sealing: ErrorSealing | None = None,
    ) -> None:
        self._records = records
        self._sealing = sealing
        self._watch = watch
        self._hooks = hooks
        self._history = history
        self._limits = limits
        self._waking = waking
        self._family = Family(records.store, records.layout)
        self._clock = clock

    async def attempt_over(self, report: AttemptReport) -> None:
        """A claim ended: its history keeps it (unless the outcome describes it)."""
        await self._history.attempt_over(report)

    async def is_cancelled(self, delivery: Delivery) -> bool:
        """Whether the run was cancelled while this attempt runs (one GET): the
        cancel records a cancelled outcome for the run's incarnation before it
        drops the queue record. Handles awaiting the run here hear of it at once."""
        envelope = _envelope(delivery)
        if envelope is None:
            return False  # such a job does not run
        try:
            record = await self._records.outcome(delivery.id, envelope.input_hash)
        except CorruptOutcome:
            return False  # no answer for this run: its own end says so
        if record is None or record.status is not JobStatus.CANCELLED:
            return False
        if record.incarnation and record.incarnation != envelope.incarnation:
            return False  # an earlier run's, left behind: not this one's answer
        self._watch.stands(record)
        return True

    async def on_terminal(self, delivery: Delivery, terminal: Terminal) -> None:
        """Record the run's outcome, create-if-absent, before the worker acks
        or dead-letters. The first record written is the answer.

        When it cannot be recorded for good (the object at its key does not
        decode, the store refuses the key), the handles awaiting it here raise
        the error, and the worker, hearing it, dead-letters the run."""
        try:
            await self._record(delivery, terminal)
        except StoreUnavailable:
            raise  # the worker tries again later
        except Exception as exc:
            self._watch.unrecorded(delivery.id, exc)
            raise

    async def _record(self, delivery: Delivery, terminal: Terminal) -> None:
        envelope: Envelope | None
        if isinstance(terminal, Success) and isinstance(terminal.result, Finished):
            finished = terminal.result
            envelope = finished.envelope
            if finished.answer is not None:
                self._history.answered(delivery)
                await self._stands(finished.answer, envelope)
                return
        else:
            assert isinstance(terminal, Failure)
            envelope = _envelope(delivery)
            if terminal.reason is FailureKind.EXPIRED:
                await self._limits.abandoned(delivery)
        record = self._outcome_record(delivery, terminal, envelope)
        stored = record if record.error is None else self._sealed(record)
        recorded = await self._records.record_outcome(stored)
        if recorded is stored:
            recorded = record  # (as it is here: its error's texts as they were)
        extra = {"run_id": delivery.id, "kind": record.kind, "attempt": delivery.attempt}
        if recorded is record or recorded is None:
            self._history.described(delivery)  # (or swept: nothing of the claim is kept)
        else:
            self._history.answered(delivery)  # (another claim's outcome was recorded first)
        if recorded is None:
            log.warning(
                "run %s (%s): the run was swept while attempt %d ran; its outcome is not "
                "recorded (the key's next run gets its own)",
                delivery.id,
                record.kind,
                delivery.attempt,
                extra=extra,
            )
            return
        record = recorded
        if record.status is JobStatus.SUCCEEDED:
            log.info(
                "run %s (%s) succeeded on attempt %d",
                delivery.id,
                record.kind,
                delivery.attempt,
                extra=extra,
            )
        else:
            log.warning(
                "run %s (%s) %s: %s",
                delivery.id,
                record.kind,
                record.status.value,
                record.error.message if record.error else "",
                extra=extra,
            )
        await self._stands(record, envelope)

    async def _stands(self, record: OutcomeRecord, envelope: Envelope | None) -> None:
        """The run's outcome stands: wake the runs waiting for it (after the
        record, so they find it when they look), tell the handles awaiting it
        here, then call its hooks (a cancelled run's are the cancelling process's)."""
        if self._waking is not None:
            await self._family.wake_waiters(
                self._waking,
                record.run_id,
                envelope,
                succeeded=record.status is JobStatus.SUCCEEDED,
            )
        self._watch.stands(record)
        if record.status is not JobStatus.CANCELLED:
            await self._hooks.run(record, None if envelope is None else envelope.input)

    def _sealed(self, record: OutcomeRecord) -> OutcomeRecord:
        """``record`` as it is written: its error's message and traceback
        sealed when sealing is on (its reason and error type stay readable)."""
        error, sealing = record.error, self._sealing
        if error is None or sealing is None or not sealing.on:
            return record
        message, traceback = sealing.seal(error.message), sealing.seal_optional(error.traceback)
        return replace(record, error=replace(error, message=message, traceback=traceback))

    def _outcome_record(
        self, delivery: Delivery, terminal: Terminal, envelope: Envelope | None
    ) -> OutcomeRecord:
        """The run's outcome record, which is also the attempt record of the
        claim that writes it (its number, worker and claim time): made here
        alone, for a success as for a failure."""
        if envelope is not None:
            kind, digest, incarnation = envelope.kind, envelope.input_hash, envelope.incarnation
        else:
            kind, digest, incarnation = delivery.kind, "", ""
        error: ErrorInfo | None = None
        result: Body | None = None
        progress: Any = None
        started_at: float | None = None
        about = {} if envelope is None else about_the_run(envelope)
        if isinstance(terminal, Failure):
            status, attempts, finished_at = JobStatus.FAILED, terminal.attempt, self._clock.now()
            error = ErrorInfo(
                terminal.reason, terminal.message, terminal.error_type, terminal.traceback
            )
        else:
            finished = terminal.result
            assert isinstance(finished, Finished)
            status, attempts, finished_at = (
                JobStatus.SUCCEEDED,
                delivery.attempt,
                finished.finished_at,
            )
            result, progress, started_at = finished.result, finished.progress, finished.started_at
            if finished.attributes is not None:  # (with those the run set)
                about["attributes"] = finished.attributes
        return OutcomeRecord(
            run_id=delivery.id,
            kind=kind,
            status=status,
            input_hash=digest,
            incarnation=incarnation,
            attempts=attempts,
            lapses=delivery.lapses,
            finished_at=finished_at,
            result=result,
            error=error,
            progress=progress,
            submitted_at=delivery.enqueued_at or None,
            started_at=started_at,
            claims=delivery.claims,
            claimed_at=self._history.claimed_at(delivery),
            worker=self._history.worker_id(),
            **about,
        )


def _envelope(delivery: Delivery) -> Envelope | None:
    """The run's envelope, None when its payload does not decode."""
    try:
        return Envelope.decode(delivery.payload)
    except MalformedPayload:
        return None

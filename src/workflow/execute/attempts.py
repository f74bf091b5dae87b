"""Running one attempt of a job: the handler the worker calls for each claim.

The worker (:mod:`stepstone.runtime.worker`) claims a job and calls the
handler this module makes for its type. The handler decodes the job's
envelope, replays or runs its steps through a :class:`~stepstone.JobContext`,
and returns what it ended with (:class:`Finished`, of which
:mod:`stepstone.execute.ending` makes the outcome record); a failure
propagates as the exception the job raised (classified permanent where the
job says so) for the worker's pure ``decide`` to judge. What happens once
the worker has decided that the run is over is :mod:`stepstone.execute.ending`'s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

from pydantic import ValidationError

from stepstone.errors import (
    BadCallback,
    BadEvent,
    CallbackTimeout,
    ClassifiedPermanent,
    CorruptMemo,
    CorruptOutcome,
    EncodingError,
    InputMismatch,
    InvalidAttribute,
    InvalidWait,
    JobFailed,
    NonDeterministicReplay,
    PayloadUnreadable,
    StreamClosed,
)
from stepstone.execute import branches, versions
from stepstone.execute.admission import Limits
from stepstone.execute.branches import RunTree
from stepstone.execute.context import JobContext
from stepstone.execute.debounced import debounced_input
from stepstone.execute.scope import AttemptScope, InThread, log_extra
from stepstone.job import ErrorClass, Job
from stepstone.records.attempt_log import AttemptLog
from stepstone.records.calls import PositionedMemo, memo_value
from stepstone.records.codec import codec_for_type
from stepstone.records.envelope import Envelope
from stepstone.records.layout import branch_name, place_of
from stepstone.records.outcome import OutcomeRecord, Tombstone
from stepstone.records.run_records import RunRecords, answering
from stepstone.runtime.clock import Clock
from stepstone.runtime.errors import MalformedPayload, Permanent
from stepstone.runtime.status import JobStatus, Wait
from stepstone.runtime.suspension import Suspend
from stepstone.runtime.worker import Attempt
from stepstone.store import NotFound
from stepstone.store.parts import Body
from stepstone.submit.created_here import CreatedHere
from stepstone.submit.submitter import Submitter
from stepstone.telemetry.tracing import job_scope

log = logging.getLogger("stepstone")


@dataclass(frozen=True, slots=True)
class Finished:
    """What a handler returns to the worker: what the run's success record is
    made of (:class:`~stepstone.execute.ending.RunEnding` makes it, as it
    makes a failure's), or the outcome that already answered the run."""

    envelope: Envelope
    """The payload the attempt ran, decoded once for the attempt's whole path."""
    result: Body | None = None
    """The job's result, encoded for the record."""
    progress: Any = None
    started_at: float | None = None
    """When the run's code started (after its admission)."""
    finished_at: float = 0.0
    attributes: dict[str, str] | None = None
    """The run's attributes as it ends: those it was submitted with and
    those it set (None: the envelope's)."""
    answer: OutcomeRecord | None = None
    """The run's outcome, already recorded (by an earlier claim, or the
    previous run of its key): nothing ran, nothing is to be written."""


AttemptHandler = Callable[[Attempt], Awaitable[Finished]]
"""What :meth:`AttemptRunner.handler_for` makes: the worker's handler of one job type."""


class AttemptRunner:
    """Runs attempts of the job types one runner knows.

    ``submitter`` takes the children jobs submit; ``in_thread`` runs plain
    code (a synchronous job's ``run``, a synchronous step) in the job thread
    pool; ``limits`` admits each attempt under its concurrency key and rate
    limit; ``history`` learns when each handler began; ``created_here``
    says which keyed runs need no look for an outcome on their first claim;
    ``state_of`` gives jobs their registered state. ``build_id`` names the
    code this worker runs, and ``version_wait`` is how long a run it cannot
    replay waits for a worker of the version that recorded it
    (:mod:`stepstone.execute.versions`).
    """

    def __init__(
        self,
        *,
        records: RunRecords,
        submitter: Submitter,
        created_here: CreatedHere,
        in_thread: InThread,
        limits: Limits,
        history: AttemptLog,
        clock: Clock,
        state_of: Callable[[type[Any]], Any],
        wakes: bool,
        wait_recheck: float,
        build_id: str | None = None,
        version_wait: float = versions.VERSION_WAIT,
    ) -> None:
        self._records = records
        self._submitter = submitter
        self._created_here = created_here
        self._in_thread = in_thread
        self._limits = limits
        self._history = history
        self._clock = clock
        self._state_of = state_of
        self._wakes = wakes
        self._wait_recheck = wait_recheck
        self._build_id = build_id
        self._version_wait = version_wait
        self._versions: dict[type[Any], str] = {}

    @property
    def build_id(self) -> str | None:
        return self._build_id

    @build_id.setter
    def build_id(self, build_id: str | None) -> None:
        """Run as ``build_id`` from the next attempt on (``stepstone worker --build-id``)."""
        self._build_id = versions.build_id_from(build_id)
        self._versions = {
            job_type: versions.code_version(job_type, self._build_id) for job_type in self._versions
        }

    def handler_for(self, job_type: type[Job[Any]]) -> AttemptHandler:
        """The worker's handler for jobs of ``job_type``."""
        self._limits.register(job_type)
        self._versions[job_type] = versions.code_version(job_type, self._build_id)

        async def handle(attempt: Attempt) -> Finished:
            self._history.begun(attempt.delivery)
            with job_scope(job_type.NAME, attempt):  # log context, and a span with otel
                return await self.run_attempt(job_type, attempt)

        return handle

    async def run_attempt(self, job_type: type[Job[Any]], attempt: Attempt) -> Finished:
        """Run one attempt of a job of ``job_type``; returns what it ended with."""
        delivery = attempt.delivery
        envelope = Envelope.decode(delivery.payload)
        run_id = delivery.id
        extra = {"run_id": run_id, "kind": envelope.kind, "attempt": delivery.attempt}

        # An outcome can already exist for a keyed run (a resubmit raced the
        # end of the previous run) or after an earlier claim (a crash between
        # the outcome write and the ack): then there is nothing to run. A
        # keyed run this process's submit created, and checked after creating
        # it, cannot have one on its first claim (the previous run's outcome
        # was written before its ack, which came before our create).
        verified = self._created_here.take(run_id, envelope.incarnation)
        if delivery.claims > 1 or (envelope.keyed and not verified):
            existing = await self._recorded(run_id, envelope)
            if existing is not None:
                log.info(
                    "run %s (%s): outcome already recorded; settling without running",
                    run_id,
                    envelope.kind,
                    extra=extra,
                )
                return Finished(envelope, answer=existing)

        memo_keys: set[str] | None = None
        if delivery.claims > 1 or envelope.replay_of is not None:  # (a replay starts with some)
            store, layout = self._records.store, self._records.layout
            prefix = layout.memos(run_id, envelope.incarnation)
            memo_keys = {info.key[len(prefix) :] async for info in store.scan(prefix)}

        scope = AttemptScope(
            submitter=self._submitter,
            state_of=self._state_of,
            in_thread=self._in_thread,
            records=self._records,
            attempt=attempt,
            kind=envelope.kind,
            incarnation=envelope.incarnation,
            memo_keys=memo_keys,
            headers=delivery.headers,
            clock=self._clock,
            wakes=self._wakes,
            wait_recheck=self._wait_recheck,
            tree=RunTree(job_type.__module__),
            numbered=envelope.numbered,
            code_version=self._versions.get(job_type)
            or versions.code_version(job_type, self._build_id),
            attributes=envelope.attributes,
            replay_of=envelope.replay_of,
        )
        # A debounced run waits for its window, then runs its last input.
        envelope = await debounced_input(self._submitter.debouncer, envelope, scope)
        try:
            job = job_type.model_validate_json(self._records.payloads.open_bytes(envelope.input))
        except PayloadUnreadable as exc:
            raise MalformedPayload(f"the input cannot be read: {exc}") from None
        except ValidationError as exc:
            raise MalformedPayload(
                f"the input does not validate as {job_type.__qualname__}: {exc}"
            ) from exc
        branches.install(asyncio.get_running_loop())
        # A slot of its concurrency key and its rate limit start, or Suspend.
        admitted = await self._limits.admit(job_type, job, scope)
        started_at = self._clock.now()
        ctx = JobContext(scope)
        # A claim beyond the counted attempts follows one given back uncounted
        # (a durable wait, a drain) or one whose lease lapsed: the attempt
        # goes on rather than starts.
        began = "resumed" if delivery.claims > delivery.attempt else "started"
        if delivery.took_over:
            began = f"taken over from a lapsed lease (lapse {delivery.lapses})"
        log.info(
            "run %s (%s) attempt %d/%d %s (claim %d)",
            run_id,
            envelope.kind,
            delivery.attempt,
            delivery.max_attempts,
            began,
            delivery.claims,
            extra=extra,
        )
        try:
            result = await self._run_job(job_type, job, ctx, scope)
        except Suspend:
            await _flush(scope)
            await admitted.suspending()
            raise
        except (
            Permanent,
            EncodingError,
            CorruptMemo,
            PayloadUnreadable,
            JobFailed,
            InvalidWait,
            BadEvent,
            BadCallback,
            CallbackTimeout,
            StreamClosed,
            NonDeterministicReplay,
            InputMismatch,
            InvalidAttribute,
        ) as exc:
            # (Retrying cannot mend a value that cannot be stored, a memo
            # that does not decode, a child's outcome, which is final, a wait
            # it cannot keep, an event or a callback's completion taken that
            # is not of its type, a callback's expiry, which is recorded, a
            # write to a stream the run closed, code that no longer replays
            # its run, or a child submitted under a key used for another
            # input, or attributes no run may have: the run fails for good,
            # saying which. The job's code may catch all but the divergence.)
            await _flush(scope)
            if not isinstance(exc, Permanent):
                raise ClassifiedPermanent(exc) from exc
            raise
        except Exception as exc:
            await _flush(scope)
            if job.classify(exc) is ErrorClass.PERMANENT:
                raise ClassifiedPermanent(exc) from exc
            raise
        finally:
            await admitted.leave()
        await scope.flush_progress()
        try:
            encoded = _stored_result(envelope.kind, job_type.output_type(), result)
        except EncodingError as exc:
            raise ClassifiedPermanent(exc) from exc
        return Finished(
            envelope,
            self._records.payloads.seal(encoded),
            self._records.payloads.seal_value(scope.progress),
            started_at,
            self._clock.now(),
            attributes=dict(scope.attributes),
        )

    async def _run_job(
        self, job_type: type[Job[Any]], job: Job[Any], ctx: JobContext, scope: AttemptScope
    ) -> Any:
        """``job.run(ctx)`` as the root of the attempt's tree of tasks; returns
        its result once every task it started has ended (:func:`branches.stop`).

        Raises what the attempt ends in, however the job's code took it: a
        divergence (permanent, or a wait for a worker of the code version
        that last advanced the run, :meth:`_divergence`); else what the job
        raised (one error of a TaskGroup's group: itself); else the
        earliest wait that suspended the run, even if the job's code caught
        it or gathered it with ``return_exceptions``."""
        tree = scope.tree
        error: BaseException | None = None
        running = tree.enter()
        try:
            if job_type.is_async():
                result = await cast(Awaitable[Any], job.run(ctx))
            else:
                result = await self._in_thread(job.run, ctx)
        except asyncio.CancelledError:  # (stopped from outside: cancel, timeout, drain, lease)
            await branches.stop(tree, at_once=True)
            raise
        except BaseException as exc:
            await branches.stop(tree, at_once=False)
            error = _one_error(exc)
            if scope.diverged is None and not isinstance(error, Suspend):
                if error is exc:
                    raise  # (as the job raised it: no frame of ours added to its traceback)
                raise error from exc
        else:
            await branches.stop(tree, at_once=False)
            if scope.suspension() is None:
                await _check_history_made(scope)
        finally:
            tree.leave(running)
        if scope.diverged is not None:
            raise await self._divergence(scope) from error
        suspension = scope.suspension()
        if suspension is not None:
            raise suspension
        if error is not None:
            raise error  # (a Suspend no wait noted: none of ours)
        return result

    async def _divergence(self, scope: AttemptScope) -> BaseException:
        """What a run whose code did not replay its history ends in: a
        permanent failure, unless another version of the code than this
        worker's recorded the call it diverged at; then the run waits, given
        back uncounted, for a worker of that version, for up to
        ``version_wait`` seconds from the first worker that could not replay it."""
        diverged = scope.diverged
        assert diverged is not None
        other = diverged.recorded_by
        if other is None or other == scope.code_version or scope.diverged_at is None:
            return ClassifiedPermanent(diverged)
        now = self._clock.now()
        since = await versions.waiting_since(scope, other, scope.diverged_at, now)
        if now - since > self._version_wait:
            return ClassifiedPermanent(diverged.after_waiting(self._version_wait))
        log.warning(
            "run %s (%s): this worker's code (version %s) does not replay it: %s; "
            "given back for a worker of version %s",
            scope.run_id,
            scope.kind,
            scope.code_version,
            diverged,
            other,
            extra=log_extra(scope),
        )
        wait = Wait(JobStatus.WAITING_FOR_VERSION, versions.waiting_for(other))
        return Suspend(now + min(versions.RECHECK, self._wait_recheck), wait)

    async def _recorded(self, run_id: str, envelope: Envelope) -> OutcomeRecord | None:
        """The outcome that already answers this run, if one is recorded."""
        try:
            found = await self._records.at_outcome_key(run_id)
            content = found.content
            if isinstance(content, OutcomeRecord) and _replaced(content, envelope):
                # The outcome of the incarnation this one replays: no answer
                # for it (the replay removes it once enqueued; if it was cut
                # short, this attempt does).
                await self._records.clear_tombstone(run_id, found.etag)
                return None
            if isinstance(content, OutcomeRecord):
                key = self._records.layout.outcome(run_id)
                return answering(content, key, envelope.input_hash)
        except CorruptOutcome as exc:
            # No answer for this run, and nothing it did could be recorded
            # (the object stands in the way): fail it now, unrun.
            raise ClassifiedPermanent(exc) from exc
        swept = found.content
        if isinstance(swept, Tombstone) and swept.incarnation == envelope.incarnation:
            # This very run was swept, and is claimed again since (a dead run
            # retried): it runs again, and its outcome is to be recorded.
            await self._records.clear_tombstone(run_id, found.etag)
        return None


def _one_error(exc: BaseException) -> BaseException:
    """What a run's code ended in: ``exc``, or, for a group of errors (a
    TaskGroup's), its one error other than suspensions (or a suspension,
    when it holds nothing else)."""
    if not isinstance(exc, BaseExceptionGroup):
        return exc
    leaves = list(_leaves(exc))
    others = [leaf for leaf in leaves if not isinstance(leaf, Suspend)]
    if not others:
        return leaves[0]
    return others[0] if len(others) == 1 else exc


def _leaves(group: BaseExceptionGroup[BaseException]) -> Iterator[BaseException]:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            yield from _leaves(exc)
        else:
            yield exc


async def _check_history_made(scope: AttemptScope) -> None:
    """Once a run's code has ended, note as its divergence (``scope.diverged``)
    a call its history recorded that this attempt never made: a branch or a
    loop's last iteration removed from the code. (Runs recorded before branches
    existed are not checked, as they were not.)"""
    keys = scope.memo_keys
    if keys is None or not scope.numbered or scope.diverged is not None:
        return
    missing = sorted(
        (place, segment)
        for segment in keys
        if segment not in scope.made and (place := place_of(segment)) is not None
    )
    if not missing:
        return
    (branch, position), segment = missing[0]
    key = scope.layout.memo(scope.run_id, scope.incarnation, segment)
    field = memo_value(scope.records.payloads)
    try:
        memo = PositionedMemo.read_split(await scope.store.get_split(key, field), field)
        recorded, by = memo.call.describe(), memo.by
    except (NotFound, ValueError, PayloadUnreadable):
        recorded, by = f"a call (its memo {segment})", None
    scope.diverged_at = segment
    scope.diverged = NonDeterministicReplay(
        scope.run_id,
        scope.kind,
        position,
        recorded,
        "nothing there: the code ended without making it",
        branch=branch_name(branch),
        recorded_by=by,
    )


def _replaced(outcome: OutcomeRecord, envelope: Envelope) -> bool:
    """Whether ``outcome`` is that of the incarnation ``envelope`` replays."""
    replayed = envelope.replay_of
    return replayed is not None and outcome.incarnation == replayed != envelope.incarnation


def _stored_result(kind: str, output: Any, result: object) -> Body:
    """``result`` encoded for the outcome record, once it is known to read back
    as the job's declared ``output`` type (what awaiting a handle does): a
    job that returns a value of another type fails here, naming both, rather
    than succeed with a result no handle can read."""
    codec = codec_for_type(output)
    try:
        encoded = codec.encode_body(result)
    except (TypeError, ValueError) as exc:
        raise EncodingError(f"the job's result cannot be stored: {exc}", job=kind) from exc
    if type(result) is output:
        return encoded  # (of the declared type, as a decoded copy would show)
    try:
        codec.decode(encoded)
    except ValidationError as exc:
        expected = output.__name__ if isinstance(output, type) else str(output)
        reason = exc.errors()[0]["msg"] if exc.errors() else str(exc)
        raise EncodingError(
            f"the job returned a {type(result).__name__}, not its declared output type "
            f"{expected} ({reason})",
            job=kind,
        ) from exc
    return encoded


async def _flush(scope: AttemptScope) -> None:
    try:
        await scope.flush_progress()
    except Exception as exc:
        log.warning(
            "run %s: final progress not written: %s", scope.run_id, exc, extra=log_extra(scope)
        )

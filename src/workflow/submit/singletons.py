"""Submits of a singleton key: start, join, replace or skip its live run.

A job type with ``singleton`` set (:class:`~stepstone.job.Singleton`) and a
``concurrency_key()`` of limit 1 has at most one run of a key running at a
time, by the key's slot (:mod:`stepstone.execute.admission`), whatever the policy:
``QUEUE`` is that alone. The other policies decide at submit time, on the
key's object (``singletons/<digest>``,
:mod:`stepstone.records.singleton_runs`), changed by compare-and-swap:

- no live run: the submit's run becomes the live one and is enqueued;
- ``SKIP``: a live run is joined: the handle is the live run's, and no run
  is made;
- ``CANCEL_RUNNING``: the submit's run replaces the live one, which is then
  cancelled; the new run takes the key's slot once the old one's code has
  stopped (it releases it as it ends, or its lease lapses);
- ``SKIP_NEWEST``: the submit's run is recorded cancelled at once, never
  run, its error naming the live run (``stepstone show``: "skipped: run X
  ... was live").

A live run is one the queue still holds, not dead: the object is not told
when a run ends, so a submit that finds its live run gone clears it and
goes round again. A live run whose starter died before enqueueing it is
enqueued by the submit that finds it so.

Cost per submit: one conditional PUT when it starts the live run, plus its
enqueue and one more PUT; a GET of the object (when another process wrote
it since) and a GET of the live run's queue record when it finds one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from stepstone.errors import JobError
from stepstone.handles.handle import Answers, JobHandle
from stepstone.job import Singleton
from stepstone.limits.shared import KeptObjects, SharedObject
from stepstone.records import singleton_runs as rules
from stepstone.records.layout import fresh_run_id, limit_digest
from stepstone.records.outcome import ErrorInfo, OutcomeRecord, about_the_run
from stepstone.records.run_records import RunRecords
from stepstone.runtime.clock import Clock
from stepstone.runtime.decision import FailureKind
from stepstone.runtime.queue import LeaseQueue
from stepstone.runtime.status import JobStatus
from stepstone.submit.submission import Submission

TRIES = 4
"""Times a submit goes round when the live run it found had ended."""

_Live = rules.LiveRun | None


class Singletons:
    """Submits runs of singleton keys (see the module docstring); runs are
    enqueued through ``submit_one`` (the keyed-submit protocol)."""

    def __init__(
        self,
        *,
        records: RunRecords,
        queue: LeaseQueue,
        clock: Clock,
        answers: Answers,
        max_attempts: int,
        submit_one: Callable[[Submission], Awaitable[JobHandle[Any]]],
    ) -> None:
        self._records = records
        self._layout = records.layout
        self._queue = queue
        self._clock = clock
        self._answers = answers
        self._max_attempts = max_attempts
        self._submit_one = submit_one
        self._objects: KeptObjects[rules.LiveRun] = KeptObjects(
            lambda key: SharedObject(
                records.store, key, clock, to_fields=rules.to_fields, from_fields=rules.from_fields
            )
        )

    def live_run(self, kind: str, key: str) -> SharedObject[rules.LiveRun]:
        """This process's handle on the live run of ``key`` of job type ``kind``."""
        return self._objects(self._layout.singleton(limit_digest(kind, key)))

    async def submit(self, s: Submission, policy: Singleton, key: str) -> JobHandle[Any]:
        """Submit ``s``, of a type whose ``singleton`` is ``policy``, under the
        singleton key ``key``."""
        job_type = type(s.job)
        if job_type.concurrency_limit != 1:
            raise ValueError(
                f"job {s.kind!r}: a singleton type's concurrency_limit is 1, "
                f"not {job_type.concurrency_limit}"
            )
        live_run = self.live_run(s.kind, key)
        for _ in range(TRIES):
            handle = await self._once(s, policy, key, live_run)
            if handle is not None:
                return handle
        raise JobError(
            f"job {s.kind!r}, singleton key {key!r}: its live run kept ending as this submit "
            f"looked at it ({TRIES} times); is something cancelling its runs in a loop?"
        )

    async def _once(
        self,
        s: Submission,
        policy: Singleton,
        key: str,
        live_run: SharedObject[rules.LiveRun],
    ) -> JobHandle[Any] | None:
        """One go at ``submit``; None when the live run it found had ended."""
        run = s.run_id or fresh_run_id()
        started = await live_run.update(
            partial(
                _start,
                job=s.kind,
                key=key,
                run=run,
                data=self._records.payloads.seal_bytes(s.data),
                replacing=policy is Singleton.CANCEL_RUNNING,
            )
        )
        if started.own:
            s.run_id = run
            handle = await self._submit_one(s)
            await live_run.update(partial(_enqueued, run=run))
            if started.replaced is not None:
                await self._answers.cancel(started.replaced)
            return handle
        live = started.live
        assert live is not None
        if live.run == s.run_id:  # (a keyed run's own resubmit: the keyed protocol answers)
            return await self._submit_one(s)
        if not live.enqueued:
            await self._enqueue(s, live)
            await live_run.update(partial(_enqueued, run=live.run))
        if await self._is_live(live.run):
            if policy is Singleton.SKIP:
                return JobHandle(self._answers, live.run, s.output, newly_submitted=False)
            return await self._skipped(s, key, live.run)
        await live_run.update(partial(_ended, run=live.run))
        return None

    async def _is_live(self, run_id: str) -> bool:
        record = await self._queue.get(run_id)
        return record is not None and record.status is not JobStatus.DEAD

    async def _enqueue(self, s: Submission, live: rules.LiveRun) -> None:
        """Enqueue the live run whose starter died before it could (its input kept)."""
        assert live.input is not None
        job = type(s.job).model_validate_json(self._records.payloads.open_bytes(live.input))
        await self._submit_one(Submission.of(job, s.options, live.run, None))

    async def _skipped(self, s: Submission, key: str, live: str) -> JobHandle[Any]:
        """``SKIP_NEWEST``: ``s``'s run, recorded cancelled without running."""
        s.run_id = s.run_id or fresh_run_id()
        s.new_job(
            self._max_attempts, self._records.payloads
        )  # (its envelope: an incarnation, what the record keeps)
        envelope = s.envelope
        assert envelope is not None
        now = self._clock.now()
        why = f"skipped: run {live} of its singleton key {key!r} was live"
        record = OutcomeRecord(
            run_id=s.run_id,
            kind=s.kind,
            status=JobStatus.CANCELLED,
            input_hash=s.digest,
            incarnation=envelope.incarnation,
            attempts=0,
            lapses=0,
            finished_at=now,
            error=ErrorInfo(FailureKind.CANCELLED, why),
            submitted_at=now,
            **about_the_run(envelope),
        )
        stands = await self._records.record_outcome(record) or record
        return JobHandle(
            self._answers,
            s.run_id,
            s.output,
            newly_submitted=False,
            outcome=stands.typed(s.output),
            input_hash=s.digest,
        )


def _start(
    state: rules.LiveRun | None,
    now: float,
    *,
    job: str,
    key: str,
    run: str,
    data: bytes,
    replacing: bool,
) -> tuple[rules.LiveRun | None, rules.Started]:
    return rules.start(state, job=job, key=key, run=run, data=data, replacing=replacing, now=now)


def _enqueued(state: _Live, now: float, *, run: str) -> tuple[_Live, None]:
    return rules.enqueued(state, run=run)


def _ended(state: _Live, now: float, *, run: str) -> tuple[_Live, None]:
    return rules.ended(state, run=run)

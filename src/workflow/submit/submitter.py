"""The submit protocol: one run per idempotency key, across processes and restarts.

A job with an idempotency key runs under the SHA-256 of its key. Submitting
it again answers from what is already there, in this order:

1. An outcome record exists: the run finished; its outcome is the answer
   (if the input hash matches; else ``InputMismatch``).
2. Enqueueing under the run id creates a record: a new run. Its outcome is
   looked for once more, because the previous run of the key may have ended
   between step 1 and the enqueue (its ack removed the queue record, so ours
   was created): then that outcome is the answer, and the record just
   written is nobody's run: it is taken back (``LeaseQueue.withdraw``, or
   cancelled if a worker claimed it meanwhile; that worker looks for the
   outcome first and runs nothing, see :mod:`stepstone.execute.executor`).
3. The queue already holds a live run of the id: join it (same input hash),
   or refuse (``InputMismatch``).
4. The live run ended between the enqueue and the look: its outcome is the answer.

Step 2's look alone would do: a run that ended before the create has its
outcome written by then. Step 1 is there to answer a resubmission of a
finished run with one read, and no create to take back. On a store billed
per request (``ObjectStore.remote``: S3) a process skips it for a new key,
so a fresh keyed submit costs one GET, not two, and one round trip less. It
looks first for a run it saw end (``RunRecords.seen_ended``: its worker
recorded the outcome, or it read it), and for every key while one keyed
submit in ``1 / LOOK_FIRST_SHARE`` of late met a finished run: a
resubmission met that way costs a create and a delete beside its GET (on
S3 a PUT costs as much as about twelve GETs). A local store always looks
first: a look there costs little and a create taken back a flush.

A job without a key gets a fresh random run id and is simply enqueued.

Submits hold the event loop at most about ``TURN_EVERY`` without a turn.
On files a submit's writes are usually made on the caller's thread, without
waiting, and a coroutine that never waits never lets anything else run: a
loop of awaited submits would hold the loop until its last submit, the jobs
it handed to this process's worker, lease renewals and every other task
waiting behind it. So the submit that ends a stretch of ``TURN_EVERY``
during which the loop did not run gives it one turn before it returns
(``_Turns``). Not every submit: on a fast store a turn costs about what a
submit does (on the memory store a turn per submit cost a loop of submits
17 to 46% of its throughput, docs/performance.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from stepstone.errors import CorruptOutcome, EncodingError, InputMismatch, JobError
from stepstone.handles.handle import Answers, JobHandle
from stepstone.job import Job
from stepstone.records.codec import canonical_input
from stepstone.records.envelope import Envelope, incarnation_of, input_hash
from stepstone.records.layout import fresh_incarnation, fresh_run_id, run_id_for_key
from stepstone.records.outcome import Outcome, OutcomeRecord
from stepstone.records.run_records import RunRecords
from stepstone.runtime.errors import MalformedPayload
from stepstone.runtime.queue import Delivery, Enqueued, LeaseQueue, NewJob, all_or_first_error
from stepstone.runtime.worker import Worker

log = logging.getLogger("stepstone")

Out = TypeVar("Out")
T = TypeVar("T")

RESERVED_HEADER_PREFIX = "stepstone."
CREATED_HERE = 10_000
"""Keyed runs this process created and checked (step 2) that its worker has
not claimed yet, kept so that worker need not look for an outcome again."""
SUBMIT_RETRIES = 3
"""Times a submit goes round again when a run vanished between two looks."""
LOOK_FIRST_SHARE = 1 / 16
"""On a remote store, keyed submits look for an outcome before they create
a record while at least this share of late met a finished run (see the
module docstring)."""
RECENT_WEIGHT = 1 / 32
"""How much each keyed submit moves that share (a moving average over
about the last 32)."""
TURN_EVERY = 0.001
"""Seconds submits may hold the event loop without a turn (see the module
docstring)."""


class _Turns:
    """Gives the event loop a turn once submits have held it ``TURN_EVERY``
    (see the module docstring). A stretch starts with a submit while the
    loop has run since the last one; a callback it schedules ends it when
    the loop runs again."""

    __slots__ = ("_loop", "_since")

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._since = 0.0  # when the stretch on self._loop began

    def begin(self) -> None:
        """A submit starts."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop, self._since = loop, loop.time()
            loop.call_soon(self._ran, loop)

    def _ran(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._loop is loop:
            self._loop = None

    async def end(self) -> None:
        """A submit is done: give the loop a turn if the stretch is long enough."""
        loop = self._loop
        if loop is not None and loop.time() - self._since >= TURN_EVERY:
            await asyncio.sleep(0)


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


@dataclass(slots=True)
class _Submission:
    """One job on its way into the queue: what ``submit`` works out once,
    before any look or write, and the envelope of its latest enqueue."""

    job: Job[Any]
    options: SubmitOptions
    name: str
    data: bytes
    digest: str
    run_id: str | None
    """The keyed run's id (None: a fresh id at each enqueue)."""
    parent: str | None
    output: Any
    headers: dict[str, str]
    run_at: float | None
    envelope: Envelope | None = None

    @classmethod
    def of(
        cls, job: Job[Any], options: SubmitOptions | None, run_id: str | None, parent: str | None
    ) -> _Submission:
        """Check and encode ``job``; raises before anything is written."""
        if not isinstance(job, Job):
            raise TypeError(f"submit() takes a Job instance, not {type(job).__name__}")
        options = options or SubmitOptions()
        name = job.NAME
        try:
            data = canonical_input(job)
        except Exception as exc:
            raise EncodingError(f"the input cannot be encoded: {exc}", job=name) from exc
        if run_id is None:
            key = job.idempotency_key()
            if key is not None and not isinstance(key, str):
                raise TypeError(
                    f"job {name!r} ({type(job).__qualname__}): idempotency_key() returned "
                    f"a {type(key).__name__}, {key!r}; it must return a str or None"
                )
            if key is not None:
                run_id = run_id_for_key(key)
        return cls(
            job=job,
            options=options,
            name=name,
            data=data,
            digest=input_hash(name, data),
            run_id=run_id,
            parent=parent,
            output=type(job).output_type(),
            headers=_headers(options),
            run_at=_run_at(options),
        )

    @property
    def keyed(self) -> bool:
        return self.run_id is not None

    def new_job_args(self, default_max_attempts: int) -> dict[str, Any]:
        """``enqueue``'s arguments for a new incarnation of this run."""
        self.envelope = Envelope(
            self.name, self.data, fresh_incarnation(), self.digest, self.keyed, self.parent
        )
        args: dict[str, Any] = {
            "payload": self.envelope.encode(),
            "kind": self.name,
            "id": self.run_id or fresh_run_id(),
            "run_at": self.run_at,
            "max_attempts": self.options.max_attempts
            or type(self.job).max_attempts
            or default_max_attempts,
            "headers": self.headers,
        }
        if self.options.priority is not None:
            args["priority"] = self.options.priority
        return args

    def new_job(self, default_max_attempts: int) -> NewJob:
        return NewJob(**self.new_job_args(default_max_attempts))


class _Unread:
    """The outcome was not read yet (``_after`` reads it)."""


UNREAD = _Unread()


async def _settled(answer: Awaitable[T]) -> T | BaseException:
    """``answer``'s value, or the exception it raised (a job's answer may be an error)."""
    try:
        return await answer
    except Exception as exc:
        return exc


class Submitter:
    """Submits jobs to ``queue``, answering duplicates from ``records``.

    ``answers`` is what the handles it returns ask (the runner);
    ``max_attempts`` the default for job types that set none. A job submitted
    while ``worker`` (this process's) is ready for it goes straight to it:
    its record is written claimed (``LeaseQueue.enqueue_claimed``), one write
    where an enqueue and a claim take two, and no trip through the queue.
    """

    def __init__(
        self,
        *,
        queue: LeaseQueue,
        records: RunRecords,
        answers: Answers,
        max_attempts: int,
        worker: Worker | None = None,
    ) -> None:
        self._queue = queue
        self._records = records
        self._answers = answers
        self._max_attempts = max_attempts
        self._worker = worker
        self._created_here: OrderedDict[str, str] = OrderedDict()
        self._finished_share = 0.0
        """The share of this process's keyed submits of late that met a
        finished run (a moving average, ``RECENT_WEIGHT``)."""
        self._turns = _Turns()

    def looks_first(self, run_id: str) -> bool:
        """Whether a keyed submit of ``run_id`` looks for an outcome before it
        creates the run's record (step 1 of the module docstring): always on
        a local store; on a remote one when this process saw the run end, or
        while resubmissions of finished runs are common enough of late
        (``LOOK_FIRST_SHARE``) that the creates taken back would cost more
        than the looks saved."""
        return (
            not self._records.store.remote
            or self._records.seen_ended(run_id)
            or self._finished_share >= LOOK_FIRST_SHARE
        )

    def _met(self, finished: bool) -> None:
        """Count a keyed submit: did it meet a finished run?"""
        self._finished_share += (float(finished) - self._finished_share) * RECENT_WEIGHT

    def created_here(self, run_id: str, incarnation: str) -> bool:
        """Whether this process created this incarnation of a keyed run after
        checking that no earlier run of its key had ended (so its first claim
        need not look for an outcome). Answers True once."""
        return self._created_here.pop(run_id, None) == incarnation

    async def submit(
        self,
        job: Job[Out],
        options: SubmitOptions | None = None,
        *,
        run_id: str | None = None,
        parent: str | None = None,
    ) -> JobHandle[Out]:
        """Submit ``job``. ``run_id`` (a child's or a schedule tick's derived
        id) is the id it runs under, keyed like an idempotency key makes it,
        in place of the job's own key; ``parent`` names the run that submits
        it as a child, to wake when it ends. See the module docstring."""
        self._turns.begin()
        handle = await self._submit(_Submission.of(job, options, run_id, parent))
        await self._turns.end()
        return handle

    async def submit_many(
        self, jobs: Sequence[Job[Any]], options: SubmitOptions | None = None
    ) -> list[JobHandle[Any]]:
        """Submit every job of ``jobs`` (each with ``options``), as ``submit``
        would one at a time, and return their handles in order. Every input is
        encoded before anything is written; the keyed jobs' outcomes are read
        together (``get_many``), before the enqueue (see ``looks_first``) and
        after it, and the jobs to enqueue go to the queue in one
        ``enqueue_many`` (one flush on files).
        Each job is answered as ``submit`` answers it; then the first error met
        (say InputMismatch for one job) is raised, the others submitted."""
        subs = [_Submission.of(job, options, None, None) for job in jobs]
        answers: list[JobHandle[Any] | BaseException | None] = [None] * len(subs)
        keyed = [i for i, s in enumerate(subs) if s.run_id and self.looks_first(s.run_id)]
        for i, found in zip(keyed, await self._outcomes(subs, keyed), strict=True):
            answers[i] = self._answer_or_none(subs[i], found)
        fresh = [i for i, answer in enumerate(answers) if answer is None]
        enqueued = dict(
            zip(
                fresh,
                await self._queue.enqueue_many(
                    [subs[i].new_job(self._max_attempts) for i in fresh]
                ),
                strict=True,
            )
        )
        created = [i for i in fresh if enqueued[i].created and subs[i].keyed]
        looked = dict(zip(created, await self._outcomes(subs, created), strict=True))
        ended: list[tuple[int, OutcomeRecord | CorruptOutcome]] = []
        for i in fresh:
            if not enqueued[i].created:
                continue
            found = looked.get(i)  # (answered from what was read: nothing to wait for)
            if found is None:
                answers[i] = await _settled(self._after(subs[i], enqueued[i], found))
            else:
                ended.append((i, found))
        # Records made for runs found finished, or whose outcome does not read,
        # are taken back together (a request each).
        settled = await asyncio.gather(
            *(_settled(self._after(subs[i], enqueued[i], found)) for i, found in ended)
        )
        for (i, _), answer in zip(ended, settled, strict=True):
            answers[i] = answer
        # Duplicates of a live run join it (or meet its end): one look each.
        joining = [i for i in fresh if not enqueued[i].created]
        joined = await asyncio.gather(
            *(_settled(self._after(subs[i], enqueued[i])) for i in joining)
        )
        for i, answer in zip(joining, joined, strict=True):
            answers[i] = answer
        # A run that ended between two looks: go round again, as submit does.
        again = [i for i, answer in enumerate(answers) if answer is None]
        redone = await asyncio.gather(
            *(_settled(self._submit(subs[i], tries=SUBMIT_RETRIES)) for i in again)
        )
        for i, answer in zip(again, redone, strict=True):
            answers[i] = answer
        return all_or_first_error(answers)

    async def _outcomes(
        self, subs: list[_Submission], indexes: list[int]
    ) -> list[OutcomeRecord | CorruptOutcome | None]:
        run_ids = [subs[i].run_id for i in indexes]
        return await self._records.outcomes([r for r in run_ids if r is not None])

    def _answer_or_none(
        self, s: _Submission, found: OutcomeRecord | CorruptOutcome | None
    ) -> JobHandle[Any] | BaseException | None:
        """What a keyed job's outcome, read in bulk, answers: a handle, an
        error (the job's answer is that error), or None (enqueue it)."""
        if found is None or isinstance(found, CorruptOutcome):
            return found
        self._met(True)
        try:
            return self._answer_from(found, s.digest, s.name, s.output)
        except InputMismatch as exc:
            return exc

    async def _submit(self, s: _Submission, *, tries: int = SUBMIT_RETRIES + 1) -> JobHandle[Any]:
        for again in range(tries):
            first = again or (s.run_id is not None and self.looks_first(s.run_id))
            handle = await self._cached(s) if first else None
            if handle is None:
                handle = await self._enqueue(s)
            if handle is not None:
                return handle
        raise JobError(
            f"job {s.name!r} ({s.run_id}): the queue refused a new run but holds none and "
            "no outcome is recorded; is another process purging it right now?"
        )

    async def _enqueue(self, s: _Submission) -> JobHandle[Any] | None:
        """Enqueue a new incarnation of ``s`` and answer as ``_after`` does;
        claimed for this process's worker if it is ready for the job."""
        job = s.new_job(self._max_attempts)
        worker = self._worker
        if worker is None or job.run_at is not None or not worker.ready_for(job.kind):
            return await self._after(s, (await self._queue.enqueue_many([job]))[0])
        enqueued, delivery = await self._queue.enqueue_claimed(job, lease=worker.lease)
        if delivery is None:
            return await self._after(s, enqueued)
        try:
            handle = await self._after(s, enqueued)
        except (InputMismatch, CorruptOutcome):
            raise  # (the record just made was taken back: nothing to run)
        except BaseException:
            await self._hand_over(worker, delivery)
            raise
        if handle is not None and not handle.newly_submitted:
            return handle  # (answered by the previous run: the record was taken back)
        await self._hand_over(worker, delivery)
        return handle

    async def _hand_over(self, worker: Worker, delivery: Delivery) -> None:
        """Run ``delivery`` in ``worker``, or give it back to the queue if the
        worker stopped being ready meanwhile (a release; if that fails, the
        lease lapses and any worker claims the job)."""
        if worker.take(delivery):
            return
        try:
            await self._queue.release(delivery)
        except Exception as exc:
            log.warning(
                "job %s: giving a claim back failed (%s); it runs once its lease lapses",
                delivery.id,
                exc,
                extra={"job_id": delivery.id},
            )

    async def _cached(self, s: _Submission) -> JobHandle[Any] | None:
        """A keyed run's recorded outcome, as the answer; None to enqueue."""
        if s.run_id is None:
            return None
        cached = await self._records.outcome(s.run_id)
        if cached is None:
            return None
        self._met(True)
        return self._answer_from(cached, s.digest, s.name, s.output)

    async def _after(
        self,
        s: _Submission,
        enqueued: Enqueued,
        looked: OutcomeRecord | CorruptOutcome | _Unread | None = UNREAD,
    ) -> JobHandle[Any] | None:
        """The answer once the queue said what the enqueue of ``s`` did; None
        when the run it met ended meanwhile without an outcome to show yet
        (go round again). ``looked``: the outcome, already read after the
        enqueue (``submit_many`` reads them together)."""
        run_id, envelope = enqueued.id, s.envelope
        assert envelope is not None
        if enqueued.created:
            if s.keyed:
                try:
                    found = (
                        await self._records.outcome(run_id)
                        if isinstance(looked, _Unread)
                        else looked
                    )
                    if isinstance(found, CorruptOutcome):
                        raise found
                except CorruptOutcome:
                    await self._take_back(s, enqueued)  # (the key has no answer to give)
                    raise
                cached = found
                if cached is not None and cached.incarnation != envelope.incarnation:
                    # The previous run of the key ended before the create (its
                    # ack let the create happen): its outcome is the answer,
                    # and the record just made is nobody's run.
                    self._met(True)
                    await self._take_back(s, enqueued)
                    return self._answer_from(cached, s.digest, s.name, s.output)
                self._met(False)
                self._created_here[run_id] = envelope.incarnation
                if len(self._created_here) > CREATED_HERE:
                    self._created_here.popitem(last=False)
            log.debug(
                "job %s (%s) submitted",
                run_id,
                s.name,
                extra={"job_id": run_id, "job_name": s.name},
            )
            return JobHandle(
                self._answers,
                run_id,
                s.output,
                newly_submitted=True,
                input_hash=s.digest,
                kind=s.name,
            )

        # A live run has this id: join it, if it is the same input.
        record = await self._queue.get(run_id)
        if record is not None:
            try:
                theirs = Envelope.decode(record.payload).input_hash
            except MalformedPayload:
                theirs = None
            if theirs != s.digest:
                raise InputMismatch(run_id, s.name)
            return JobHandle(
                self._answers, run_id, s.output, newly_submitted=False, input_hash=s.digest
            )
        # It finished between our two looks: its outcome is the answer.
        cached = await self._records.outcome(run_id)
        if cached is not None:
            return self._answer_from(cached, s.digest, s.name, s.output)
        return None

    async def _take_back(self, s: _Submission, enqueued: Enqueued) -> None:
        """Remove the record ``s`` just made, nobody's run: withdrawn if
        unchanged, else cancelled if it still holds this incarnation (a worker
        claimed it meanwhile), never a record of the key made since. If that
        fails, the worker holding it finds the outcome and runs nothing (a
        keyed run not checked here is looked up before it runs)."""
        run_id = enqueued.id
        assert s.envelope is not None  # (set by its new_job)
        try:
            if await self._queue.withdraw(enqueued):
                return
            record = await self._queue.get(run_id)
            if record is not None and incarnation_of(record.payload) == s.envelope.incarnation:
                await self._queue.cancel(run_id)
        except Exception as exc:
            log.warning(
                "job %s: taking back a record made for a finished run failed (%s); a worker"
                " settles it without running",
                run_id,
                exc,
                extra={"job_id": run_id},
            )

    def _answer_from(
        self, record: OutcomeRecord, digest: str, name: str, output: Any
    ) -> JobHandle[Out]:
        if record.input_hash != digest:
            raise InputMismatch(record.run_id, name)
        outcome: Outcome[Out] = record.typed(output)
        return JobHandle(
            self._answers,
            record.run_id,
            output,
            newly_submitted=False,
            outcome=outcome,
            input_hash=digest,
        )


def _headers(options: SubmitOptions) -> dict[str, str]:
    headers = dict(options.headers)
    for header in headers:
        if header.startswith(RESERVED_HEADER_PREFIX):
            raise ValueError(
                f"header {header!r}: the {RESERVED_HEADER_PREFIX!r} prefix is reserved"
            )
    return headers


def _run_at(options: SubmitOptions) -> float | None:
    if options.run_at is None:
        return None
    if options.run_at.tzinfo is None:
        raise ValueError("SubmitOptions.run_at must be an aware datetime (with a tzinfo)")
    return options.run_at.timestamp()

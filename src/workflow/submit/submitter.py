"""The submit protocol: one run per idempotency key, across processes and restarts.

A job with an idempotency key runs under the SHA-256 of its key. Submitting
it again answers from what is already there, in this order:

1. An outcome record exists: the run finished; its outcome is the answer
   (if the input hash matches; else ``InputMismatch``).
2. Enqueueing under the run id creates a record: a new run. Its outcome is
   looked for once more, because the previous run of the key may have ended
   between step 1 and the enqueue (its ack removed the queue record, so ours
   was created): then that outcome is the answer, and the record just
   written is nobody's run: it is taken back (``Withdrawing.withdraw``, or
   cancelled if a worker claimed it meanwhile; that worker looks for the
   outcome first and runs nothing, see :mod:`stepstone.execute.attempts`).
3. The queue already holds a live run of the id: join it (same input hash),
   or refuse (``InputMismatch``).
4. The live run ended between the enqueue and the look: its outcome is the answer.

Step 2's look alone would do: a run that ended before the create has its
outcome written by then. Step 1 is there to answer a resubmission of a
finished run with one read, and no create to take back; when a submit takes
it is :mod:`stepstone.submit.look_first`'s rule.

A job without a key gets a fresh random run id and is simply enqueued.

The other parts of a submit have modules of their own: the submission
checked and encoded (:mod:`stepstone.submit.submission`), the hand-off to
this process's worker (:mod:`stepstone.submit.hand_off`), yields to the event loop
(:mod:`stepstone.submit.loop_yields`), and a batch (:mod:`stepstone.submit.many`).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, TypeVar

from stepstone.errors import CorruptOutcome, InputMismatch, JobCancelled, JobError
from stepstone.handles.handle import Answers, JobHandle
from stepstone.job import Job, Singleton
from stepstone.records.attributes import drop_entries, write_entries
from stepstone.records.envelope import Envelope, incarnation_of
from stepstone.records.family import Family
from stepstone.records.outcome import Outcome, OutcomeRecord
from stepstone.records.run_records import RunRecords
from stepstone.runtime.capabilities import Withdrawing
from stepstone.runtime.clock import Clock
from stepstone.runtime.decision import FailureKind
from stepstone.runtime.errors import MalformedPayload
from stepstone.runtime.queue import Enqueued, LeaseQueue, NewJob
from stepstone.runtime.status import JobStatus
from stepstone.submit.created_here import CreatedHere
from stepstone.submit.debouncing import Debouncer
from stepstone.submit.hand_off import HandOff
from stepstone.submit.look_first import LookFirst
from stepstone.submit.loop_yields import LoopYields
from stepstone.submit.options import SubmitOptions
from stepstone.submit.singletons import Singletons
from stepstone.submit.submission import Submission

log = logging.getLogger("stepstone")

Out = TypeVar("Out")

CHILDREN_REMEMBERED = 10_000
"""Children whose record under their parent this process wrote, remembered
(the newest), so a parent's replay does not write them again."""

SUBMIT_RETRIES = 3
"""Times a submit goes round again when a run vanished between two looks."""


class _Unread:
    """The outcome was not read yet (``after`` reads it)."""


UNREAD = _Unread()


class Submitter:
    """Submits jobs to ``queue``, answering duplicates from ``records``.

    ``answers`` is what the handles it returns ask; ``max_attempts`` the
    default for job types that set none; ``clock`` times debounced submits
    (:mod:`stepstone.submit.debouncing`); ``hand_off`` (None: no worker runs
    here) gives a job straight to this process's worker when it is ready
    for it; ``created_here`` hears of each keyed run created and checked.
    """

    def __init__(
        self,
        *,
        queue: LeaseQueue,
        records: RunRecords,
        answers: Answers,
        max_attempts: int,
        created_here: CreatedHere,
        clock: Clock,
        hand_off: HandOff | None = None,
    ) -> None:
        self.queue = queue
        self.records = records
        self.max_attempts = max_attempts
        self.look_first = LookFirst(records)
        self.family = Family(records.store, records.layout)
        self._children_recorded: OrderedDict[tuple[str, str], None] = OrderedDict()
        """(parent, child) pairs this process has recorded (the newest)."""
        self._answers = answers
        self._created_here = created_here
        self._hand_off = hand_off
        self._yields = LoopYields()
        self.debouncer = Debouncer(
            store=records.store,
            layout=records.layout,
            payloads=records.payloads,
            clock=clock,
            answers=answers,
            submit_one=self.submit_one,
        )
        self.singletons = Singletons(
            records=records,
            queue=queue,
            clock=clock,
            answers=answers,
            max_attempts=max_attempts,
            submit_one=self.submit_one,
        )

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
        self._yields.begin()
        s = Submission.of(job, options, run_id, parent)
        policy, key = type(job).singleton, None
        if policy not in (None, Singleton.QUEUE):
            key = job.concurrency_key()
        if s.options.debounce is not None:
            handle = await self.debouncer.submit(s)
        elif policy is not None and key is not None:
            handle = await self.singletons.submit(s, policy, key)
        else:
            handle = await self.submit_one(s)
        await self._yields.end()
        if parent is not None and handle.newly_submitted:
            await self._unless_parent_cancelled(parent, handle)
        return handle

    async def _unless_parent_cancelled(self, parent: str, child: JobHandle[Any]) -> None:
        """Cancel ``child``, just created, and raise JobCancelled, if its
        parent was cancelled meanwhile: the parent's cancel may have listed
        its children before this one was recorded (it records the parent's
        outcome first, so one of the two sees the other)."""
        recorded = await self.records.outcome(parent)
        if recorded is None or recorded.status is not JobStatus.CANCELLED:
            return
        await self._answers.cancel(child.id)
        raise JobCancelled(
            parent, FailureKind.CANCELLED, f"the run was cancelled; its new child {child.id} too"
        )

    async def submit_one(self, s: Submission, *, tries: int = SUBMIT_RETRIES + 1) -> JobHandle[Any]:
        """Submit ``s`` as the module docstring says, going round again (at
        most ``tries`` times in all) while its run vanishes between two looks."""
        for again in range(tries):
            first = again or (s.run_id is not None and self.look_first.wanted(s.run_id))
            handle = await self._recorded_answer(s) if first else None
            if handle is None:
                handle = await self._enqueue(s)
            if handle is not None:
                return handle
        raise JobError(
            f"job {s.kind!r} ({s.run_id}): the queue refused a new run but holds none and "
            "no outcome is recorded; is another process purging it right now?"
        )

    async def _enqueue(self, s: Submission) -> JobHandle[Any] | None:
        """Enqueue a new incarnation of ``s`` and answer as ``after`` does;
        handed to this process's worker if it is ready for the job. A
        child is recorded under its parent first (a cancel of the parent
        finds it), once per process."""
        if s.parent is not None and s.run_id is not None:
            pair = (s.parent, s.run_id)
            if pair not in self._children_recorded:
                await self.family.add_child(s.parent, s.run_id)
                self._children_recorded[pair] = None
                if len(self._children_recorded) > CHILDREN_REMEMBERED:
                    self._children_recorded.popitem(last=False)
        job = s.new_job(self.max_attempts, self.records.payloads)
        await self.index([s], [job])
        if self._hand_off is None:
            return await self.after(s, (await self.queue.enqueue_many([job]))[0])
        enqueued, delivery = await self._hand_off.enqueue(job)
        if delivery is None:
            return await self.after(s, enqueued)
        try:
            handle = await self.after(s, enqueued)
        except (InputMismatch, CorruptOutcome):
            raise  # (the record just made was taken back: nothing to run)
        except BaseException:
            await self._hand_off.hand_over(delivery)
            raise
        if handle is not None and not handle.newly_submitted:
            return handle  # (answered by the previous run: the record was taken back)
        await self._hand_off.hand_over(delivery)
        return handle

    async def _recorded_answer(self, s: Submission) -> JobHandle[Any] | None:
        """A keyed run's recorded outcome, as the answer; None to enqueue."""
        if s.run_id is None:
            return None
        recorded = await self.records.outcome(s.run_id)
        if recorded is None:
            return None
        self.look_first.met(True)
        return self.answer_from(recorded, s)

    async def index(self, subs: Sequence[Submission], jobs: Sequence[NewJob]) -> None:
        """Write the index entries of the runs ``jobs`` would start, before
        they are enqueued: a run that exists is found by its attributes,
        whatever crash follows (:mod:`stepstone.records.attributes`)."""
        await write_entries(
            self.records.store,
            self.records.layout,
            (
                (job.id, s.envelope.incarnation, s.attributes)
                for s, job in zip(subs, jobs, strict=True)
                if s.attributes and s.envelope is not None and job.id is not None
            ),
        )

    async def after(
        self,
        s: Submission,
        enqueued: Enqueued,
        looked: OutcomeRecord | CorruptOutcome | _Unread | None = UNREAD,
    ) -> JobHandle[Any] | None:
        """The answer once the queue said what the enqueue of ``s`` did; None
        when the run it met ended meanwhile without an outcome to show yet
        (go round again). ``looked``: the outcome, already read after the
        enqueue (a batch reads them together). An answer that is no new run
        takes back the index entries written for one."""
        if not s.attributes:
            return await self._after(s, enqueued, looked)
        try:
            handle = await self._after(s, enqueued, looked)
        except (InputMismatch, CorruptOutcome):
            await self._unindex(s, enqueued)  # (nothing made was kept: see _take_back)
            raise
        except Exception:
            if not enqueued.created:  # (else the run may stand: its entries too)
                await self._unindex(s, enqueued)
            raise
        if handle is None or not handle.newly_submitted:
            await self._unindex(s, enqueued)
        return handle

    async def _unindex(self, s: Submission, enqueued: Enqueued) -> None:
        """Delete the index entries written for ``s``'s incarnation, which
        started no run (else a listing meets them, and leaves them out)."""
        assert s.envelope is not None
        try:
            await drop_entries(
                self.records.store,
                self.records.layout,
                enqueued.id,
                s.envelope.incarnation,
                s.attributes.items(),
            )
        except Exception as exc:
            log.warning(
                "run %s: the index entries of a submit that joined it were not removed (%s);"
                " listings leave them out",
                enqueued.id,
                exc,
                extra={"run_id": enqueued.id},
            )

    async def _after(
        self,
        s: Submission,
        enqueued: Enqueued,
        looked: OutcomeRecord | CorruptOutcome | _Unread | None,
    ) -> JobHandle[Any] | None:
        run_id, envelope = enqueued.id, s.envelope
        assert envelope is not None
        if enqueued.created:
            if s.keyed:
                try:
                    found = (
                        await self.records.outcome(run_id)
                        if isinstance(looked, _Unread)
                        else looked
                    )
                    if isinstance(found, CorruptOutcome):
                        raise found
                except CorruptOutcome:
                    await self._take_back(s, enqueued)  # (the key has no answer to give)
                    raise
                if found is not None and found.incarnation != envelope.incarnation:
                    # The previous run of the key ended before the create (its
                    # ack let the create happen): its outcome is the answer,
                    # and the record just made is nobody's run.
                    self.look_first.met(True)
                    await self._take_back(s, enqueued)
                    return self.answer_from(found, s)
                self.look_first.met(False)
                self._created_here.add(run_id, envelope.incarnation)
            log.debug(
                "run %s (%s) submitted",
                run_id,
                s.kind,
                extra={"run_id": run_id, "kind": s.kind},
            )
            return JobHandle(
                self._answers,
                run_id,
                s.output,
                newly_submitted=True,
                input_hash=s.checked_hash,
                kind=s.kind,
            )

        # A live run has this id: join it, if it is the same input.
        record = await self.queue.get(run_id)
        if record is not None:
            try:
                theirs: Envelope | None = Envelope.decode(record.payload)
            except MalformedPayload:
                theirs = None
            if theirs is None or (theirs.input_hash != s.digest and not s.debounced):
                raise InputMismatch(run_id, s.kind)
            if s.parent is not None and theirs.parent != s.parent:
                # A parent joining a child another submitted: the child's end
                # must wake it too (before the parent looks for its outcome).
                await self.family.add_waiter(run_id, s.parent)
            return JobHandle(
                self._answers, run_id, s.output, newly_submitted=False, input_hash=s.checked_hash
            )
        # It finished between our two looks: its outcome is the answer.
        recorded = await self.records.outcome(run_id)
        if recorded is not None:
            return self.answer_from(recorded, s)
        return None

    async def _take_back(self, s: Submission, enqueued: Enqueued) -> None:
        """Remove the record ``s`` just made, nobody's run: withdrawn if
        unchanged, else cancelled if it still holds this incarnation (a worker
        claimed it meanwhile), never a record of the key made since. If that
        fails, the worker holding it finds the outcome and runs nothing (a
        keyed run not checked here is looked up before it runs)."""
        run_id = enqueued.id
        assert s.envelope is not None  # (set by its new_job)
        try:
            if isinstance(self.queue, Withdrawing) and await self.queue.withdraw(enqueued):
                return
            record = await self.queue.get(run_id)
            if record is not None and incarnation_of(record.payload) == s.envelope.incarnation:
                await self.queue.cancel(run_id)
        except Exception as exc:
            log.warning(
                "run %s: taking back a record made for a finished run failed (%s); a worker"
                " settles it without running",
                run_id,
                exc,
                extra={"run_id": run_id},
            )

    def answer_from(self, record: OutcomeRecord, s: Submission) -> JobHandle[Any]:
        """The handle a recorded outcome answers ``s`` with; InputMismatch when
        it records a run of another input."""
        if record.input_hash != s.digest and not s.debounced:
            raise InputMismatch(record.run_id, s.kind)
        outcome: Outcome[Any] = record.typed(s.output, self.records.payloads)
        return JobHandle(
            self._answers,
            record.run_id,
            s.output,
            newly_submitted=False,
            outcome=outcome,
            input_hash=s.checked_hash,
        )

    async def outcomes(
        self, subs: Sequence[Submission]
    ) -> list[OutcomeRecord | CorruptOutcome | None]:
        """The outcome records of keyed submissions, read together."""
        return await self.records.outcomes([s.run_id for s in subs if s.run_id is not None])

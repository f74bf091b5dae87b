"""The submit protocol: one run per idempotency key, across processes and restarts.

A job with an idempotency key runs under the SHA-256 of its key. Submitting
it again answers from what is already there, in this order:

1. An outcome record exists: the run finished; its outcome is the answer
   (if the input hash matches; else ``InputMismatch``).
2. Enqueueing under the run id creates a record: a new run. Its outcome is
   looked for once more, because the previous run of the key may have ended
   between step 1 and the enqueue (its ack removed the queue record, so ours
   was created): then that outcome is the answer, and the record just
   written is settled without running (see :mod:`stepstone.executor`).
3. The queue already holds a live run of the id: join it (same input hash),
   or refuse (``InputMismatch``).
4. The live run ended between the enqueue and the look: its outcome is the answer.

A job without a key gets a fresh random run id and is simply enqueued.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from stepstone.runtime.errors import MalformedPayload
from stepstone.runtime.queue import LeaseQueue

from .codec import canonical_input
from .envelope import Envelope, input_hash
from .errors import EncodingError, InputMismatch, JobError
from .handle import Answers, JobHandle
from .job import Job
from .layout import fresh_incarnation, fresh_run_id, run_id_for_key
from .outcome import Outcome, OutcomeRecord
from .records import RunRecords

log = logging.getLogger("stepstone")

Out = TypeVar("Out")

RESERVED_HEADER_PREFIX = "stepstone."
CREATED_HERE = 10_000
"""Keyed runs this process created and checked (step 2) that its worker has
not claimed yet, kept so that worker need not look for an outcome again."""
SUBMIT_RETRIES = 3
"""Times a submit goes round again when a run vanished between two looks."""


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


class Submitter:
    """Submits jobs to ``queue``, answering duplicates from ``records``.

    ``answers`` is what the handles it returns ask (the runner);
    ``max_attempts`` the default for job types that set none.
    """

    def __init__(
        self,
        *,
        queue: LeaseQueue,
        records: RunRecords,
        answers: Answers,
        max_attempts: int,
    ) -> None:
        self._queue = queue
        self._records = records
        self._answers = answers
        self._max_attempts = max_attempts
        self._created_here: OrderedDict[str, str] = OrderedDict()

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
        if not isinstance(job, Job):
            raise TypeError(f"submit() takes a Job instance, not {type(job).__name__}")
        options = options or SubmitOptions()
        name = job.NAME
        try:
            data = canonical_input(job)
        except Exception as exc:
            raise EncodingError(f"the input cannot be encoded: {exc}", job=name) from exc
        digest = input_hash(name, data)
        if run_id is None:
            key = job.idempotency_key()
            if key is not None and not isinstance(key, str):
                raise TypeError(
                    f"job {name!r} ({type(job).__qualname__}): idempotency_key() returned "
                    f"a {type(key).__name__}, {key!r}; it must return a str or None"
                )
            if key is not None:
                run_id = run_id_for_key(key)
        output = type(job).output_type()
        headers = _headers(options)
        run_at = _run_at(options)

        for _ in range(SUBMIT_RETRIES + 1):
            handle = await self._submit_once(
                job, options, digest, data, output, run_id, parent, headers, run_at
            )
            if handle is not None:
                return handle
        raise JobError(
            f"job {name!r} ({run_id}): the queue refused a new run but holds none and "
            "no outcome is recorded; is another process purging it right now?"
        )

    async def _submit_once(
        self,
        job: Job[Out],
        options: SubmitOptions,
        digest: str,
        data: bytes,
        output: Any,
        run_id: str | None,
        parent: str | None,
        headers: dict[str, str],
        run_at: float | None,
    ) -> JobHandle[Out] | None:
        name = job.NAME
        keyed = run_id is not None
        if run_id is not None:
            cached = await self._records.outcome(run_id)
            if cached is not None:
                return self._answer_from(cached, digest, name, output)
        run_id = run_id or fresh_run_id()

        envelope = Envelope(name, data, fresh_incarnation(), digest, keyed, parent)
        kwargs: dict[str, Any] = {}
        if options.priority is not None:
            kwargs["priority"] = options.priority
        enqueued = await self._queue.enqueue(
            envelope.encode(),
            kind=name,
            id=run_id,
            run_at=run_at,
            max_attempts=options.max_attempts or type(job).max_attempts or self._max_attempts,
            headers=headers,
            **kwargs,
        )
        if enqueued.created:
            if keyed:
                cached = await self._records.outcome(run_id)
                if cached is not None and cached.incarnation != envelope.incarnation:
                    if cached.input_hash != digest:
                        # The key's answer is another input's: the record just
                        # made is nobody's run. Take it back, then refuse.
                        await self._queue.cancel(run_id)
                    return self._answer_from(cached, digest, name, output)
                self._created_here[run_id] = envelope.incarnation
                if len(self._created_here) > CREATED_HERE:
                    self._created_here.popitem(last=False)
            log.debug(
                "job %s (%s) submitted", run_id, name, extra={"job_id": run_id, "job_name": name}
            )
            return JobHandle(self._answers, run_id, output, newly_submitted=True, input_hash=digest)

        # A live run has this id: join it, if it is the same input.
        record = await self._queue.get(run_id)
        if record is not None:
            try:
                theirs = Envelope.decode(record.payload).input_hash
            except MalformedPayload:
                theirs = None
            if theirs != digest:
                raise InputMismatch(run_id, name)
            return JobHandle(
                self._answers, run_id, output, newly_submitted=False, input_hash=digest
            )
        # It finished between our two looks: its outcome is the answer.
        cached = await self._records.outcome(run_id)
        if cached is not None:
            return self._answer_from(cached, digest, name, output)
        return None

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

"""One job on its way into the queue: checked and encoded before anything is written."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from stepstone.errors import EncodingError
from stepstone.job import Job
from stepstone.records.codec import canonical_input
from stepstone.records.envelope import Envelope, input_hash
from stepstone.records.layout import fresh_incarnation, fresh_run_id, run_id_for_key
from stepstone.records.payloads import Payloads
from stepstone.runtime.queue import NewJob
from stepstone.submit.options import SubmitOptions, headers_of, run_at_of


@dataclass(slots=True)
class Submission:
    """What ``submit`` works out once, before any look or write, and the
    envelope of its latest enqueue."""

    job: Job[Any]
    options: SubmitOptions
    kind: str
    data: bytes
    digest: str
    run_id: str | None
    """The keyed run's id (None: a fresh id at each enqueue)."""
    key: str | None
    """The job's idempotency key (None: none, or an id derived for it)."""
    parent: str | None
    output: Any
    headers: dict[str, str]
    run_at: float | None
    envelope: Envelope | None = None

    @classmethod
    def of(
        cls, job: Job[Any], options: SubmitOptions | None, run_id: str | None, parent: str | None
    ) -> Submission:
        """Check and encode ``job``; raises before anything is written."""
        if not isinstance(job, Job):
            raise TypeError(f"submit() takes a Job instance, not {type(job).__name__}")
        options = options or SubmitOptions()
        kind = job.NAME
        try:
            data = canonical_input(job)
        except Exception as exc:
            raise EncodingError(f"the input cannot be encoded: {exc}", job=kind) from exc
        key: str | None = None
        if run_id is None:
            key = job.idempotency_key()
            if key is not None and not isinstance(key, str):
                raise TypeError(
                    f"job {kind!r} ({type(job).__qualname__}): idempotency_key() returned "
                    f"a {type(key).__name__}, {key!r}; it must return a str or None"
                )
            if key is not None:
                run_id = run_id_for_key(key)
        return cls(
            job=job,
            options=options,
            kind=kind,
            data=data,
            digest=input_hash(kind, data),
            run_id=run_id,
            key=key,
            parent=parent,
            output=type(job).output_type(),
            headers=headers_of(options),
            run_at=run_at_of(options),
        )

    @property
    def keyed(self) -> bool:
        return self.run_id is not None

    def new_job(self, default_max_attempts: int, payloads: Payloads) -> NewJob:
        """The queue's new job for a new incarnation of this run, its input
        sealed by ``payloads`` (its hash is the plain input's)."""
        self.envelope = Envelope(
            self.kind,
            payloads.seal_bytes(self.data),
            fresh_incarnation(),
            self.digest,
            self.keyed,
            self.parent,
            version=type(self.job).VERSION,
            key=self.key,
        )
        job = NewJob(
            payload=self.envelope.encode(),
            kind=self.kind,
            id=self.run_id or fresh_run_id(),
            run_at=self.run_at,
            max_attempts=(
                self.options.max_attempts or type(self.job).max_attempts or default_max_attempts
            ),
            headers=self.headers,
        )
        if self.options.priority is not None:  # (else the queue's default)
            job = replace(job, priority=self.options.priority)
        return job

"""One job on its way into the queue: checked and encoded before anything is written."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from stepstone.errors import EncodingError
from stepstone.job import Job
from stepstone.records.attributes import check_attributes
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
    attributes: dict[str, str]
    envelope: Envelope | None = None
    debounced: bool = False
    """Run under a debounce window's id, whose input is its window's last
    submit's: a run of the id met, or its outcome, may have another input."""

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
        if options.debounce is not None:
            _check_debounced(job, options, run_id, parent)
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
            attributes=check_attributes(options.attributes, where="SubmitOptions.attributes"),
        )

    @property
    def checked_hash(self) -> str | None:
        """The input hash its handle checks outcomes against (None: any)."""
        return None if self.debounced else self.digest

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
            attributes=self.attributes,
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


def _check_debounced(
    job: Job[Any], options: SubmitOptions, run_id: str | None, parent: str | None
) -> None:
    """ValueError for a debounced submit that cannot be: its run's id and
    start are its window's, so it takes no key, run id or run-at time."""
    why = None
    if parent is not None or run_id is not None:
        why = "a child or a schedule's tick cannot be debounced"
    elif options.run_at is not None:
        why = "SubmitOptions.run_at and debounce do not go together (the window says when)"
    elif job.idempotency_key() is not None:
        why = (
            "a job with an idempotency key cannot be debounced: its run is its key's, "
            "and a debounced run is its window's"
        )
    if why is not None:
        raise ValueError(f"job {job.NAME!r}: {why}")

"""stepstone: durable background jobs whose only required infrastructure is a bucket.

Everything an application touches is importable from here::

    from stepstone import Job, JobContext, JobRunner

- the job API: :class:`Job`, :class:`JobContext`, :class:`JobRunner`,
  :class:`JobHandle` (:class:`SyncHandle` from code without an event loop),
  a run's streams (:class:`StreamWriter` in the run, :class:`StreamReader`
  and :class:`StreamItem` outside it) and callbacks (:class:`Callback`),
  :class:`Outcome`, :class:`SubmitOptions`, :class:`IdempotencyKey` to
  name a run by the key it was submitted with (every runner method taking a
  run takes one, or a :data:`RunRef`), :class:`Schedule` for jobs
  submitted on a cron or an interval, and :class:`RateLimit` for a job
  type's ``rate_limit``;
- payload codecs for ``JobRunner(codec=...)`` (docs/security.md):
  :class:`AesGcmCodec` (encryption with rotating keys), :class:`ZstdCodec`
  and :class:`ZlibCodec` (compression), the :class:`PayloadCodec` protocol
  for your own, and :func:`codecs_from_env` to name them by configuration;
- one vocabulary for where a job is (:class:`JobStatus`) and why it failed
  (:class:`FailureKind`); a run's attempts, from ``runner.history(id)``
  (:class:`AttemptInfo`, :class:`AttemptResult`);
- storage and queues to pass a runner: :func:`open_store`, and
  :class:`StoreQueue` (the default), :class:`MemoryQueue`, :class:`SqsQueue`;
- every error, under :class:`StepstoneError` (the tree is drawn in
  :mod:`stepstone.errors`), and the verdicts a job raises,
  :class:`Permanent` and :class:`RetryLater`.

Test helpers (a fake clock, pytest fixtures) are in :mod:`stepstone.testing`;
logs, traces and metrics in :mod:`stepstone.telemetry`. The parts the runner
is built from are packages by side of the work (:mod:`stepstone.submit`,
:mod:`stepstone.handles`, :mod:`stepstone.execute`, :mod:`stepstone.records`,
:mod:`stepstone.limits`, :mod:`stepstone.ops`; docs/architecture.md maps
them), and the layers underneath are :mod:`stepstone.runtime` (the lease
queue and the worker) and :mod:`stepstone.store` (the object stores).
"""

from stepstone.errors import (
    AlreadyExists,
    BadCallback,
    BadEvent,
    BadStreamItem,
    CallbackRefused,
    CallbackTimeout,
    CorruptMemo,
    CorruptOutcome,
    CorruptRecord,
    DebounceBacklog,
    DuplicateJobName,
    EncodingError,
    EventRefused,
    InputMismatch,
    InvalidAttribute,
    InvalidKey,
    InvalidRunId,
    InvalidWait,
    JobCancelled,
    JobError,
    JobFailed,
    LeaseLost,
    NonDeterministicReplay,
    NotFound,
    PayloadTooLarge,
    PayloadUnreadable,
    Permanent,
    PreconditionFailed,
    QueueError,
    RetryLater,
    RunNotFound,
    SqsUnsupported,
    StepstoneError,
    StoreConfigError,
    StoreError,
    StoreUnavailable,
    StreamClosed,
    Throttled,
    UnknownJob,
    WorkerIdInUse,
)
from stepstone.execute.callbacks import Callback
from stepstone.execute.context import JobContext, SyncContext
from stepstone.execute.streams import StreamWriter
from stepstone.handles.handle import JobHandle
from stepstone.handles.state import JobState
from stepstone.handles.streams import StreamItem, StreamReader
from stepstone.handles.sync import SyncHandle
from stepstone.job import (
    ErrorClass,
    IdempotencyKey,
    Job,
    RunRef,
    Singleton,
    payload_idempotency_key,
)
from stepstone.limits.rate import RateLimit
from stepstone.records.attempts import AttemptInfo, AttemptResult
from stepstone.records.compression import ZlibCodec, ZstdCodec
from stepstone.records.encryption import AesGcmCodec
from stepstone.records.outcome import ErrorInfo, Outcome
from stepstone.records.payload_config import codecs_from_env
from stepstone.records.payloads import PayloadCodec
from stepstone.runner import JobRunner
from stepstone.runtime import MemoryQueue, SqsQueue, StoreQueue
from stepstone.runtime.clock import Clock, SystemClock
from stepstone.runtime.decision import FailureKind
from stepstone.runtime.queue import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_LAPSES,
    PRIORITY_HIGH,
    PRIORITY_LOW,
    PRIORITY_NORMAL,
    LeaseQueue,
)
from stepstone.runtime.status import JobStatus
from stepstone.schedules import Schedule
from stepstone.store import ObjectStore, open_store
from stepstone.submit.options import Debounce, SubmitOptions

__all__ = [
    "AesGcmCodec",
    "PayloadCodec",
    "PayloadUnreadable",
    "ZlibCodec",
    "ZstdCodec",
    "codecs_from_env",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_LAPSES",
    "PRIORITY_HIGH",
    "PRIORITY_LOW",
    "PRIORITY_NORMAL",
    "AlreadyExists",
    "AttemptInfo",
    "AttemptResult",
    "BadCallback",
    "BadEvent",
    "BadStreamItem",
    "Callback",
    "CallbackRefused",
    "CallbackTimeout",
    "Clock",
    "CorruptMemo",
    "NonDeterministicReplay",
    "CorruptOutcome",
    "CorruptRecord",
    "Debounce",
    "DebounceBacklog",
    "DuplicateJobName",
    "EncodingError",
    "ErrorClass",
    "EventRefused",
    "ErrorInfo",
    "FailureKind",
    "IdempotencyKey",
    "InputMismatch",
    "InvalidAttribute",
    "InvalidRunId",
    "InvalidKey",
    "InvalidWait",
    "Job",
    "JobCancelled",
    "JobContext",
    "JobError",
    "JobFailed",
    "JobHandle",
    "JobRunner",
    "JobState",
    "JobStatus",
    "LeaseLost",
    "LeaseQueue",
    "MemoryQueue",
    "NotFound",
    "ObjectStore",
    "Outcome",
    "PayloadTooLarge",
    "Permanent",
    "PreconditionFailed",
    "QueueError",
    "RateLimit",
    "RetryLater",
    "RunRef",
    "RunNotFound",
    "Schedule",
    "Singleton",
    "SqsQueue",
    "SqsUnsupported",
    "StepstoneError",
    "StoreConfigError",
    "StoreError",
    "StoreQueue",
    "StoreUnavailable",
    "StreamClosed",
    "StreamItem",
    "StreamReader",
    "StreamWriter",
    "SubmitOptions",
    "SyncContext",
    "SyncHandle",
    "SystemClock",
    "Throttled",
    "UnknownJob",
    "WorkerIdInUse",
    "open_store",
    "payload_idempotency_key",
]

"""stepstone: durable background jobs on a bucket.

>>> from workflow import Job, JobContext, JobRunner
"""

from stepstone.runtime.clock import Clock, FakeClock, SystemClock
from stepstone.runtime.errors import LeaseLost, RetryLater
from stepstone.runtime.queue import PRIORITY_HIGH, PRIORITY_LOW, PRIORITY_NORMAL

from .context import JobContext, SyncContext
from .errors import (
    DuplicateJobName,
    EncodingError,
    InputMismatch,
    JobCancelled,
    JobFailed,
    Permanent,
    UnknownJob,
    WorkflowError,
)
from .handle import JobHandle, JobState
from .job import ErrorClass, Job, payload_idempotency_key
from .outcome import JobError, Outcome, OutcomeStatus
from .runner import JobRunner, SubmitOptions

__all__ = [
    "PRIORITY_HIGH",
    "PRIORITY_LOW",
    "PRIORITY_NORMAL",
    "Clock",
    "DuplicateJobName",
    "EncodingError",
    "ErrorClass",
    "FakeClock",
    "InputMismatch",
    "Job",
    "JobCancelled",
    "JobContext",
    "JobError",
    "JobFailed",
    "JobHandle",
    "JobRunner",
    "JobState",
    "LeaseLost",
    "Outcome",
    "OutcomeStatus",
    "Permanent",
    "RetryLater",
    "SubmitOptions",
    "SyncContext",
    "SystemClock",
    "UnknownJob",
    "WorkflowError",
    "payload_idempotency_key",
]

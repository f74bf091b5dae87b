"""The engine: the lease queue contract, its backends, and the worker loop.

Knows nothing of jobs' types or steps: it moves opaque payloads between
enqueue and a handler, under leases, with retries.
"""

from .backoff import Backoff
from .capabilities import (
    DeadJobRequeue,
    JobCounts,
    JobListing,
    JobSurvey,
    Page,
    QueueInspection,
    Reclaiming,
    Survey,
    Waking,
)
from .clock import Clock, FakeClock, SystemClock
from .decide import AttemptEnd, Failure, FailureKind, Success, Terminal
from .errors import (
    LeaseLost,
    MalformedPayload,
    PayloadTooLarge,
    Permanent,
    QueueError,
    RetryLater,
    UnknownKind,
    WorkerIdInUse,
)
from .memory_queue import MemoryQueue
from .observer import AttemptReport, WorkerObserver
from .queue import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_LAPSES,
    PRIORITY_HIGH,
    PRIORITY_LOW,
    PRIORITY_NORMAL,
    QUEUE_STATUSES,
    Delivery,
    Enqueued,
    JobRecord,
    JobStatus,
    LeaseQueue,
    NewJob,
    Settlement,
    Wait,
)
from .sqs import SqsQueue, SqsUnsupported  # aiobotocore loads on first use
from .store_queue import CorruptRecord, StoreQueue, StoreQueueStats
from .suspension import Suspend
from .worker import (
    Attempt,
    AttemptCallbacks,
    Handler,
    JobThreads,
    Lease,
    OnTerminal,
    Worker,
    WorkerStats,
)

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_LAPSES",
    "PRIORITY_HIGH",
    "PRIORITY_LOW",
    "PRIORITY_NORMAL",
    "QUEUE_STATUSES",
    "Attempt",
    "AttemptCallbacks",
    "AttemptEnd",
    "AttemptReport",
    "Backoff",
    "Clock",
    "CorruptRecord",
    "DeadJobRequeue",
    "Delivery",
    "Enqueued",
    "Failure",
    "FailureKind",
    "FakeClock",
    "Handler",
    "JobThreads",
    "JobCounts",
    "JobListing",
    "JobSurvey",
    "JobRecord",
    "JobStatus",
    "Lease",
    "LeaseLost",
    "LeaseQueue",
    "NewJob",
    "MalformedPayload",
    "MemoryQueue",
    "OnTerminal",
    "Page",
    "PayloadTooLarge",
    "Permanent",
    "QueueError",
    "QueueInspection",
    "Reclaiming",
    "RetryLater",
    "Settlement",
    "SqsQueue",
    "SqsUnsupported",
    "StoreQueue",
    "StoreQueueStats",
    "Success",
    "Survey",
    "Suspend",
    "SystemClock",
    "Terminal",
    "UnknownKind",
    "Wait",
    "Waking",
    "WorkerIdInUse",
    "Worker",
    "WorkerObserver",
    "WorkerStats",
]

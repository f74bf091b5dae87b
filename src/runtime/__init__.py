"""The engine: the lease queue contract, its backends, and the worker loop.

Knows nothing of jobs' types or steps: it moves opaque payloads between
enqueue and a handler, under leases, with retries.
"""

from .clock import Clock, FakeClock, SystemClock
from .errors import (
    JobNotFound,
    MalformedPayload,
    PayloadTooLarge,
    PermanentError,
    QueueError,
    UnknownKind,
)
from .memory_queue import MemoryQueue
from .queue import (
    DEFAULT_MAX_ATTEMPTS,
    PRIORITY_HIGH,
    PRIORITY_LOW,
    PRIORITY_NORMAL,
    Delivery,
    Enqueued,
    JobRecord,
    JobStatus,
    LeaseQueue,
    Page,
    Settlement,
)

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "PRIORITY_HIGH",
    "PRIORITY_LOW",
    "PRIORITY_NORMAL",
    "Clock",
    "Delivery",
    "Enqueued",
    "FakeClock",
    "JobNotFound",
    "JobRecord",
    "JobStatus",
    "LeaseQueue",
    "MalformedPayload",
    "MemoryQueue",
    "Page",
    "PayloadTooLarge",
    "PermanentError",
    "QueueError",
    "Settlement",
    "SystemClock",
    "UnknownKind",
]

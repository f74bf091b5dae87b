"""What the mechanisms of one SqsQueue share, built once by the queue.

The client every request goes through, the outbox that batches sends and
deletes, what this process holds (the fence, and ``holds`` over it) and
remembers of the jobs it enqueued, the id store's markers (None without an
id store), the clock run-at times are read by, and ``notify``, which tells
this process's listeners that work is available.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..clock import Clock
from .client import SqsClient
from .fence import Fence
from .holds import Holds
from .local_jobs import LocalJobs
from .markers import IdMarkers
from .outbox import Outbox


@dataclass(frozen=True, slots=True)
class QueueParts:
    """What the mechanisms of one SqsQueue share (see the module docstring)."""

    sqs: SqsClient
    outbox: Outbox
    fence: Fence
    holds: Holds
    local: LocalJobs
    markers: IdMarkers | None
    clock: Clock
    notify: Callable[[], None]

"""SqsQueue: the LeaseQueue contract, carried out on SQS.

This module is the class: its configuration, the queues it uses and their
setup, and each operation handed to the part that maps it onto SQS requests
(the package docstring maps the parts and says why each is so).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from typing import Any

from stepstone.store import ObjectStore

from ..capabilities import DeadJobRequeue, IdleHints, JobCounts
from ..clock import Clock, SystemClock
from ..decision import Ack, Dead, Decision, Release, Retry, Suspended
from ..listeners import Listeners
from ..queue import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_PAYLOAD_BYTES,
    Delivery,
    Enqueued,
    JobRecord,
    LeaseQueue,
    NewJob,
    Settlement,
    enqueue_each,
)
from ..status import JobStatus
from .admin import SqsAdmin
from .client import SqsClient
from .enqueues import Enqueues
from .fence import Fence
from .holds import Holds
from .inspection import SqsInspection, SqsUnsupported
from .limits import (
    DEFAULT_MAX_RECEIVE_COUNT,
    NAME,
    RETENTION_SECONDS,
    SQS_MAX_DELAY_SECONDS,
    SQS_MAX_MESSAGE_BYTES,
    SQS_MAX_WAIT_SECONDS,
)
from .local_jobs import LocalJobs
from .markers import IdMarkers
from .outbox import Outbox
from .parts import QueueParts
from .receiving import Receiver
from .tiers import DEFAULT_TIERS, Tier, check_tiers
from .transitions import SqsTransitions

__all__ = ["SqsQueue", "SqsUnsupported"]


class SqsQueue(LeaseQueue, JobCounts, DeadJobRequeue, IdleHints):
    """The lease queue on SQS standard queues: one per priority tier plus a
    dead-letter queue, named ``<name>-<tier suffix>`` and ``<name>-dead``.

    ``id_store`` must be chosen, not defaulted. An ObjectStore (the bucket the
    workflow layer already uses) keeps one marker per live job under
    ``id_prefix``: enqueue-with-id becomes create-if-absent fleet-wide, get()
    and cancel() work from any process, and duplicates SQS delivers after an
    ack are dropped. It costs a PUT per job and a GET per delivery and per
    settlement (docs/scaling.md prices it). ``None`` keeps all of that to
    this process, and then two processes submitting the same idempotency key
    at once make two runs, with two incarnations, whose steps both execute:
    pass None only when every job id is enqueued from one process, or jobs
    have no idempotency keys.

    ``clock`` decides run-at times only; leases are SQS's own (real) time.
    ``fence_margin`` is taken off every lease this process measures, so its
    deadline ends before SQS's even with a slow request in between.
    ``max_delay_seconds`` is SQS's 15-minute cap; lower it only to exercise
    re-deferral in tests. ``wait_time_seconds`` is the long poll a claim does
    when every tier is empty (0 turns long polling off). A retry re-sends the
    message with DelaySeconds (batched with other sends and deletes), never
    waits on the visibility timeout, since a second receive of one message is
    how a lapsed lease shows (:mod:`stepstone.runtime.sqs.message`).
    ``spill_bytes``: with an id store, a base64 payload longer than this stays
    in the marker, not the message (SQS bills each 64 KiB as one request).
    """

    def __init__(
        self,
        name: str,
        *,
        id_store: ObjectStore | None,
        endpoint_url: str | None = None,
        region: str | None = None,
        tiers: Sequence[Tier] = DEFAULT_TIERS,
        clock: Clock | None = None,
        default_max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        max_message_bytes: int = SQS_MAX_MESSAGE_BYTES,
        wait_time_seconds: int = 5,
        max_delay_seconds: int = SQS_MAX_DELAY_SECONDS,
        fence_margin: float = 1.0,
        batch_window: float = 0.01,
        dead_scan_visibility: int = 30,
        remember_ids: int = 10_000,
        remember_bytes: int = 64 * 1024 * 1024,
        id_prefix: str = "sqs-ids",
        spill_bytes: int = 60 * 1024,
    ) -> None:
        if not NAME.match(name):
            raise ValueError(
                f"SQS queue base name must be 1-70 letters, digits, '-' or '_', got {name!r}"
            )
        check_tiers(tiers)
        if not 0 <= wait_time_seconds <= SQS_MAX_WAIT_SECONDS:
            raise ValueError(f"wait_time_seconds must be 0..{SQS_MAX_WAIT_SECONDS}")
        if not 1 <= max_delay_seconds <= SQS_MAX_DELAY_SECONDS:
            raise ValueError(f"max_delay_seconds must be 1..{SQS_MAX_DELAY_SECONDS}")
        self.name = name
        self.endpoint_url = endpoint_url
        self.region = region
        self.tiers = tuple(tiers)
        self._clock = clock or SystemClock()
        self.default_max_attempts = default_max_attempts
        self.max_payload_bytes = max_payload_bytes
        self.max_message_bytes = max_message_bytes
        self.wait_time_seconds = wait_time_seconds
        self.max_delay_seconds = max_delay_seconds
        self.fence_margin = fence_margin
        self.dead_scan_visibility = dead_scan_visibility
        self.id_store = id_store
        self.id_prefix = id_prefix.rstrip("/")
        self.spill_bytes = spill_bytes
        self._sqs = SqsClient(endpoint_url, region)
        self.requests = self._sqs.requests
        """SQS requests made, by operation (what docs/scaling.md's costs count)."""
        self._listeners = Listeners()
        self._fence = fence = Fence(fence_margin)
        local = LocalJobs(max_ids=remember_ids, max_bytes=remember_bytes)
        markers = None if id_store is None else IdMarkers(id_store, self.id_prefix)
        outbox = Outbox(
            self._sqs,
            name,
            self.tiers,
            self._clock,
            max_message_bytes=max_message_bytes,
            max_delay_seconds=max_delay_seconds,
            batch_window=batch_window,
        )
        parts = QueueParts(
            sqs=self._sqs,
            outbox=outbox,
            fence=fence,
            holds=Holds(fence, local, markers),
            local=local,
            markers=markers,
            clock=self._clock,
            notify=self._notify,
        )
        self._enqueues = Enqueues(
            parts,
            default_max_attempts=default_max_attempts,
            max_payload_bytes=max_payload_bytes,
            max_message_bytes=max_message_bytes,
            spill_bytes=spill_bytes,
        )
        self._transitions = SqsTransitions(parts, fence_margin=fence_margin)
        self._receiver = Receiver(
            parts,
            self.tiers,
            wait_time_seconds=wait_time_seconds,
            renew=self._transitions.renew,
            put_back=self._put_back,
            label=repr(self),
        )
        self._admin = SqsAdmin(parts, dead_scan_visibility=dead_scan_visibility)
        self._inspection = SqsInspection(
            parts, queue_names=self.queue_names, dead_queue_name=self.dead_queue_name
        )
        self._outbox = outbox

    def __repr__(self) -> str:
        return f"SqsQueue({self.name!r}, endpoint_url={self.endpoint_url!r})"

    @property
    def clock(self) -> Clock:
        return self._clock

    # -- names and setup ---------------------------------------------------

    @property
    def queue_names(self) -> list[str]:
        """The SQS queues this uses: one per tier, then the dead-letter queue."""
        return [f"{self.name}-{t.suffix}" for t in self.tiers] + [self.dead_queue_name]

    @property
    def dead_queue_name(self) -> str:
        """The name of the dead-letter queue: the queue's name and ``-dead``."""
        return f"{self.name}-dead"

    @classmethod
    async def create(
        cls, name: str, *, max_receive_count: int = DEFAULT_MAX_RECEIVE_COUNT, **kwargs: Any
    ) -> SqsQueue:
        """Make (or find, CreateQueue is idempotent) the queues and return a
        SqsQueue on them. For first setup and tests; production fleets usually
        create queues with infrastructure code, using the same attributes."""
        queue = cls(name, **kwargs)
        await queue.create_queues(max_receive_count=max_receive_count)
        return queue

    async def create_queues(self, *, max_receive_count: int = DEFAULT_MAX_RECEIVE_COUNT) -> None:
        """Create the dead-letter queue, then each tier queue with a RedrivePolicy to it."""
        common = {
            "MessageRetentionPeriod": str(RETENTION_SECONDS),
            "MaximumMessageSize": str(min(self.max_message_bytes, SQS_MAX_MESSAGE_BYTES)),
        }
        dead = await self._sqs.call(
            "create_queue", QueueName=self.dead_queue_name, Attributes=common
        )
        dead_url: str = dead["QueueUrl"]
        self._sqs.know_url(self.dead_queue_name, dead_url)
        attrs = await self._sqs.call(
            "get_queue_attributes", QueueUrl=dead_url, AttributeNames=["QueueArn"]
        )
        redrive = json.dumps(
            {
                "deadLetterTargetArn": attrs["Attributes"]["QueueArn"],
                "maxReceiveCount": str(max_receive_count),
            }
        )
        for queue_name in self.queue_names[:-1]:
            made = await self._sqs.call(
                "create_queue",
                QueueName=queue_name,
                Attributes=dict(common, RedrivePolicy=redrive),
            )
            self._sqs.know_url(queue_name, made["QueueUrl"])

    def _notify(self) -> None:
        self._listeners.call()

    async def _put_back(self, delivery: Delivery) -> bool:
        """Put back a received delivery nobody was handed (of an unwanted
        kind, or brought by a long poll at close), uncounted."""
        return await self._transitions.resend_uncounted(delivery, claimed=False)

    # -- the contract (stepstone.runtime.sqs.enqueues, .receiving, .transitions)

    async def enqueue_many(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        return await enqueue_each(jobs, self._enqueues.one)

    async def claim(
        self,
        n: int,
        *,
        lease: float,
        kinds: Collection[str] | None = None,
        holder: str | None = None,
    ) -> list[Delivery]:
        return await self._receiver.claim(n, lease=lease, kinds=kinds)

    async def renew(self, delivery: Delivery, at_least: float) -> float | None:
        return await self._transitions.renew(delivery, at_least)

    async def settle(self, delivery: Delivery, decision: Decision) -> Settlement:
        """As the contract says; a suspension is a retry after its wake time,
        uncounted: SQS cannot change a message it does not hold, so nothing
        wakes it early, and its wait is not kept (:mod:`stepstone.runtime.suspension`)."""
        transitions = self._transitions
        match decision:
            case Ack():
                return await transitions.ack(delivery)
            case Retry():
                return await transitions.nack(
                    delivery, delay=decision.delay, count=decision.count, error=decision.kept_error
                )
            case Suspended():
                delay = max(0.0, decision.until - self.clock.now())
                return await transitions.nack(delivery, delay=delay, count=False)
            case Dead():
                return await transitions.dead_letter(delivery, decision.reason)
            case Release():
                return await transitions.release(delivery)

    # -- outside a claim (stepstone.runtime.sqs.admin) -----------------------

    async def cancel(self, run_id: str) -> bool:
        return await self._admin.cancel(run_id)

    async def discard_dead(self, run_id: str) -> bool:
        return await self._admin.discard_dead(run_id)

    async def requeue(self, run_id: str) -> bool:
        return await self._admin.requeue(run_id)

    async def requeue_all(self) -> int:
        """Move every dead job back (attempts reset); returns how many."""
        return await self._admin.requeue_all()

    # -- reading (stepstone.runtime.sqs.inspection) --------------------------

    async def get(self, run_id: str) -> JobRecord | None:
        return await self._inspection.get(run_id)

    async def counts(self) -> dict[JobStatus, int]:
        return await self._inspection.counts()

    # -- this process ------------------------------------------------------

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Wake ``listener`` on this process's enqueues, releases and requeues
        (other processes' work arrives through the long poll)."""
        return self._listeners.add(listener)

    async def next_due(self) -> float | None:
        """None: SQS keeps the run-at times; its long poll brings what comes due."""
        return None

    def next_look(self) -> float | None:
        """None: a claim long-polls, which hears other processes' work as it comes."""
        return None

    async def flush(self) -> None:
        """Send what the batchers are holding now (close() does this too)."""
        await self._outbox.flush()

    async def give_back(self) -> None:
        """Wait out background long polls (at most ``wait_time_seconds``) and
        put back what they brought, uncounted (``Prefetching``)."""
        for delivery in await self._receiver.polls.wind_down():
            await self._put_back(delivery)

    async def close(self) -> None:
        """Give back what background long polls brought (:meth:`give_back`),
        flush pending batches and close the SQS client."""
        if not self._sqs.opened:
            return
        try:
            await self.give_back()
            await self.flush()
        finally:
            await self._sqs.close()

    async def __aenter__(self) -> SqsQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

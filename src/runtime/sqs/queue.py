"""SqsQueue: the LeaseQueue contract, carried out on SQS.

This module holds the contract's operations and how each maps onto SQS
requests; the mechanisms they lean on have modules of their own (see the
package docstring for the map).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import secrets
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from stepstone.store import ObjectStore

from ..capabilities import DeadJobRequeue, JobCounts
from ..clock import Clock, SystemClock
from ..errors import PayloadTooLarge, QueueError
from ..queue import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_PAYLOAD_BYTES,
    QUEUE_STATUSES,
    Delivery,
    Enqueued,
    JobRecord,
    JobStatus,
    LeaseQueue,
    NewJob,
    Settlement,
    check_enqueue,
    enqueue_each,
)
from . import dead_letters
from .batcher import Batcher
from .client import SqsClient, error_code, is_lost
from .fence import Fence, Held
from .limits import (
    DEFAULT_MAX_RECEIVE_COUNT,
    NAME,
    RETENTION_SECONDS,
    SQS_MAX_BATCH,
    SQS_MAX_DELAY_SECONDS,
    SQS_MAX_MESSAGE_BYTES,
    SQS_MAX_VISIBILITY_SECONDS,
    SQS_MAX_WAIT_SECONDS,
    VISIBILITY_SAFETY,
)
from .local_jobs import LocalJobs
from .markers import IdMarkers
from .message import ForeignMessage, JobMessage, MalformedMessage, decode
from .message import encode as encode_message
from .prefetch import LongPolls
from .tiers import DEFAULT_TIERS, Tier, TierRotation, check_tiers, tier_of

logger = logging.getLogger("stepstone.runtime.sqs")


class SqsUnsupported(QueueError, NotImplementedError):
    """SQS cannot answer this (it has no lookup by id)."""


class SqsQueue(LeaseQueue, JobCounts, DeadJobRequeue):
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
    when every tier is empty (0 turns long polling off). ``max_visibility_backoff``
    is the longest counted-nack delay carried on the visibility timeout (one
    request, but the message counts as in flight meanwhile); longer delays
    re-send the message with DelaySeconds (two requests, not in flight).
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
        max_visibility_backoff: float = SQS_MAX_VISIBILITY_SECONDS - VISIBILITY_SAFETY,
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
        self.max_visibility_backoff = max_visibility_backoff
        self.fence_margin = fence_margin
        self.dead_scan_visibility = dead_scan_visibility
        self.id_store = id_store
        self.id_prefix = id_prefix.rstrip("/")
        self.spill_bytes = spill_bytes
        self._sqs = SqsClient(endpoint_url, region)
        self.requests = self._sqs.requests
        """SQS requests made, by operation (what docs/scaling.md's costs count)."""
        self._markers = None if id_store is None else IdMarkers(id_store, self.id_prefix)
        self._local = LocalJobs(max_ids=remember_ids, max_bytes=remember_bytes)
        self._fence = Fence(fence_margin)
        self._rotation = TierRotation(self.tiers)
        self._polls = LongPolls(self._receive, [t.weight for t in self.tiers], brought=self._notify)
        self._quiet_at: dict[int, float] = {}
        """Tier -> when (time.monotonic) a long poll of it last came back empty,
        while nothing has come from it since."""
        self._sender = Batcher(self._sqs, "send_message_batch", batch_window)
        self._deleter = Batcher(self._sqs, "delete_message_batch", batch_window)
        self._listeners: list[Callable[[], None]] = []

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

    # -- sending and deleting ----------------------------------------------

    async def _tier_url(self, priority: int) -> str:
        return await self._sqs.url(f"{self.name}-{tier_of(self.tiers, priority).suffix}")

    async def _dead_url(self) -> str:
        return await self._sqs.url(self.dead_queue_name)

    def _notify(self) -> None:
        for listener in list(self._listeners):
            listener()

    def _delay_for(self, run_at: float) -> int:
        remaining = run_at - self.clock.now()
        if remaining <= 0:
            return 0
        return min(math.ceil(remaining), self.max_delay_seconds)

    async def _send(self, url: str, message: JobMessage | ForeignMessage, run_at: float) -> None:
        """Send one message (batched). A spilled job's payload stays in its
        marker: the message carries everything else."""
        if isinstance(message, JobMessage) and message.spilled:
            message = dataclasses.replace(message, payload=None)
        text = encode_message(message)
        size = len(text.encode())
        if size > self.max_message_bytes:
            raise PayloadTooLarge(
                f"job {message.id!r}: its SQS message is {size} bytes (the payload is "
                f"base64-encoded), over the limit of {self.max_message_bytes} bytes"
            )
        entry = {"MessageBody": text, "DelaySeconds": self._delay_for(run_at)}
        refused = await self._sender.submit(url, entry)
        if refused is not None:
            raise QueueError(f"SQS refused job {message.id!r}: {refused.code}: {refused.message}")

    async def _delete(self, url: str, receipt: str) -> bool:
        """Delete a received message (batched); False if SQS says the receipt
        no longer holds it."""
        refused = await self._deleter.submit(url, {"ReceiptHandle": receipt})
        if refused is None:
            return True
        if is_lost(refused.code):
            return False
        raise QueueError(f"SQS refused a delete: {refused.code}: {refused.message}")

    # -- ownership ---------------------------------------------------------

    def _owned(self, delivery: Delivery) -> Held | None:
        return self._fence.owned(delivery, self._local.cancelled)

    async def _owns(self, delivery: Delivery) -> Held | None:
        """The fence's answer, and with an id store, the job's marker still
        names this enqueue (one GET): a cancel or a settlement in another
        process deleted or replaced it, and then this delivery has lost the job."""
        holding = await self._holding(delivery)
        return None if holding is None else holding[0]

    async def _holding(self, delivery: Delivery) -> tuple[Held, str | None] | None:
        """``_owns``, with the version of the job's marker (None without one)."""
        held = self._owned(delivery)
        if held is None or self._markers is None or held.message.token is None:
            return None if held is None else (held, None)
        found = await self._markers.version_of(held.message)
        if found is None or found[0].dead_reason is not None:
            self._fence.drop(delivery.token)
            return None
        return held, found[1]

    def _settled(self, receipt: str) -> None:
        held = self._fence.drop(receipt)
        if held is not None:
            self._local.forget(held.message.id)

    # -- the contract ------------------------------------------------------

    async def enqueue_many(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        return await enqueue_each(jobs, self._enqueue_one)

    async def _enqueue_one(self, job: NewJob) -> Enqueued:
        """Send the job to its tier's queue.

        With an id store, the job's marker is written first, create-if-absent:
        ``created`` is False when any process holds a live job of this id.
        Without one, ``created`` is False only when *this process* enqueued (or
        holds) the id and has not seen it settled: SQS standard queues do not
        deduplicate, so another process's enqueue of the same id adds a second
        message, and the workflow layer would run it as a second incarnation
        (see the class docstring)."""
        payload, run_at, priority = job.payload, job.run_at, job.priority
        run_id = check_enqueue(
            payload,
            id=job.id,
            priority=priority,
            max_attempts=job.max_attempts,
            max_payload_bytes=self.max_payload_bytes,
        )
        if self._markers is None and self._local.is_live(run_id):
            return Enqueued(run_id, created=False)
        if self._markers is None and len(payload) * 4 // 3 + 1024 > self.max_message_bytes:
            raise PayloadTooLarge(
                f"payload of {len(payload)} bytes is over what one SQS message of "
                f"{self.max_message_bytes} bytes carries once base64-encoded (an id "
                "store would keep it on S3)"
            )
        now = self.clock.now()
        due = now if run_at is None else run_at
        message = JobMessage(
            id=run_id,
            kind=job.kind,
            priority=priority,
            max_attempts=job.max_attempts or self.default_max_attempts,
            run_at=due,
            enqueued_at=now,
            attempts=0,
            claims=0,
            headers=dict(job.headers or {}),
            payload=payload,
        )
        if self._markers is not None:
            # Kept in the marker, which every claim reads anyway, when its
            # base64 is over spill_bytes: the message stays small (SQS bills
            # each 64 KiB as a request).
            base64_size = 4 * -(-len(payload) // 3)
            message = dataclasses.replace(
                message, token=secrets.token_hex(8), spilled=base64_size > self.spill_bytes
            )
            if not await self._markers.create(message):
                return Enqueued(run_id, created=False)
        self._local.uncancel(run_id)
        self._local.remember(run_id, message)
        try:
            await self._send(await self._tier_url(priority), message, due)
        except BaseException:
            self._local.forget(run_id)
            if self._markers is not None:
                with contextlib.suppress(Exception):
                    await self._markers.drop(run_id)
            raise
        self._notify()
        return Enqueued(run_id, created=True)

    async def _receive(self, tier: int, n: int, lease: int, wait: int) -> list[Delivery]:
        return (await self._receive_counted(tier, n, lease, wait))[0]

    async def _receive_counted(
        self, tier: int, n: int, lease: int, wait: int
    ) -> tuple[list[Delivery], int]:
        """Receive up to ``n`` from a tier: the deliveries, and how many
        messages came (some are dealt with here: early, cancelled, duplicate)."""
        url = await self._sqs.url(f"{self.name}-{self.tiers[tier].suffix}")
        started = time.monotonic()
        response = await self._sqs.call(
            "receive_message",
            QueueUrl=url,
            MaxNumberOfMessages=n,
            VisibilityTimeout=lease,
            WaitTimeSeconds=wait,
            MessageSystemAttributeNames=["ApproximateReceiveCount"],
        )
        if response.get("Messages"):
            self._quiet_at.pop(tier, None)
        elif wait > 0:
            self._quiet_at[tier] = time.monotonic()
        out: list[Delivery] = []
        for message in response.get("Messages", []):
            delivery = await self._accept(url, message, started, lease)
            if delivery is not None:
                out.append(delivery)
        return out, len(response.get("Messages", []))

    async def _accept(
        self, url: str, received: dict[str, Any], started: float, lease: int
    ) -> Delivery | None:
        """Turn one received message into a Delivery, or deal with it here:
        drop a cancelled job, re-defer an early one, dead-letter a foreign one."""
        receipt: str = received["ReceiptHandle"]
        receives = int(received.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
        try:
            message = decode(received.get("Body", ""))
        except MalformedMessage as exc:
            foreign = ForeignMessage(
                id=received.get("MessageId", ""),
                body=received.get("Body", ""),
                reason=f"not a stepstone message: {exc}",
                receives=receives,
            )
            await self._send(await self._dead_url(), foreign, 0.0)
            await self._delete(url, receipt)
            return None
        run_id = message.id
        attempt = message.attempts + receives
        claims = message.claims + receives
        if run_id in self._local.cancelled:
            await self._delete(url, receipt)
            return None
        if self._markers is not None and message.token is not None:
            marker = await self._markers.of(message)
            if marker is None or marker.dead_reason is not None:
                # Acked, cancelled or dead-lettered already: this is a
                # duplicate (SQS delivers at least once) or a cancelled job.
                await self._delete(url, receipt)
                return None
            if message.spilled:
                message = dataclasses.replace(message, payload=marker.payload)
        if message.payload is None:
            # Spilled by a process with an id store: this one, without, cannot
            # read the payload. Leave it to them (it shows again after the lease).
            logger.warning("%r: job %s keeps its payload in an id store", self, run_id)
            return None
        if message.run_at > self.clock.now():
            # Arrived before its run-at (DelaySeconds stops at 15 minutes):
            # send it again for the rest of the wait, this receive not counted.
            again = dataclasses.replace(message, attempts=attempt - 1, claims=claims - 1)
            await self._send(url, again, message.run_at)
            await self._delete(url, receipt)
            return None
        held = self._fence.hold(
            receipt,
            message_id=received["MessageId"],
            url=url,
            message=message,
            attempt=attempt,
            claims=claims,
            received=started,
            lease=lease,
            now=self.clock.now(),
        )
        self._local.remember(run_id)
        return Delivery(
            id=run_id,
            kind=message.kind,
            payload=message.payload,
            attempt=attempt,
            max_attempts=message.max_attempts,
            token=receipt,
            lease_expires_at=held.expires,
            priority=message.priority,
            headers=dict(message.headers),
            enqueued_at=message.enqueued_at,
            claims=claims,
        )

    async def claim(
        self, n: int, *, lease: float, kinds: Collection[str] | None = None
    ) -> list[Delivery]:
        """Receive up to ``n`` messages across the tiers, weighted; long-poll
        only when every tier came back empty (or was found empty by a long
        poll just now: ``_quiet``).

        SQS cannot filter by kind: with ``kinds``, a message of another kind is
        put back uncounted (re-sent and deleted, two requests). A fleet that
        splits work by kind should give each kind its own SqsQueue instead."""
        if n <= 0:
            return []
        self._fence.prune()
        visibility = max(1, min(math.ceil(lease), SQS_MAX_VISIBILITY_SECONDS))
        out = await self._take_prefetched(n, lease)
        order = self._rotation.next_order()
        # Look at every tier once; go back only to tiers that filled a batch.
        looking = [] if self._quiet() else order
        while looking and len(out) < n:
            full: list[int] = []
            for tier in looking:
                want = min(SQS_MAX_BATCH, n - len(out))
                if want <= 0:
                    break
                got, came = await self._receive_counted(tier, want, visibility, 0)
                out.extend(got)
                if came == want:
                    full.append(tier)
            looking = full
        if not out and self.wait_time_seconds > 0:
            await self._polls.poll(n, visibility, order, self.wait_time_seconds)
            out = await self._take_prefetched(n, lease)
        # Within one batch, hand out the most urgent first (the worker starts
        # them in this order); across batches the tier weights decide.
        out.sort(key=lambda d: d.priority)
        if kinds is None:
            return out
        wanted = set(kinds)
        keep = [d for d in out if d.kind in wanted]
        for d in out:
            if d.kind not in wanted:
                await self._resend_uncounted(d, claimed=False)
        return keep

    def _quiet(self) -> bool:
        """Whether a claim goes straight to its long polls (one of every
        tier): each tier came back empty from a long poll of its own within
        the last ``wait_time_seconds``. Short polls then would only say again
        what those said (and a long poll answers at once when a message is
        there), while an idle consumer's short polls were half its receives."""
        if self.wait_time_seconds <= 0:
            return False
        since = time.monotonic() - self.wait_time_seconds
        return all(self._quiet_at.get(tier, since) > since for tier in range(len(self.tiers)))

    async def _take_prefetched(self, n: int, lease: float) -> list[Delivery]:
        """Hand out up to ``n`` deliveries a background long poll brought in,
        each renewed to ``lease`` (one request only if it has less left)."""
        out: list[Delivery] = []
        while len(out) < n and (delivery := self._polls.pop()) is not None:
            held = self._owned(delivery)
            if held is not None and held.deadline - time.monotonic() >= lease / 2:
                out.append(dataclasses.replace(delivery, lease_expires_at=held.expires))
                continue
            expires = await self.renew(delivery, lease)
            if expires is not None:
                out.append(dataclasses.replace(delivery, lease_expires_at=expires))
        return out

    async def _resend_uncounted(self, delivery: Delivery, *, claimed: bool) -> bool:
        """Put a delivery back with its attempt handed back. ``claimed``: a
        handler had it (a release), so Delivery.claims keeps this claim; a
        message of an unwanted kind was never handed out, so it does not."""
        held = await self._owns(delivery) if claimed else self._owned(delivery)
        if held is None:
            return False
        again = dataclasses.replace(
            held.message,
            attempts=held.attempt - 1,
            claims=held.claims if claimed else held.claims - 1,
        )
        await self._send(held.url, again, 0.0)
        self._fence.drop(delivery.token)
        await self._delete(held.url, delivery.token)
        return True

    async def renew(self, delivery: Delivery, at_least: float) -> float | None:
        """ChangeMessageVisibility, when the lease this process measured would
        end sooner than ``at_least`` from now. SQS caps a message's visibility
        at 12 hours from its receive: past that the lease cannot grow, and the
        expiry returned says so (it is earlier than asked)."""
        held = await self._owns(delivery)
        if held is None:
            return None
        now = time.monotonic()
        if held.deadline - now < at_least:
            ceiling = SQS_MAX_VISIBILITY_SECONDS - VISIBILITY_SAFETY - (now - held.received)
            visibility = max(0, min(math.ceil(at_least + self.fence_margin), math.floor(ceiling)))
            try:
                await self._sqs.call(
                    "change_message_visibility",
                    QueueUrl=held.url,
                    ReceiptHandle=delivery.token,
                    VisibilityTimeout=visibility,
                )
            except Exception as exc:
                if is_lost(error_code(exc)):
                    self._fence.drop(delivery.token)
                    return None
                raise
            self._fence.extend(held, visibility, started=now, now=self.clock.now())
        return held.expires

    async def ack(self, delivery: Delivery) -> Settlement:
        """Delete the message, then the job's marker, fenced on the version
        this delivery found: SQS can hand one message to two receivers at once
        (at-least-once delivery), and both receipts then delete it; the
        marker's conditional delete is what lets only one of them ack."""
        holding = await self._holding(delivery)
        if holding is None:
            return Settlement.LOST
        held, version = holding
        self._settled(delivery.token)
        deleted = await self._delete(held.url, delivery.token)
        if not deleted:
            return Settlement.LOST
        if self._markers is not None:
            dropped = await self._markers.drop(held.message.id, if_match=version)
            if version is not None and not dropped:
                return Settlement.LOST
        return Settlement.ACKED

    async def nack(
        self, delivery: Delivery, *, delay: float, count: bool = True, error: str | None = None
    ) -> Settlement:
        """Retry after ``delay``. A counted nack whose delay fits the visibility
        window is one ChangeMessageVisibility (the next receive counts the
        attempt by itself); anything else re-sends the message with the attempt
        base it needs and deletes the received copy."""
        held = await self._owns(delivery)
        if held is None:
            return Settlement.LOST
        if count and held.attempt >= held.message.max_attempts:
            return await self._kill(delivery, held, error or "exhausted its attempts", error)
        delay = max(0.0, delay)
        since_receive = time.monotonic() - held.received
        fits = (
            count
            and delay <= self.max_visibility_backoff
            and since_receive + delay < SQS_MAX_VISIBILITY_SECONDS - VISIBILITY_SAFETY
        )
        if fits:
            self._fence.drop(delivery.token)
            try:
                await self._sqs.call(
                    "change_message_visibility",
                    QueueUrl=held.url,
                    ReceiptHandle=delivery.token,
                    VisibilityTimeout=math.ceil(delay),
                )
            except Exception as exc:
                if is_lost(error_code(exc)):
                    return Settlement.LOST
                raise
        else:
            run_at = self.clock.now() + delay
            again = dataclasses.replace(
                held.message,
                attempts=held.attempt if count else held.attempt - 1,
                claims=held.claims,
                run_at=run_at,
                last_error=held.message.last_error if error is None else error,
            )
            await self._send(held.url, again, run_at)
            self._fence.drop(delivery.token)
            await self._delete(held.url, delivery.token)
        if delay <= 0:
            self._notify()
        return Settlement.RETRIED

    async def dead_letter(self, delivery: Delivery, reason: str) -> Settlement:
        held = await self._owns(delivery)
        if held is None:
            return Settlement.LOST
        return await self._kill(delivery, held, reason, None)

    async def _kill(
        self, delivery: Delivery, held: Held, reason: str, error: str | None
    ) -> Settlement:
        dead = dataclasses.replace(
            held.message,
            attempts=held.attempt,
            claims=held.claims,
            dead_reason=reason,
            died_at=self.clock.now(),
            last_error=held.message.last_error if error is None else error,
        )
        await self._send(await self._dead_url(), dead, 0.0)
        if self._markers is not None:
            await self._markers.write(dead)
        self._settled(delivery.token)
        # A dead id is still taken (until requeued or cancelled): remember it
        # here too, so this process's get() and enqueue() say so.
        self._local.remember(dead.id, dead)
        await self._delete(held.url, delivery.token)
        return Settlement.DEAD

    async def release(self, delivery: Delivery) -> Settlement:
        """Re-send with the attempt handed back, and delete the received copy:
        a visibility change to 0 would make the next receive count an attempt."""
        if not await self._resend_uncounted(delivery, claimed=True):
            return Settlement.LOST
        self._notify()
        return Settlement.RELEASED

    async def cancel(self, run_id: str) -> bool:
        """Cancel the job.

        With an id store, the job's marker is deleted: every process's claim
        then drops the message when it turns up (a GET per delivery pays for
        that check), so the cancel holds fleet-wide; True if there was a
        marker. A worker elsewhere that already holds the job is not told
        until it settles (its ack then finds nothing to undo); the workflow
        layer's CANCELLED outcome record, written first, is what stops it.

        Without one, only this process can tell: a delivery held here is
        deleted (its holder's next renew or settlement answers LOST) and the id
        is remembered, so a claim here drops its message when it shows up.
        True when this process knew the job as live."""
        known = self._local.is_live(run_id)
        self._local.cancel(run_id)
        for receipt, held in self._fence.receipts_of(run_id):
            self._fence.drop(receipt)
            await self._delete(held.url, receipt)
            known = True
        if self._markers is not None:
            if await self._markers.read(run_id) is not None:
                known = True
            await self._markers.drop(run_id)
        return known

    async def discard_dead(self, run_id: str) -> bool:
        """Free a dead job's id: its marker in the id store, if it says dead
        (a delete fenced on that marker's etag, so a requeue in between
        wins), and what this process remembers of it. Its message in the
        dead-letter queue stays until SQS's retention drops it; a requeue
        that meets it finds no marker naming it and deletes it."""
        remembered = self._local.live(run_id)
        discarded = remembered is not None and remembered.dead_reason is not None
        if discarded:
            self._local.forget(run_id)
        if self._markers is not None:
            discarded = await self._markers.drop_dead(run_id) or discarded
        return discarded

    async def requeue(self, run_id: str) -> bool:
        """Move a dead job back to its tier queue with its attempts reset.

        SQS has no lookup by id, so this scans the dead-letter queue: it
        receives batches of 10 (each hidden for ``dead_scan_visibility``
        seconds so the scan moves on), and gives back the ones that do not
        match. Cost: about 2 requests per 10 dead messages looked at, plus 3
        for the match. Use :meth:`requeue_all` to empty it in one pass."""
        return await self._requeue(lambda message: message.id == run_id, stop_at_first=True) > 0

    async def requeue_all(self) -> int:
        """Move every dead job back (attempts reset); returns how many."""
        return await self._requeue(lambda message: True, stop_at_first=False)

    async def _requeue(self, match: Callable[[JobMessage], bool], *, stop_at_first: bool) -> int:
        dead_url = await self._dead_url()
        moved = 0

        async def take(message: JobMessage, receipt: str, receives: int) -> bool:
            nonlocal moved
            if self._markers is not None and message.token is not None:
                marker = await self._markers.of(message)
                if marker is None:
                    # Cancelled while dead: nothing to bring back.
                    await self._delete(dead_url, receipt)
                    return False
                if message.spilled:
                    message = dataclasses.replace(message, payload=marker.payload)
            fresh = dead_letters.revived(message, receives, self.clock.now())
            if self._markers is not None and fresh.token is not None:
                await self._markers.write(fresh)
            await self._send(await self._tier_url(fresh.priority), fresh, 0.0)
            await self._delete(dead_url, receipt)
            self._local.uncancel(fresh.id)
            if self._local.is_live(fresh.id):
                self._local.remember(fresh.id, fresh)
            moved += 1
            return True

        try:
            return await dead_letters.scan(
                self._sqs,
                dead_url,
                visibility=self.dead_scan_visibility,
                match=match,
                take=take,
                stop_at_first=stop_at_first,
            )
        finally:
            if moved:
                self._notify()

    async def get(self, run_id: str) -> JobRecord | None:
        """What can honestly be said about the job.

        Held by this process: its record, RUNNING, exact. Otherwise, with an
        id store: None when it has no marker (acked, cancelled, never
        enqueued), DEAD when it was dead-lettered, else READY or SCHEDULED by
        its run-at: the job is live but SQS cannot say whether it is waiting
        or running elsewhere. Without an id store, a job this process enqueued
        is answered the same way from memory; for any other this raises
        :class:`SqsUnsupported` rather than answer None (which would claim the
        job is gone). SQS has no lookup by id."""
        now = self.clock.now()
        held = self._fence.holding(run_id)
        if held is not None:
            return _record(
                held.message,
                JobStatus.RUNNING,
                attempts=held.attempt,
                lease_expires_at=held.expires,
            )
        message: JobMessage | None
        if self._markers is not None:
            message = await self._markers.read(run_id)
            if message is None:
                return None
        else:
            message = self._local.live(run_id)
            if message is None:
                raise SqsUnsupported(
                    f"SqsQueue cannot look up job {run_id!r}: SQS has no lookup by id, this "
                    "process does not hold it and no id store was given; read the job's "
                    "outcome record instead"
                )
        if message.dead_reason is not None:
            status = JobStatus.DEAD
        elif message.run_at > now:
            status = JobStatus.SCHEDULED
        else:
            status = JobStatus.READY
        return _record(message, status, attempts=message.attempts)

    async def counts(self) -> dict[JobStatus, int]:
        """SQS's approximate totals (GetQueueAttributes, one request per queue).

        READY is ApproximateNumberOfMessages over the tiers, SCHEDULED is
        ...Delayed, RUNNING is ...NotVisible (which also holds counted retries
        waiting out a backoff on the visibility timeout), DEAD is everything
        in the dead-letter queue. SQS says these may lag by about a minute."""
        totals = dict.fromkeys(QUEUE_STATUSES, 0)
        names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        names.append("ApproximateNumberOfMessagesDelayed")
        for queue_name in self.queue_names:
            url = await self._sqs.url(queue_name)
            response = await self._sqs.call(
                "get_queue_attributes", QueueUrl=url, AttributeNames=names
            )
            attrs = response["Attributes"]
            ready, hidden, delayed = (int(attrs.get(k, 0)) for k in names)
            if queue_name == self.dead_queue_name:
                totals[JobStatus.DEAD] += ready + hidden + delayed
            else:
                totals[JobStatus.READY] += ready
                totals[JobStatus.RUNNING] += hidden
                totals[JobStatus.SCHEDULED] += delayed
        return totals

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Wake ``listener`` on this process's enqueues, releases and requeues
        (other processes' work arrives through the long poll)."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    async def flush(self) -> None:
        """Send what the batchers are holding now (close() does this too)."""
        await self._sender.drain()
        await self._deleter.drain()

    async def close(self) -> None:
        """Wait out background long polls (at most ``wait_time_seconds``), put
        back what they brought uncounted, flush pending batches and close the
        SQS client."""
        if not self._sqs.opened:
            return
        try:
            for delivery in await self._polls.settle():
                await self._resend_uncounted(delivery, claimed=False)
            await self.flush()
        finally:
            await self._sqs.close()

    async def __aenter__(self) -> SqsQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _record(
    message: JobMessage,
    status: JobStatus,
    *,
    attempts: int,
    lease_expires_at: float | None = None,
) -> JobRecord:
    return JobRecord(
        id=message.id,
        kind=message.kind,
        status=status,
        priority=message.priority,
        attempts=attempts,
        max_attempts=message.max_attempts,
        run_at=message.run_at,
        created_at=message.enqueued_at,
        updated_at=message.enqueued_at if message.died_at is None else message.died_at,
        payload=message.payload or b"",
        headers=dict(message.headers),
        lease_expires_at=lease_expires_at,
        last_error=message.last_error,
        dead_reason=message.dead_reason,
    )

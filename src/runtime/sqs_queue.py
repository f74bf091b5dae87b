"""SqsQueue: the lease queue on Amazon SQS, for fleets that outgrow polling a bucket.

Memos and outcome records stay on S3 (the workflow layer writes them); only
the queue moves. The mapping onto SQS, and why (docs/scaling.md has the
long form):

- **Lease = visibility timeout.** A claim is a ReceiveMessage with
  ``VisibilityTimeout`` = the lease; renew is ChangeMessageVisibility; a
  lease that lapses makes the message visible again and the next receive is
  the reclaim, counted.
- **Token = receipt handle, plus a local fence.** SQS accepts a stale receipt
  handle: DeleteMessage "succeeds, but the message might not be deleted", and
  moto deletes or re-times the message with any handle it ever had. So the
  handle alone cannot report LOST. This queue therefore fences each delivery
  on two things it does know: the lease deadline it measured itself (a
  monotonic clock started *before* the receive, minus a margin, so it ends
  before SQS's), and the newest handle this process saw for the message. Past
  either, every transition answers LOST without calling SQS. A zombie whose
  lease lapsed thus never deletes, re-times or dead-letters a message someone
  else now holds, as long as its own process is alive to check. What remains
  is at-least-once delivery, which the workflow layer's first-writer-wins
  outcome records and memos make harmless.
- **Attempts = ApproximateReceiveCount + a carried base.** Every receive
  bumps SQS's count; operations that must not burn an attempt (release, an
  uncounted nack, a message put back because it came early or is of an
  unwanted kind) re-send the message with the base lowered by one and delete
  the received copy, so the count restarts from the right number.
- **Delays = DelaySeconds, capped at 15 minutes.** A run-at or backoff further
  out is sent with the cap; when the message arrives early it is re-sent with
  the remaining delay (re-deferred) instead of delivered. A counted nack whose
  delay fits in the visibility window is one ChangeMessageVisibility instead.
- **Dead = a dead-letter queue.** ``dead_letter`` sends the message there with
  the reason in the body; the tier queues also carry a RedrivePolicy as a
  last-resort net. ``requeue(id)`` has to scan the dead-letter queue: SQS
  cannot find a message by id.
- **Priorities = one SQS queue per tier**, polled by weight (4:2:1 by default)
  so lower tiers are never starved; long polling only when every tier came
  back empty.
- **Ids live in an id store, or in this process only.** SQS standard queues
  do not deduplicate. With ``id_store`` (an ObjectStore: the bucket) each job
  has a create-if-absent marker, so dedup by id, ``get``, ``cancel`` and
  dropping SQS's duplicate deliveries work fleet-wide; without it they work
  within this process only. The marker also holds the payload, so a payload
  over ``spill_bytes`` is left out of the message (kept on S3, read back by
  the claim's marker check at no extra request).
- **What SQS cannot do is left out or refused, not faked.** There is no
  ``list`` (the queue is no :class:`runtime.queue_inspection.JobListing`);
  ``get`` is exact for jobs this process holds and says "live"
  (READY/SCHEDULED) or DEAD from the marker for the rest (or raises
  :class:`SqsUnsupported`, without an id store, for jobs this process never
  saw); ``counts`` is SQS's approximate numbers; ``next_due`` is None.

aiobotocore is imported when the first request is made, so ``import runtime``
stays cheap for users who never touch SQS.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import math
import re
import secrets
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stepstone.store import AlreadyExists, NotFound, ObjectStore

from .clock import Clock, SystemClock
from .errors import PayloadTooLarge, QueueError
from .queue import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_PAYLOAD_BYTES,
    Delivery,
    Enqueued,
    JobRecord,
    JobStatus,
    LeaseQueue,
    Settlement,
    check_enqueue,
)
from .queue import PRIORITY_NORMAL as _PRIORITY_NORMAL
from .queue_inspection import DeadJobRequeue, JobCounts

SQS_MAX_DELAY_SECONDS = 900
"""SendMessage's DelaySeconds cap: 15 minutes."""
SQS_MAX_VISIBILITY_SECONDS = 43_200
"""A message's visibility cannot reach past 12 hours from its receive."""
SQS_MAX_MESSAGE_BYTES = 1_048_576
"""SQS's message size limit since August 2025 (it was 256 KiB before); a queue's
MaximumMessageSize attribute may set it lower. :meth:`SqsQueue.create_queues`
sets it to this."""
SQS_MAX_BATCH = 10
"""Entries per ReceiveMessage, SendMessageBatch and DeleteMessageBatch."""
SQS_MAX_WAIT_SECONDS = 20
"""Longest long poll SQS allows."""
DEFAULT_MAX_RECEIVE_COUNT = 100
"""The redrive policy's maxReceiveCount: a safety net only. The worker
dead-letters a job itself once its attempts run out (so the workflow layer
writes a failed outcome); SQS's redrive catches only a message received this
many times without ever being settled or re-sent."""
RETENTION_SECONDS = 1_209_600
"""14 days, SQS's maximum, set on every queue :meth:`SqsQueue.create_queues` makes."""

logger = logging.getLogger("stepstone.runtime.sqs_queue")

_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,70}$")
_VISIBILITY_SAFETY = 60.0
"""Seconds kept clear of the 12-hour visibility ceiling when deciding whether a
backoff can ride on the visibility timeout (moto measures it from the send,
AWS from the receive; both are covered)."""
_LOST_CODES = ("ReceiptHandleIsInvalid", "MessageNotInflight", "InvalidParameterValue")


class SqsUnsupported(QueueError, NotImplementedError):
    """SQS cannot answer this (it has no lookup by id)."""


@dataclass(frozen=True, slots=True)
class Tier:
    """One SQS queue holding the priorities ``lowest..highest`` (inclusive)."""

    suffix: str
    lowest: int
    highest: int
    weight: int
    """Share of polls that look at this tier first; 4:2:1 means the high tier
    is polled first 4 times in 7, the low tier once, so none starves."""


DEFAULT_TIERS: tuple[Tier, ...] = (
    Tier("high", 0, 3, 4),
    Tier("normal", 4, 6, 2),
    Tier("low", 7, 9, 1),
)


@dataclass(slots=True)
class _Held:
    """What this process knows about one live delivery (keyed by receipt handle)."""

    job_id: str
    message_id: str
    url: str
    body: dict[str, Any]
    attempt: int
    claims: int
    received: float
    """time.monotonic() just before the receive that produced it."""
    deadline: float
    """time.monotonic() past which the lease may have lapsed at SQS."""
    expires: float
    """The same deadline on the injected clock, as Delivery.lease_expires_at says."""


@dataclass(slots=True)
class _Pending:
    url: str
    entry: dict[str, Any]
    future: asyncio.Future[dict[str, Any]]


@dataclass(slots=True)
class _Batcher:
    """Collects single requests for ``batch_window`` seconds (or 10 of them) and
    sends them as one batch call, so a worker's acks and a burst of enqueues
    cost a tenth of the requests. Each caller gets its own entry's result."""

    queue: SqsQueue
    operation: str
    window: float
    max_bytes: int = 262_144
    pending: dict[str, list[_Pending]] = field(default_factory=dict)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    timers: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    async def submit(self, url: str, entry: dict[str, Any]) -> dict[str, Any]:
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        bucket = self.pending.setdefault(url, [])
        bucket.append(_Pending(url, entry, future))
        if len(bucket) >= SQS_MAX_BATCH:
            self._spawn(self._flush(url))
        elif url not in self.timers:
            self.timers[url] = self._spawn(self._flush_later(url))
        return await future

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def _flush_later(self, url: str) -> None:
        try:
            await asyncio.sleep(self.window)
        finally:
            self.timers.pop(url, None)
        await self._flush(url)

    async def _flush(self, url: str) -> None:
        while self.pending.get(url):
            bucket = self.pending[url]
            batch: list[_Pending] = []
            size = 0
            while bucket and len(batch) < SQS_MAX_BATCH:
                item_size = len(str(bucket[0].entry.get("MessageBody", "")))
                if batch and size + item_size > self.max_bytes:
                    break
                batch.append(bucket.pop(0))
                size += item_size
            entries = [dict(p.entry, Id=str(i)) for i, p in enumerate(batch)]
            try:
                response = await self.queue._call(self.operation, QueueUrl=url, Entries=entries)
            except BaseException as exc:
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
                continue
            for ok in response.get("Successful", []):
                p = batch[int(ok["Id"])]
                if not p.future.done():
                    p.future.set_result(dict(ok, ok=True))
            for failed in response.get("Failed", []):
                p = batch[int(failed["Id"])]
                if not p.future.done():
                    p.future.set_result(dict(failed, ok=False))

    async def drain(self) -> None:
        for url in list(self.pending):
            await self._flush(url)
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)


def _error_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


def _is_lost(code: str) -> bool:
    return any(c in code for c in _LOST_CODES)


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
        max_visibility_backoff: float = SQS_MAX_VISIBILITY_SECONDS - _VISIBILITY_SAFETY,
        fence_margin: float = 1.0,
        batch_window: float = 0.01,
        dead_scan_visibility: int = 30,
        remember_ids: int = 10_000,
        remember_bytes: int = 64 * 1024 * 1024,
        id_prefix: str = "sqs-ids",
        spill_bytes: int = 60 * 1024,
    ) -> None:
        if not _NAME_RE.match(name):
            raise ValueError(
                f"SQS queue base name must be 1-70 letters, digits, '-' or '_', got {name!r}"
            )
        _check_tiers(tiers)
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
        self.requests: Counter[str] = Counter()
        """SQS requests made, by operation (what docs/scaling.md's costs count)."""
        self._client_obj: Any = None
        self._client_lock: asyncio.Lock | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._urls: dict[str, str] = {}
        self._held: dict[str, _Held] = {}
        self._latest: dict[str, str] = {}
        """message id -> newest receipt handle this process saw."""
        self._live: OrderedDict[str, dict[str, Any] | None] = OrderedDict()
        """Ids this process enqueued (with the message body) or holds, and
        has not seen settled: per-process dedup and get() without an id store."""
        self._live_bytes = 0
        self._remember_bytes = remember_bytes
        self.id_store = id_store
        self.id_prefix = id_prefix.rstrip("/")
        self.spill_bytes = spill_bytes
        self._cancelled: OrderedDict[str, None] = OrderedDict()
        self._remember = remember_ids
        self._wrr = [0] * len(self.tiers)
        self._listeners: list[Callable[[], None]] = []
        self._deleter = _Batcher(self, "delete_message_batch", batch_window)
        self._polls: dict[int, asyncio.Task[list[Delivery]]] = {}
        """Background long polls by tier index (see :meth:`_long_poll`)."""
        self._prefetched: list[Delivery] = []
        self._poll_error: BaseException | None = None
        self._sender = _Batcher(self, "send_message_batch", batch_window)

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
        dead = await self._call("create_queue", QueueName=self.dead_queue_name, Attributes=common)
        dead_url: str = dead["QueueUrl"]
        self._urls[self.dead_queue_name] = dead_url
        attrs = await self._call(
            "get_queue_attributes", QueueUrl=dead_url, AttributeNames=["QueueArn"]
        )
        redrive = json.dumps(
            {
                "deadLetterTargetArn": attrs["Attributes"]["QueueArn"],
                "maxReceiveCount": str(max_receive_count),
            }
        )
        for queue_name in self.queue_names[:-1]:
            made = await self._call(
                "create_queue",
                QueueName=queue_name,
                Attributes=dict(common, RedrivePolicy=redrive),
            )
            self._urls[queue_name] = made["QueueUrl"]

    # -- plumbing ----------------------------------------------------------

    async def _client(self) -> Any:
        if self._client_obj is not None:
            return self._client_obj
        if self._client_lock is None:
            self._client_lock = asyncio.Lock()
        async with self._client_lock:
            if self._client_obj is None:
                from aiobotocore.session import get_session

                stack = contextlib.AsyncExitStack()
                creator = get_session().create_client(
                    "sqs", endpoint_url=self.endpoint_url, region_name=self.region
                )
                self._client_obj = await stack.enter_async_context(creator)
                self._stack = stack
        return self._client_obj

    async def _call(self, operation: str, **params: Any) -> dict[str, Any]:
        client = await self._client()
        self.requests[operation] += 1
        result: dict[str, Any] = await getattr(client, operation)(**params)
        return result

    async def _url(self, queue_name: str) -> str:
        url = self._urls.get(queue_name)
        if url is None:
            found = await self._call("get_queue_url", QueueName=queue_name)
            url = self._urls[queue_name] = str(found["QueueUrl"])
        return url

    def _tier_of(self, priority: int) -> Tier:
        for tier in self.tiers:
            if tier.lowest <= priority <= tier.highest:
                return tier
        raise AssertionError("tiers cover 0..9")  # _check_tiers guarantees it

    async def _tier_url(self, priority: int) -> str:
        return await self._url(f"{self.name}-{self._tier_of(priority).suffix}")

    async def _dead_url(self) -> str:
        return await self._url(self.dead_queue_name)

    def _remember_live(self, job_id: str, body: dict[str, Any] | None = None) -> None:
        if job_id in self._live:
            if body is None:
                self._live.move_to_end(job_id)
                return
            self._forget_live(job_id)
        self._live[job_id] = body
        self._live_bytes += 0 if body is None else len(body.get("p", ""))
        while self._live and (
            len(self._live) > self._remember or self._live_bytes > self._remember_bytes
        ):
            self._forget_live(next(iter(self._live)))

    def _forget_live(self, job_id: str) -> None:
        body = self._live.pop(job_id, None)
        if body is not None:
            self._live_bytes -= len(body.get("p", ""))

    def _marker_key(self, job_id: str) -> str:
        """Where the id store keeps the job's marker: job ids are any text, so
        the key is their SHA-256."""
        return f"{self.id_prefix}/{hashlib.sha256(job_id.encode()).hexdigest()}"

    async def _marker(self, job_id: str) -> dict[str, Any] | None:
        assert self.id_store is not None
        try:
            found = await self.id_store.get(self._marker_key(job_id))
        except NotFound:
            return None
        marker: dict[str, Any] = json.loads(found.data)
        return marker

    async def _drop_marker(self, job_id: str) -> None:
        if self.id_store is not None:
            with contextlib.suppress(NotFound):
                await self.id_store.delete(self._marker_key(job_id))

    def _notify(self) -> None:
        for listener in list(self._listeners):
            listener()

    def _encode(self, body: dict[str, Any]) -> str:
        return json.dumps(body, separators=(",", ":"))

    def _delay_for(self, run_at: float) -> int:
        remaining = run_at - self.clock.now()
        if remaining <= 0:
            return 0
        return min(math.ceil(remaining), self.max_delay_seconds)

    async def _send(self, url: str, body: dict[str, Any], run_at: float) -> None:
        """Send one message (batched). A spilled job's payload stays in its
        marker: the message carries everything else."""
        if body.get("sp"):
            body = {k: v for k, v in body.items() if k != "p"}
        text = self._encode(body)
        size = len(text.encode())
        if size > self.max_message_bytes:
            raise PayloadTooLarge(
                f"job {body['id']!r}: its SQS message is {size} bytes (the payload is "
                f"base64-encoded), over the limit of {self.max_message_bytes} bytes"
            )
        entry = {"MessageBody": text, "DelaySeconds": self._delay_for(run_at)}
        result = await self._sender.submit(url, entry)
        if not result["ok"]:
            raise QueueError(
                f"SQS refused job {body['id']!r}: {result.get('Code')}: {result.get('Message')}"
            )

    async def _delete(self, url: str, receipt: str) -> bool:
        result = await self._deleter.submit(url, {"ReceiptHandle": receipt})
        if result["ok"]:
            return True
        if _is_lost(str(result.get("Code", ""))):
            return False
        raise QueueError(f"SQS refused a delete: {result.get('Code')}: {result.get('Message')}")

    # -- fencing -----------------------------------------------------------

    def _owned(self, delivery: Delivery) -> _Held | None:
        """The delivery's local record if it still owns the job, else None.

        Owning means: this process has it as a live delivery, no newer receipt
        of the same message has been seen here, the job was not cancelled here,
        and the lease this process measured has not run out."""
        held = self._held.get(delivery.token)
        if held is None or held.job_id != delivery.id:
            return None
        if self._latest.get(held.message_id) != delivery.token or held.job_id in self._cancelled:
            self._drop(delivery.token)
            return None
        if time.monotonic() >= held.deadline:
            self._drop(delivery.token)
            return None
        return held

    async def _owns(self, delivery: Delivery) -> _Held | None:
        """:meth:`_owned`, and with an id store, the job's marker still names
        this enqueue (one GET): a cancel or a settlement in another process
        deleted or replaced it, and then this delivery has lost the job."""
        held = self._owned(delivery)
        if held is None or self.id_store is None or "tok" not in held.body:
            return held
        marker = await self._marker(held.job_id)
        if marker is None or marker.get("tok") != held.body["tok"] or "dead" in marker:
            self._drop(delivery.token)
            return None
        return held

    def _drop(self, receipt: str) -> _Held | None:
        held = self._held.pop(receipt, None)
        if held is not None and self._latest.get(held.message_id) == receipt:
            del self._latest[held.message_id]
        return held

    def _settled(self, receipt: str) -> None:
        held = self._drop(receipt)
        if held is not None:
            self._forget_live(held.job_id)

    def _margin(self, visibility: float) -> float:
        """What a lease of ``visibility`` seconds loses to the fence: the margin,
        but at most a fifth of it, so one-second test leases stay usable."""
        return min(self.fence_margin, visibility * 0.2)

    def _prune(self) -> None:
        now = time.monotonic()
        for receipt in [r for r, h in self._held.items() if h.deadline < now]:
            self._drop(receipt)

    # -- the contract ------------------------------------------------------

    async def enqueue(
        self,
        payload: bytes,
        *,
        kind: str = "",
        id: str | None = None,
        priority: int = _PRIORITY_NORMAL,
        run_at: float | None = None,
        max_attempts: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Enqueued:
        """Send the job to its tier's queue.

        With an id store, the job's marker is written first, create-if-absent:
        ``created`` is False when any process holds a live job of this id.
        Without one, ``created`` is False only when *this process* enqueued (or
        holds) the id and has not seen it settled: SQS standard queues do not
        deduplicate, so another process's enqueue of the same id adds a second
        message, and the workflow layer would run it as a second incarnation
        (see the class docstring)."""
        job_id = check_enqueue(
            payload,
            id=id,
            priority=priority,
            max_attempts=max_attempts,
            max_payload_bytes=self.max_payload_bytes,
        )
        if self.id_store is None and job_id in self._live:
            return Enqueued(job_id, created=False)
        if self.id_store is None and len(payload) * 4 // 3 + 1024 > self.max_message_bytes:
            raise PayloadTooLarge(
                f"payload of {len(payload)} bytes is over what one SQS message of "
                f"{self.max_message_bytes} bytes carries once base64-encoded (an id "
                "store would keep it on S3)"
            )
        now = self.clock.now()
        due = now if run_at is None else run_at
        body: dict[str, Any] = {
            "v": 1,
            "id": job_id,
            "kind": kind,
            "prio": priority,
            "max": max_attempts or self.default_max_attempts,
            "run_at": due,
            "enq": now,
            "a": 0,
            "c": 0,
            "h": dict(headers or {}),
            "p": base64.b64encode(payload).decode("ascii"),
        }
        if self.id_store is not None:
            body["tok"] = secrets.token_hex(8)
            if len(body["p"]) > self.spill_bytes:
                # Kept in the marker, which every claim reads anyway: the
                # message stays small (SQS bills each 64 KiB as a request).
                body["sp"] = 1
            try:
                await self.id_store.put_if_absent(
                    self._marker_key(job_id), self._encode(body).encode()
                )
            except AlreadyExists:
                return Enqueued(job_id, created=False)
        self._cancelled.pop(job_id, None)
        self._remember_live(job_id, body)
        try:
            await self._send(await self._tier_url(priority), body, due)
        except BaseException:
            self._forget_live(job_id)
            if self.id_store is not None:
                with contextlib.suppress(Exception):
                    await self._drop_marker(job_id)
            raise
        self._notify()
        return Enqueued(job_id, created=True)

    def _tier_order(self) -> list[int]:
        """Tier indexes for one claim: the first by smooth weighted round robin
        (so over 7 claims a 4:2:1 split looks first at high 4 times, normal 2,
        low once), then the rest in priority order."""
        total = sum(t.weight for t in self.tiers)
        for i, tier in enumerate(self.tiers):
            self._wrr[i] += tier.weight
        first = max(range(len(self.tiers)), key=lambda i: self._wrr[i])
        self._wrr[first] -= total
        return [first] + [i for i in range(len(self.tiers)) if i != first]

    async def _receive(self, tier: int, n: int, lease: int, wait: int) -> list[Delivery]:
        return (await self._receive_counted(tier, n, lease, wait))[0]

    async def _receive_counted(
        self, tier: int, n: int, lease: int, wait: int
    ) -> tuple[list[Delivery], int]:
        """Receive up to ``n`` from a tier: the deliveries, and how many
        messages came (some are dealt with here: early, cancelled, duplicate)."""
        url = await self._url(f"{self.name}-{self.tiers[tier].suffix}")
        started = time.monotonic()
        response = await self._call(
            "receive_message",
            QueueUrl=url,
            MaxNumberOfMessages=n,
            VisibilityTimeout=lease,
            WaitTimeSeconds=wait,
            MessageSystemAttributeNames=["ApproximateReceiveCount"],
        )
        out: list[Delivery] = []
        for message in response.get("Messages", []):
            delivery = await self._accept(url, message, started, lease)
            if delivery is not None:
                out.append(delivery)
        return out, len(response.get("Messages", []))

    async def _accept(
        self, url: str, message: dict[str, Any], started: float, lease: int
    ) -> Delivery | None:
        """Turn one received message into a Delivery, or deal with it here:
        drop a cancelled job, re-defer an early one, dead-letter a foreign one."""
        receipt: str = message["ReceiptHandle"]
        received = int(message.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
        try:
            body = json.loads(message["Body"])
            job_id = str(body["id"])
            if not body.get("sp"):
                base64.b64decode(body["p"], validate=True)
        except (ValueError, KeyError, TypeError, binascii.Error):
            await self._send(
                await self._dead_url(),
                {"v": 1, "id": message.get("MessageId", ""), "foreign": message.get("Body", "")}
                | {"dead": "not a stepstone message", "a": 0, "c": received},
                0.0,
            )
            await self._delete(url, receipt)
            return None
        attempt = int(body.get("a", 0)) + received
        claims = int(body.get("c", 0)) + received
        if job_id in self._cancelled:
            await self._delete(url, receipt)
            return None
        if self.id_store is not None and "tok" in body:
            marker = await self._marker(job_id)
            if marker is None or marker.get("tok") != body["tok"] or "dead" in marker:
                # Acked, cancelled or dead-lettered already: this is a
                # duplicate (SQS delivers at least once) or a cancelled job.
                await self._delete(url, receipt)
                return None
            if body.get("sp"):
                body["p"] = marker["p"]
        elif body.get("sp"):
            # Sent by a process with an id store: this one, without, cannot
            # read the payload. Leave it to them (it shows again after the lease).
            logger.warning("%r: job %s keeps its payload in an id store", self, job_id)
            return None
        payload = base64.b64decode(body["p"])
        run_at = float(body.get("run_at", 0.0))
        if run_at > self.clock.now():
            # Arrived before its run-at (DelaySeconds stops at 15 minutes):
            # send it again for the rest of the wait, this receive not counted.
            await self._send(url, dict(body, a=attempt - 1, c=claims - 1), run_at)
            await self._delete(url, receipt)
            return None
        deadline = started + lease - self._margin(lease)
        message_id: str = message["MessageId"]
        old = self._latest.get(message_id)
        if old is not None:
            self._held.pop(old, None)
        self._latest[message_id] = receipt
        self._held[receipt] = _Held(
            job_id=job_id,
            message_id=message_id,
            url=url,
            body=body,
            attempt=attempt,
            claims=claims,
            received=started,
            deadline=deadline,
            expires=self.clock.now() + lease - self._margin(lease),
        )
        self._remember_live(job_id)
        return Delivery(
            id=job_id,
            kind=str(body.get("kind", "")),
            payload=payload,
            attempt=attempt,
            max_attempts=int(body.get("max", self.default_max_attempts)),
            token=receipt,
            lease_expires_at=self._held[receipt].expires,
            priority=int(body.get("prio", _PRIORITY_NORMAL)),
            headers=dict(body.get("h", {})),
            enqueued_at=float(body.get("enq", 0.0)),
            claims=claims,
        )

    async def claim(
        self, n: int, *, lease: float, kinds: Collection[str] | None = None
    ) -> list[Delivery]:
        """Receive up to ``n`` messages across the tiers, weighted; long-poll
        only when every tier came back empty.

        SQS cannot filter by kind: with ``kinds``, a message of another kind is
        put back uncounted (re-sent and deleted, two requests). A fleet that
        splits work by kind should give each kind its own SqsQueue instead."""
        if n <= 0:
            return []
        self._prune()
        visibility = max(1, min(math.ceil(lease), SQS_MAX_VISIBILITY_SECONDS))
        out = await self._take_prefetched(n, lease)
        order = self._tier_order()
        # Look at every tier once; go back only to tiers that filled a batch.
        looking = order
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
            await self._long_poll(n, visibility, order)
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

    async def _long_poll(self, n: int, visibility: int, order: list[int]) -> None:
        """Every tier came back empty (or short polling sampled servers that
        were): long-poll as many tiers at once as ``n`` allows, heaviest first,
        splitting ``n`` between them, and return as soon as any answers.

        The polls still waiting keep running in the background (a long poll
        cannot be withdrawn: cancelling the request could lose messages SQS
        already hid for it); whatever they bring is kept for the next claim,
        which renews each lease before handing it out. A tier with a poll
        still out gets no second one."""
        by_weight = sorted(order, key=lambda i: -self.tiers[i].weight)[:n]
        idle = [i for i in by_weight if i not in self._polls]
        quotas = _split(n, [self.tiers[i].weight for i in idle]) if idle else []
        for tier, quota in zip(idle, quotas, strict=True):
            task = asyncio.get_running_loop().create_task(
                self._receive(tier, quota, visibility, self.wait_time_seconds)
            )
            self._polls[tier] = task
            task.add_done_callback(functools.partial(self._poll_done, tier))
        while not self._prefetched and self._polls and self._poll_error is None:
            await asyncio.wait(set(self._polls.values()), return_when=asyncio.FIRST_COMPLETED)
            await asyncio.sleep(0)  # let the done callbacks run
        if self._poll_error is not None:
            error, self._poll_error = self._poll_error, None
            raise error

    def _poll_done(self, tier: int, task: asyncio.Task[list[Delivery]]) -> None:
        if self._polls.get(tier) is task:
            del self._polls[tier]
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self._poll_error = error
            return
        self._prefetched.extend(task.result())

    async def _take_prefetched(self, n: int, lease: float) -> list[Delivery]:
        """Hand out up to ``n`` deliveries a background long poll brought in,
        each renewed to ``lease`` (one request only if it has less left)."""
        out: list[Delivery] = []
        while self._prefetched and len(out) < n:
            delivery = self._prefetched.pop(0)
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
        body = dict(held.body, a=held.attempt - 1, c=held.claims if claimed else held.claims - 1)
        await self._send(held.url, body, 0.0)
        self._drop(delivery.token)
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
            ceiling = SQS_MAX_VISIBILITY_SECONDS - _VISIBILITY_SAFETY - (now - held.received)
            visibility = max(0, min(math.ceil(at_least + self.fence_margin), math.floor(ceiling)))
            try:
                await self._call(
                    "change_message_visibility",
                    QueueUrl=held.url,
                    ReceiptHandle=delivery.token,
                    VisibilityTimeout=visibility,
                )
            except Exception as exc:
                if _is_lost(_error_code(exc)):
                    self._drop(delivery.token)
                    return None
                raise
            held.deadline = max(held.deadline, now + visibility - self._margin(visibility))
            held.expires = max(
                held.expires, self.clock.now() + visibility - self._margin(visibility)
            )
        return held.expires

    async def ack(self, delivery: Delivery) -> Settlement:
        held = await self._owns(delivery)
        if held is None:
            return Settlement.LOST
        self._settled(delivery.token)
        deleted = await self._delete(held.url, delivery.token)
        if not deleted:
            return Settlement.LOST
        await self._drop_marker(held.job_id)
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
        max_attempts = int(held.body.get("max", self.default_max_attempts))
        if count and held.attempt >= max_attempts:
            return await self._kill(delivery, held, error or "exhausted its attempts", error)
        delay = max(0.0, delay)
        since_receive = time.monotonic() - held.received
        fits = (
            count
            and delay <= self.max_visibility_backoff
            and since_receive + delay < SQS_MAX_VISIBILITY_SECONDS - _VISIBILITY_SAFETY
        )
        if fits:
            self._drop(delivery.token)
            try:
                await self._call(
                    "change_message_visibility",
                    QueueUrl=held.url,
                    ReceiptHandle=delivery.token,
                    VisibilityTimeout=math.ceil(delay),
                )
            except Exception as exc:
                if _is_lost(_error_code(exc)):
                    return Settlement.LOST
                raise
        else:
            run_at = self.clock.now() + delay
            body = dict(
                held.body,
                a=held.attempt if count else held.attempt - 1,
                c=held.claims,
                run_at=run_at,
            )
            if error is not None:
                body["err"] = error
            await self._send(held.url, body, run_at)
            self._drop(delivery.token)
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
        self, delivery: Delivery, held: _Held, reason: str, error: str | None
    ) -> Settlement:
        body = dict(held.body, a=held.attempt, c=held.claims, dead=reason, died=self.clock.now())
        if error is not None:
            body["err"] = error
        await self._send(await self._dead_url(), body, 0.0)
        if self.id_store is not None:
            await self.id_store.put(self._marker_key(held.job_id), self._encode(body).encode())
        self._settled(delivery.token)
        # A dead id is still taken (until requeued or cancelled): remember it
        # here too, so this process's get() and enqueue() say so.
        self._remember_live(held.job_id, body)
        await self._delete(held.url, delivery.token)
        return Settlement.DEAD

    async def release(self, delivery: Delivery) -> Settlement:
        """Re-send with the attempt handed back, and delete the received copy:
        a visibility change to 0 would make the next receive count an attempt."""
        if not await self._resend_uncounted(delivery, claimed=True):
            return Settlement.LOST
        self._notify()
        return Settlement.RELEASED

    async def cancel(self, id: str) -> bool:
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
        known = id in self._live
        self._cancelled[id] = None
        while len(self._cancelled) > self._remember:
            self._cancelled.popitem(last=False)
        self._forget_live(id)
        for receipt, held in list(self._held.items()):
            if held.job_id == id:
                self._drop(receipt)
                await self._delete(held.url, receipt)
                known = True
        if self.id_store is not None:
            if await self._marker(id) is not None:
                known = True
            await self._drop_marker(id)
        return known

    async def requeue(self, id: str) -> bool:
        """Move a dead job back to its tier queue with its attempts reset.

        SQS has no lookup by id, so this scans the dead-letter queue: it
        receives batches of 10 (each hidden for ``dead_scan_visibility``
        seconds so the scan moves on), and gives back the ones that do not
        match. Cost: about 2 requests per 10 dead messages looked at, plus 3
        for the match. Use :meth:`requeue_all` to empty it in one pass."""
        return await self._scan_dead(lambda body: body.get("id") == id, stop_at_first=True) > 0

    async def requeue_all(self) -> int:
        """Move every dead job back (attempts reset); returns how many."""
        return await self._scan_dead(lambda body: "foreign" not in body, stop_at_first=False)

    async def _scan_dead(
        self, match: Callable[[dict[str, Any]], bool], *, stop_at_first: bool
    ) -> int:
        dead_url = await self._dead_url()
        skipped: list[str] = []
        moved = 0
        try:
            while True:
                response = await self._call(
                    "receive_message",
                    QueueUrl=dead_url,
                    MaxNumberOfMessages=SQS_MAX_BATCH,
                    VisibilityTimeout=self.dead_scan_visibility,
                    WaitTimeSeconds=1,
                    MessageSystemAttributeNames=["ApproximateReceiveCount"],
                )
                messages = response.get("Messages", [])
                if not messages:
                    return moved
                for message in messages:
                    try:
                        body = json.loads(message["Body"])
                    except ValueError:
                        body = {}
                    if not isinstance(body, dict) or not match(body) or "id" not in body:
                        skipped.append(message["ReceiptHandle"])
                        continue
                    if self.id_store is not None and "tok" in body:
                        marker = await self._marker(str(body["id"]))
                        if marker is None or marker.get("tok") != body["tok"]:
                            # Cancelled while dead: nothing to bring back.
                            await self._delete(dead_url, message["ReceiptHandle"])
                            continue
                        if body.get("sp"):
                            body["p"] = marker["p"]
                    received = int(message.get("Attributes", {}).get("ApproximateReceiveCount", 1))
                    # Claims keep counting (over-counting is safe: it only
                    # makes the workflow layer look for memos).
                    fresh = {k: v for k, v in body.items() if k not in ("dead", "died", "err")}
                    fresh.update(a=0, c=int(body.get("c", 0)) + received, run_at=self.clock.now())
                    priority = int(fresh.get("prio", _PRIORITY_NORMAL))
                    if self.id_store is not None and "tok" in fresh:
                        key = self._marker_key(str(fresh["id"]))
                        await self.id_store.put(key, self._encode(fresh).encode())
                    await self._send(await self._tier_url(priority), fresh, 0.0)
                    await self._delete(dead_url, message["ReceiptHandle"])
                    self._cancelled.pop(str(body["id"]), None)
                    if str(body["id"]) in self._live:
                        self._remember_live(str(body["id"]), fresh)
                    moved += 1
                    if stop_at_first:
                        return moved
        finally:
            if moved:
                self._notify()
            for start in range(0, len(skipped), SQS_MAX_BATCH):
                chunk = skipped[start : start + SQS_MAX_BATCH]
                await self._call(
                    "change_message_visibility_batch",
                    QueueUrl=dead_url,
                    Entries=[
                        {"Id": str(i), "ReceiptHandle": r, "VisibilityTimeout": 0}
                        for i, r in enumerate(chunk)
                    ],
                )

    async def get(self, id: str) -> JobRecord | None:
        """What can honestly be said about the job.

        Held by this process: its record, CLAIMED, exact. Otherwise, with an
        id store: None when it has no marker (acked, cancelled, never
        enqueued), DEAD when it was dead-lettered, else READY or SCHEDULED by
        its run-at: the job is live but SQS cannot say whether it is waiting
        or running elsewhere. Without an id store, a job this process enqueued
        is answered the same way from memory; for any other this raises
        :class:`SqsUnsupported` rather than answer None (which would claim the
        job is gone). SQS has no lookup by id."""
        now = self.clock.now()
        for held in self._held.values():
            if held.job_id == id and time.monotonic() < held.deadline:
                return self._record(
                    held.body,
                    JobStatus.CLAIMED,
                    attempts=held.attempt,
                    lease_expires_at=held.expires,
                )
        body: dict[str, Any] | None
        if self.id_store is not None:
            body = await self._marker(id)
            if body is None:
                return None
        else:
            body = self._live.get(id)
            if body is None:
                raise SqsUnsupported(
                    f"SqsQueue cannot look up job {id!r}: SQS has no lookup by id, this "
                    "process does not hold it and no id store was given; read the job's "
                    "outcome record instead"
                )
        if "dead" in body:
            status = JobStatus.DEAD
        elif float(body.get("run_at", 0.0)) > now:
            status = JobStatus.SCHEDULED
        else:
            status = JobStatus.READY
        return self._record(body, status, attempts=int(body.get("a", 0)))

    def _record(
        self,
        body: dict[str, Any],
        status: JobStatus,
        *,
        attempts: int,
        lease_expires_at: float | None = None,
    ) -> JobRecord:
        return JobRecord(
            id=str(body["id"]),
            kind=str(body.get("kind", "")),
            status=status,
            priority=int(body.get("prio", _PRIORITY_NORMAL)),
            attempts=attempts,
            max_attempts=int(body.get("max", self.default_max_attempts)),
            run_at=float(body.get("run_at", 0.0)),
            created_at=float(body.get("enq", 0.0)),
            updated_at=float(body.get("died", body.get("enq", 0.0))),
            payload=base64.b64decode(body.get("p", "")),
            headers=dict(body.get("h", {})),
            lease_expires_at=lease_expires_at,
            last_error=body.get("err"),
            dead_reason=body.get("dead"),
        )

    async def counts(self) -> dict[JobStatus, int]:
        """SQS's approximate totals (GetQueueAttributes, one request per queue).

        READY is ApproximateNumberOfMessages over the tiers, SCHEDULED is
        ...Delayed, CLAIMED is ...NotVisible (which also holds counted retries
        waiting out a backoff on the visibility timeout), DEAD is everything
        in the dead-letter queue. SQS says these may lag by about a minute."""
        totals = dict.fromkeys(JobStatus, 0)
        names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        names.append("ApproximateNumberOfMessagesDelayed")
        for queue_name in self.queue_names:
            url = await self._url(queue_name)
            response = await self._call("get_queue_attributes", QueueUrl=url, AttributeNames=names)
            attrs = response["Attributes"]
            ready, hidden, delayed = (int(attrs.get(k, 0)) for k in names)
            if queue_name == self.dead_queue_name:
                totals[JobStatus.DEAD] += ready + hidden + delayed
            else:
                totals[JobStatus.READY] += ready
                totals[JobStatus.CLAIMED] += hidden
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
        if self._client_obj is None:
            return
        try:
            if self._polls:
                await asyncio.wait(set(self._polls.values()))
                await asyncio.sleep(0)
            for delivery in self._prefetched:
                await self._resend_uncounted(delivery, claimed=False)
            self._prefetched.clear()
            self._poll_error = None
            await self.flush()
        finally:
            stack, self._stack, self._client_obj = self._stack, None, None
            if stack is not None:
                await stack.aclose()

    async def __aenter__(self) -> SqsQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _check_tiers(tiers: Sequence[Tier]) -> None:
    covered: list[int] = []
    for tier in tiers:
        if tier.weight < 1 or not _NAME_RE.match(tier.suffix):
            raise ValueError(f"bad tier {tier!r}: weight >= 1 and a plain suffix needed")
        covered.extend(range(tier.lowest, tier.highest + 1))
    if sorted(covered) != list(range(10)):
        raise ValueError("tiers must cover priorities 0..9 exactly once, in order")
    if [t.lowest for t in tiers] != sorted(t.lowest for t in tiers):
        raise ValueError("tiers must be listed from the first priority to the last")


def _split(n: int, weights: Sequence[int]) -> list[int]:
    """Split ``n`` (>= len(weights)) into positive parts near the weights,
    each at most SQS's batch of 10."""
    total = sum(weights)
    parts = [max(1, min(SQS_MAX_BATCH, n * w // total)) for w in weights]
    i = 0
    while sum(parts) < n and any(p < SQS_MAX_BATCH for p in parts):
        if parts[i % len(parts)] < SQS_MAX_BATCH:
            parts[i % len(parts)] += 1
        i += 1
    while sum(parts) > n:
        j = max(range(len(parts)), key=lambda k: parts[k])
        parts[j] -= 1
    return parts

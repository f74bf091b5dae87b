"""An enqueue on SQS: the job's marker first (with an id store), then its
message on its tier's queue.

With an id store the marker is created if absent, so an id is taken once
fleet-wide, and a payload whose base64 is over ``spill_bytes`` stays in the
marker, which every claim reads anyway, so the message stays small (SQS
bills each 64 KiB as a request). Without one, only this process knows which
ids it enqueued (:mod:`stepstone.runtime.sqs.local_jobs`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets

from ..errors import PayloadTooLarge
from ..queue import Enqueued, NewJob, check_enqueue
from .message import JobMessage
from .parts import QueueParts


class Enqueues:
    """One SqsQueue's enqueues; ``notify`` tells this process's listeners."""

    def __init__(
        self,
        parts: QueueParts,
        *,
        default_max_attempts: int,
        max_payload_bytes: int,
        max_message_bytes: int,
        spill_bytes: int,
    ) -> None:
        self._parts = parts
        self._default_max_attempts = default_max_attempts
        self._max_payload_bytes = max_payload_bytes
        self._max_message_bytes = max_message_bytes
        self._spill_bytes = spill_bytes

    async def one(self, job: NewJob) -> Enqueued:
        """Send the job to its tier's queue.

        With an id store, the job's marker is written first, create-if-absent:
        ``created`` is False when any process holds a live job of this id.
        Without one, ``created`` is False only when *this process* enqueued (or
        holds) the id and has not seen it settled: SQS standard queues do not
        deduplicate, so another process's enqueue of the same id adds a second
        message, and the workflow layer would run it as a second incarnation
        (see SqsQueue's docstring)."""
        payload, run_at, priority = job.payload, job.run_at, job.priority
        run_id = check_enqueue(
            payload,
            id=job.id,
            priority=priority,
            max_attempts=job.max_attempts,
            max_payload_bytes=self._max_payload_bytes,
            run_at=job.run_at,
        )
        if self._parts.markers is None and self._parts.local.is_live(run_id):
            return Enqueued(run_id, created=False)
        if self._parts.markers is None and len(payload) * 4 // 3 + 1024 > self._max_message_bytes:
            raise PayloadTooLarge(
                f"payload of {len(payload)} bytes is over what one SQS message of "
                f"{self._max_message_bytes} bytes carries once base64-encoded (an id "
                "store would keep it on S3)"
            )
        now = self._parts.clock.now()
        due = now if run_at is None else run_at
        message = JobMessage(
            id=run_id,
            kind=job.kind,
            priority=priority,
            max_attempts=job.max_attempts or self._default_max_attempts,
            run_at=due,
            enqueued_at=now,
            attempts=0,
            claims=0,
            headers=dict(job.headers or {}),
            payload=payload,
        )
        if self._parts.markers is not None:
            # Kept in the marker, which every claim reads anyway, when its
            # base64 is over spill_bytes: the message stays small (SQS bills
            # each 64 KiB as a request).
            base64_size = 4 * -(-len(payload) // 3)
            message = dataclasses.replace(
                message, token=secrets.token_hex(8), spilled=base64_size > self._spill_bytes
            )
            if not await self._parts.markers.create(message):
                return Enqueued(run_id, created=False)
        self._parts.local.uncancel(run_id)
        self._parts.local.remember(run_id, message)
        try:
            await self._parts.outbox.send(await self._parts.outbox.tier_url(priority), message, due)
        except BaseException:
            self._parts.local.forget(run_id)
            if self._parts.markers is not None:
                with contextlib.suppress(Exception):
                    await self._parts.markers.drop(run_id)
            raise
        self._parts.notify()
        return Enqueued(run_id, created=True)

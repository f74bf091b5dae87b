"""Sending and deleting messages: batched, sized and delayed as SQS takes them.

Sends and deletes wait a few milliseconds to go out ten to a request
(:mod:`stepstone.runtime.sqs.batcher`). A message is checked against the
largest SQS takes before it is sent (the payload travels base64-encoded), a
spilled job's payload is left in its marker, and a run-at further out than
SQS's delay cap is sent with the cap (the receive re-sends it for the rest).
A job with a fairness key is sent with it as its ``MessageGroupId``: on a
standard queue that names its tenant for SQS's fair queues (SQS orders the
deliveries; weights are not SQS's, and it ignores them).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from ..clock import Clock
from ..errors import PayloadTooLarge, QueueError
from ..fairness import fairness_of
from .batcher import RequestBatcher
from .client import SqsClient, is_lost
from .message import ForeignMessage, JobMessage
from .message import encode as encode_message
from .tiers import Tier, tier_of


class Outbox:
    """One SqsQueue's sends and deletes, on the queues named ``<name>-<suffix>``."""

    def __init__(
        self,
        sqs: SqsClient,
        name: str,
        tiers: Sequence[Tier],
        clock: Clock,
        *,
        max_message_bytes: int,
        max_delay_seconds: int,
        batch_window: float,
    ) -> None:
        self._sqs = sqs
        self._name = name
        self._tiers = tiers
        self._clock = clock
        self._max_message_bytes = max_message_bytes
        self._max_delay_seconds = max_delay_seconds
        self._sender = RequestBatcher(sqs, "send_message_batch", batch_window)
        self._deleter = RequestBatcher(sqs, "delete_message_batch", batch_window)

    @property
    def dead_queue_name(self) -> str:
        return f"{self._name}-dead"

    def tier_queue_name(self, index: int) -> str:
        return f"{self._name}-{self._tiers[index].suffix}"

    async def tier_url(self, priority: int) -> str:
        return await self._sqs.url(f"{self._name}-{tier_of(self._tiers, priority).suffix}")

    async def dead_url(self) -> str:
        return await self._sqs.url(self.dead_queue_name)

    def _delay_for(self, run_at: float) -> int:
        remaining = run_at - self._clock.now()
        if remaining <= 0:
            return 0
        return min(math.ceil(remaining), self._max_delay_seconds)

    async def send(self, url: str, message: JobMessage | ForeignMessage, run_at: float) -> None:
        """Send one message (batched). A spilled job's payload stays in its
        marker: the message carries everything else."""
        if isinstance(message, JobMessage) and message.spilled:
            message = dataclasses.replace(message, payload=None)
        text = encode_message(message)
        size = len(text.encode())
        if size > self._max_message_bytes:
            raise PayloadTooLarge(
                f"job {message.id!r}: its SQS message is {size} bytes (the payload is "
                f"base64-encoded), over the limit of {self._max_message_bytes} bytes"
            )
        entry: dict[str, object] = {"MessageBody": text, "DelaySeconds": self._delay_for(run_at)}
        if isinstance(message, JobMessage) and (group := fairness_of(message.headers)[0]):
            # A tenant for SQS's fair queues, which favour other tenants'
            # messages while one tenant holds a large share of the consumers.
            entry["MessageGroupId"] = group
        refused = await self._sender.submit(url, entry)
        if refused is not None:
            raise QueueError(f"SQS refused job {message.id!r}: {refused.code}: {refused.message}")

    async def delete(self, url: str, receipt: str) -> bool:
        """Delete a received message (batched); False if SQS says the receipt
        no longer holds it."""
        refused = await self._deleter.submit(url, {"ReceiptHandle": receipt})
        if refused is None:
            return True
        if is_lost(refused.code):
            return False
        raise QueueError(f"SQS refused a delete: {refused.code}: {refused.message}")

    async def flush(self) -> None:
        """Send what the batchers are holding now."""
        await self._sender.drain()
        await self._deleter.drain()

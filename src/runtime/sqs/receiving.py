"""Claims on SQS: receives across the tier queues, and what a received
message becomes.

A claim looks at every tier once, in the order the weights give
(:mod:`stepstone.runtime.sqs.tiers`), goes back only to tiers that filled a
batch, and long-polls only when every tier came back empty; what a long poll
brings after its claim returned waits for the next
(:mod:`stepstone.runtime.sqs.prefetch`). A received message is a delivery
unless it is dealt with here: a foreign body goes to the dead-letter queue,
a cancelled or already settled job's duplicate is deleted, one that came
before its run-at (SQS delays stop at 15 minutes) is sent again for the rest
of its wait, uncounted.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any

from ..queue import Delivery
from .limits import SQS_MAX_BATCH, SQS_MAX_VISIBILITY_SECONDS
from .message import ForeignMessage, MalformedMessage, decode
from .parts import QueueParts
from .prefetch import LongPolls
from .tiers import Tier, TierRotation

logger = logging.getLogger("stepstone.runtime.sqs")


class Receiver:
    """One SqsQueue's claims. ``renew`` and ``put_back`` are its
    transitions' (a prefetched delivery is renewed before it is handed out;
    one of an unwanted kind goes back uncounted); ``brought`` is told when a
    background poll brings work; ``label`` names the queue in the log."""

    def __init__(
        self,
        parts: QueueParts,
        tiers: Sequence[Tier],
        *,
        wait_time_seconds: int,
        renew: Callable[[Delivery, float], Awaitable[float | None]],
        put_back: Callable[[Delivery], Awaitable[bool]],
        label: str,
    ) -> None:
        self._parts = parts
        self._tiers = tiers
        self._wait_time_seconds = wait_time_seconds
        self._renew = renew
        self._put_back = put_back
        self._label = label
        self._rotation = TierRotation(tiers)
        self.polls = LongPolls(self._receive, [t.weight for t in tiers], brought=parts.notify)
        self._quiet_at: dict[int, float] = {}
        """Tier -> when (time.monotonic) a long poll of it last came back empty,
        while nothing has come from it since."""

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
        self._parts.fence.prune()
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
        if not out and self._wait_time_seconds > 0:
            await self.polls.poll(n, visibility, order, self._wait_time_seconds)
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
                await self._put_back(d)
        return keep

    def _quiet(self) -> bool:
        """Whether a claim goes straight to its long polls (one of every
        tier): each tier came back empty from a long poll of its own within
        the last ``wait_time_seconds``. Short polls then would only say again
        what those said (and a long poll answers at once when a message is
        there), while an idle consumer's short polls were half its receives."""
        if self._wait_time_seconds <= 0:
            return False
        since = time.monotonic() - self._wait_time_seconds
        return all(self._quiet_at.get(tier, since) > since for tier in range(len(self._tiers)))

    async def _take_prefetched(self, n: int, lease: float) -> list[Delivery]:
        """Hand out up to ``n`` deliveries a background long poll brought in,
        each renewed to ``lease`` (one request only if it has less left)."""
        out: list[Delivery] = []
        while len(out) < n and (delivery := self.polls.pop()) is not None:
            held = self._parts.holds.owned(delivery)
            if held is not None and held.deadline - time.monotonic() >= lease / 2:
                out.append(dataclasses.replace(delivery, lease_expires_at=held.expires))
                continue
            expires = await self._renew(delivery, lease)
            if expires is not None:
                out.append(dataclasses.replace(delivery, lease_expires_at=expires))
        return out

    async def _receive(self, tier: int, n: int, lease: int, wait: int) -> list[Delivery]:
        return (await self._receive_counted(tier, n, lease, wait))[0]

    async def _receive_counted(
        self, tier: int, n: int, lease: int, wait: int
    ) -> tuple[list[Delivery], int]:
        """Receive up to ``n`` from a tier: the deliveries, and how many
        messages came (some are dealt with here: early, cancelled, duplicate)."""
        url = await self._parts.sqs.url(self._parts.outbox.tier_queue_name(tier))
        started = time.monotonic()
        response = await self._parts.sqs.call(
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
            await self._parts.outbox.send(await self._parts.outbox.dead_url(), foreign, 0.0)
            await self._parts.outbox.delete(url, receipt)
            return None
        run_id = message.id
        # Each receive after the first is a takeover of a lease that lapsed:
        # the attempt goes on, one more lapse (the message module says why).
        attempt = message.attempts + 1
        claims = message.claims + receives
        message = dataclasses.replace(message, lapses=message.lapses + receives - 1)
        if run_id in self._parts.local.cancelled:
            await self._parts.outbox.delete(url, receipt)
            return None
        if self._parts.markers is not None and message.token is not None:
            marker = await self._parts.markers.of(message)
            if marker is None or marker.dead_reason is not None:
                # Acked, cancelled or dead-lettered already: this is a
                # duplicate (SQS delivers at least once) or a cancelled job.
                await self._parts.outbox.delete(url, receipt)
                return None
            if message.spilled:
                message = dataclasses.replace(message, payload=marker.payload)
        if message.payload is None:
            # Spilled by a process with an id store: this one, without, cannot
            # read the payload. Leave it to them (it shows again after the lease).
            logger.warning("%s: job %s keeps its payload in an id store", self._label, run_id)
            return None
        if message.run_at > self._parts.clock.now():
            # Arrived before its run-at (DelaySeconds stops at 15 minutes):
            # send it again for the rest of the wait, this receive not counted.
            again = dataclasses.replace(message, claims=claims - 1)
            await self._parts.outbox.send(url, again, message.run_at)
            await self._parts.outbox.delete(url, receipt)
            return None
        held = self._parts.fence.hold(
            receipt,
            message_id=received["MessageId"],
            url=url,
            message=message,
            attempt=attempt,
            claims=claims,
            received=started,
            lease=lease,
            now=self._parts.clock.now(),
        )
        self._parts.local.remember(run_id)
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
            lapses=message.lapses,
            took_over=receives > 1,
        )

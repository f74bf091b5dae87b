"""What a delivery's holder does with its message: renew the lease, and the
settlements (ack, nack, dead-letter, release), each mapped onto SQS requests.

Every one asks first whether the delivery still holds its job
(:mod:`stepstone.runtime.sqs.holds`) and answers LOST, calling nothing, when
it does not. Every settlement but an ack is a re-send with the attempt
base it needs (the attempt spent, or handed back) and a delete of the
received copy, since a second receive of one message is a lapsed lease's
takeover (:mod:`stepstone.runtime.sqs.message`).
"""

from __future__ import annotations

import dataclasses
import math
import time

from ..queue import Delivery, Settlement
from .client import error_code, is_lost
from .fence import Held
from .limits import SQS_MAX_VISIBILITY_SECONDS, VISIBILITY_SAFETY
from .parts import QueueParts


class SqsTransitions:
    """One SqsQueue's renewals and settlements; ``notify`` tells this
    process's listeners when one makes work due now."""

    def __init__(self, parts: QueueParts, *, fence_margin: float) -> None:
        self._parts = parts
        self._fence_margin = fence_margin

    async def renew(self, delivery: Delivery, at_least: float) -> float | None:
        """ChangeMessageVisibility, when the lease this process measured would
        end sooner than ``at_least`` from now. SQS caps a message's visibility
        at 12 hours from its receive: past that the lease cannot grow, and the
        expiry returned says so (it is earlier than asked)."""
        held = await self._parts.holds.owns(delivery)
        if held is None:
            return None
        now = time.monotonic()
        if held.deadline - now < at_least:
            ceiling = SQS_MAX_VISIBILITY_SECONDS - VISIBILITY_SAFETY - (now - held.received)
            visibility = max(0, min(math.ceil(at_least + self._fence_margin), math.floor(ceiling)))
            try:
                await self._parts.sqs.call(
                    "change_message_visibility",
                    QueueUrl=held.url,
                    ReceiptHandle=delivery.token,
                    VisibilityTimeout=visibility,
                )
            except Exception as exc:
                if is_lost(error_code(exc)):
                    self._parts.fence.drop(delivery.token)
                    return None
                raise
            self._parts.fence.extend(held, visibility, started=now, now=self._parts.clock.now())
        return held.expires

    async def ack(self, delivery: Delivery) -> Settlement:
        """Delete the message, then the job's marker, fenced on the version
        this delivery found: SQS can hand one message to two receivers at once
        (at-least-once delivery), and both receipts then delete it; the
        marker's conditional delete is what lets only one of them ack."""
        holding = await self._parts.holds.holding(delivery)
        if holding is None:
            return Settlement.LOST
        held, version = holding
        self._parts.holds.settled(delivery.token)
        deleted = await self._parts.outbox.delete(held.url, delivery.token)
        if not deleted:
            return Settlement.LOST
        if self._parts.markers is not None:
            dropped = await self._parts.markers.drop(held.message.id, if_match=version)
            if version is not None and not dropped:
                return Settlement.LOST
        return Settlement.ACKED

    async def nack(
        self, delivery: Delivery, *, delay: float, count: bool = True, error: str | None = None
    ) -> Settlement:
        """Retry after ``delay``: re-send the message with the attempt base it
        needs and delete the received copy. Never by a visibility change: a
        second receive of one message is how a lapsed lease shows, counted
        as a lapse (:mod:`stepstone.runtime.sqs.message`)."""
        held = await self._parts.holds.owns(delivery)
        if held is None:
            return Settlement.LOST
        if count and held.attempt >= held.message.max_attempts:
            return await self._kill(delivery, held, error or "exhausted its attempts", error)
        delay = max(0.0, delay)
        run_at = self._parts.clock.now() + delay
        again = dataclasses.replace(
            held.message,
            attempts=held.attempt if count else held.attempt - 1,
            claims=held.claims,
            run_at=run_at,
            last_error=held.message.last_error if error is None else error,
        )
        await self._parts.outbox.send(held.url, again, run_at)
        self._parts.fence.drop(delivery.token)
        await self._parts.outbox.delete(held.url, delivery.token)
        if delay <= 0:
            self._parts.notify()
        return Settlement.RETRIED

    async def dead_letter(self, delivery: Delivery, reason: str) -> Settlement:
        held = await self._parts.holds.owns(delivery)
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
            died_at=self._parts.clock.now(),
            last_error=held.message.last_error if error is None else error,
        )
        await self._parts.outbox.send(await self._parts.outbox.dead_url(), dead, 0.0)
        if self._parts.markers is not None:
            await self._parts.markers.write(dead)
        self._parts.holds.settled(delivery.token)
        # A dead id is still taken (until requeued or cancelled): remember it
        # here too, so this process's get() and enqueue() say so.
        self._parts.local.remember(dead.id, dead)
        await self._parts.outbox.delete(held.url, delivery.token)
        return Settlement.DEAD

    async def release(self, delivery: Delivery) -> Settlement:
        """Re-send with the attempt handed back, and delete the received copy:
        a visibility change to 0 would make the next receive count an attempt."""
        if not await self.resend_uncounted(delivery, claimed=True):
            return Settlement.LOST
        self._parts.notify()
        return Settlement.RELEASED

    async def resend_uncounted(self, delivery: Delivery, *, claimed: bool) -> bool:
        """Put a delivery back with its attempt handed back. ``claimed``: a
        handler had it (a release), so Delivery.claims keeps this claim; a
        message of an unwanted kind was never handed out, so it does not."""
        held = (
            await self._parts.holds.owns(delivery) if claimed else self._parts.holds.owned(delivery)
        )
        if held is None:
            return False
        again = dataclasses.replace(
            held.message,
            attempts=held.attempt - 1,
            claims=held.claims if claimed else held.claims - 1,
        )
        await self._parts.outbox.send(held.url, again, 0.0)
        self._parts.fence.drop(delivery.token)
        await self._parts.outbox.delete(held.url, delivery.token)
        return True

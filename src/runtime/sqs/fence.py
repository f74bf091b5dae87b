"""The local fence: whether a delivery this process handed out still owns its job.

SQS accepts a stale receipt handle: DeleteMessage "succeeds, but the message
might not be deleted", and moto deletes or re-times the message with any
handle it ever had. So the handle alone cannot report LOST. This process
therefore fences each delivery on two things it does know: the lease
deadline it measured itself (a monotonic clock started *before* the
receive, minus a margin, so it ends before SQS's), and the newest handle it
saw for the message. Past either, every transition answers LOST without
calling SQS, and a zombie whose lease lapsed never deletes, re-times or
dead-letters a message someone else now holds, as long as its own process
is alive to check.
"""

from __future__ import annotations

import time
from collections.abc import Container
from dataclasses import dataclass

from ..queue import Delivery
from .message import JobMessage


@dataclass(slots=True)
class Held:
    """What this process knows about one live delivery (keyed by receipt handle)."""

    message_id: str
    url: str
    message: JobMessage
    """As received, with a spilled payload read back from the marker."""
    attempt: int
    claims: int
    received: float
    """time.monotonic() just before the receive that produced it."""
    deadline: float
    """time.monotonic() past which the lease may have lapsed at SQS."""
    expires: float
    """The same deadline on the queue's clock, as Delivery.lease_expires_at says."""


class Fence:
    """The deliveries this process holds, by receipt handle, and the newest
    receipt handle it saw for each message."""

    def __init__(self, margin: float) -> None:
        self._margin = margin
        self.held: dict[str, Held] = {}
        self._latest: dict[str, str] = {}
        """message id -> newest receipt handle this process saw."""

    def margin(self, visibility: float) -> float:
        """What a lease of ``visibility`` seconds loses to the fence: the margin,
        but at most a fifth of it, so one-second test leases stay usable."""
        return min(self._margin, visibility * 0.2)

    def hold(
        self,
        receipt: str,
        *,
        message_id: str,
        url: str,
        message: JobMessage,
        attempt: int,
        claims: int,
        received: float,
        lease: int,
        now: float,
    ) -> Held:
        """Record a receive made at ``received`` (monotonic) under a ``lease``
        of that many seconds; ``now`` is the queue's clock. An older receipt
        of the same message stops owning it."""
        old = self._latest.get(message_id)
        if old is not None:
            self.held.pop(old, None)
        self._latest[message_id] = receipt
        held = self.held[receipt] = Held(
            message_id=message_id,
            url=url,
            message=message,
            attempt=attempt,
            claims=claims,
            received=received,
            deadline=received + lease - self.margin(lease),
            expires=now + lease - self.margin(lease),
        )
        return held

    def extend(self, held: Held, visibility: int, *, started: float, now: float) -> None:
        """A visibility change to ``visibility`` seconds, requested at
        ``started`` (monotonic, taken before the request), was accepted;
        ``now`` is the queue's clock."""
        fenced = visibility - self.margin(visibility)
        held.deadline = max(held.deadline, started + fenced)
        held.expires = max(held.expires, now + fenced)

    def owned(self, delivery: Delivery, cancelled: Container[str]) -> Held | None:
        """The delivery's record if it still owns the job, else None.

        Owning means: this process has it as a live delivery, no newer receipt
        of the same message has been seen here, the job is not in
        ``cancelled``, and the lease this process measured has not run out."""
        held = self.held.get(delivery.token)
        if held is None or held.message.id != delivery.id:
            return None
        if self._latest.get(held.message_id) != delivery.token or held.message.id in cancelled:
            self.drop(delivery.token)
            return None
        if time.monotonic() >= held.deadline:
            self.drop(delivery.token)
            return None
        return held

    def drop(self, receipt: str) -> Held | None:
        """Forget a delivery: it was settled, or lost."""
        held = self.held.pop(receipt, None)
        if held is not None and self._latest.get(held.message_id) == receipt:
            del self._latest[held.message_id]
        return held

    def prune(self) -> None:
        """Forget every delivery whose lease ran out."""
        now = time.monotonic()
        for receipt in [r for r, h in self.held.items() if h.deadline < now]:
            self.drop(receipt)

    def holding(self, run_id: str) -> Held | None:
        """A delivery of the job this process holds within its lease, if any."""
        now = time.monotonic()
        for held in self.held.values():
            if held.message.id == run_id and now < held.deadline:
                return held
        return None

    def receipts_of(self, run_id: str) -> list[tuple[str, Held]]:
        """Every delivery of the job this process has (lease run out or not)."""
        return [(r, h) for r, h in self.held.items() if h.message.id == run_id]

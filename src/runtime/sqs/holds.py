"""Whether a delivery this process handed out still holds its job.

The local fence (:mod:`stepstone.runtime.sqs.fence`) answers from what this
process measured and saw; with an id store, a settlement also reads the
job's marker (one GET), because a cancel or a settlement in another process
deletes or replaces it, and then this delivery has lost the job.
"""

from __future__ import annotations

from ..queue import Delivery
from .fence import Fence, Held
from .local_jobs import LocalJobs
from .markers import IdMarkers


class Holds:
    """The deliveries of one SqsQueue that still hold their jobs."""

    def __init__(self, fence: Fence, local: LocalJobs, markers: IdMarkers | None) -> None:
        self._fence = fence
        self._local = local
        self._markers = markers

    def owned(self, delivery: Delivery) -> Held | None:
        """The fence's answer alone: no request."""
        return self._fence.owned(delivery, self._local.cancelled)

    async def owns(self, delivery: Delivery) -> Held | None:
        """The fence's answer, and with an id store, the job's marker still
        names this enqueue (one GET)."""
        holding = await self.holding(delivery)
        return None if holding is None else holding[0]

    async def holding(self, delivery: Delivery) -> tuple[Held, str | None] | None:
        """``owns``, with the version of the job's marker (None without one)."""
        held = self.owned(delivery)
        if held is None or self._markers is None or held.message.token is None:
            return None if held is None else (held, None)
        found = await self._markers.version_of(held.message)
        if found is None or found[0].dead_reason is not None:
            self._fence.drop(delivery.token)
            return None
        return held, found[1]

    def settled(self, receipt: str) -> None:
        """The delivery of ``receipt`` ended its claim: forget it here."""
        held = self._fence.drop(receipt)
        if held is not None:
            self._local.forget(held.message.id)

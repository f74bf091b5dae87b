"""What operators and the workflow layer do to SQS jobs outside a claim:
cancel, free a dead job's id, requeue dead jobs.

SQS cannot find a message by id, so a cancel reaches only what this process
holds, plus, with an id store, the job's marker (every claim drops a message
whose marker is gone), and a requeue scans the dead-letter queue
(:mod:`stepstone.runtime.sqs.dead_letters`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from . import dead_letters
from .message import JobMessage
from .parts import QueueParts


class SqsAdmin:
    """One SqsQueue's cancels, discards and requeues; ``notify`` tells this
    process's listeners when a requeue brings work back."""

    def __init__(self, parts: QueueParts, *, dead_scan_visibility: int) -> None:
        self._parts = parts
        self._dead_scan_visibility = dead_scan_visibility

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
        known = self._parts.local.is_live(run_id)
        self._parts.local.cancel(run_id)
        for receipt, held in self._parts.fence.receipts_of(run_id):
            self._parts.fence.drop(receipt)
            await self._parts.outbox.delete(held.url, receipt)
            known = True
        if self._parts.markers is not None:
            if await self._parts.markers.read(run_id) is not None:
                known = True
            await self._parts.markers.drop(run_id)
        return known

    async def discard_dead(self, run_id: str) -> bool:
        """Free a dead job's id: its marker in the id store, if it says dead
        (a delete fenced on that marker's etag, so a requeue in between
        wins), and what this process remembers of it. Its message in the
        dead-letter queue stays until SQS's retention drops it; a requeue
        that meets it finds no marker naming it and deletes it."""
        remembered = self._parts.local.live(run_id)
        discarded = remembered is not None and remembered.dead_reason is not None
        if discarded:
            self._parts.local.forget(run_id)
        if self._parts.markers is not None:
            discarded = await self._parts.markers.drop_dead(run_id) or discarded
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
        dead_url = await self._parts.outbox.dead_url()
        moved = 0

        async def take(message: JobMessage, receipt: str, receives: int) -> bool:
            nonlocal moved
            if self._parts.markers is not None and message.token is not None:
                marker = await self._parts.markers.of(message)
                if marker is None:
                    # Cancelled while dead: nothing to bring back.
                    await self._parts.outbox.delete(dead_url, receipt)
                    return False
                if message.spilled:
                    message = dataclasses.replace(message, payload=marker.payload)
            fresh = dead_letters.revived(message, receives, self._parts.clock.now())
            if self._parts.markers is not None and fresh.token is not None:
                await self._parts.markers.write(fresh)
            await self._parts.outbox.send(
                await self._parts.outbox.tier_url(fresh.priority), fresh, 0.0
            )
            await self._parts.outbox.delete(dead_url, receipt)
            self._parts.local.uncancel(fresh.id)
            if self._parts.local.is_live(fresh.id):
                self._parts.local.remember(fresh.id, fresh)
            moved += 1
            return True

        try:
            return await dead_letters.scan(
                self._parts.sqs,
                dead_url,
                visibility=self._dead_scan_visibility,
                match=match,
                take=take,
                stop_at_first=stop_at_first,
            )
        finally:
            if moved:
                self._parts.notify()

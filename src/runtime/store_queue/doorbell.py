"""The doorbell: a small object a submitter rewrites when it enqueues, so
that idle workers on a bucket learn of new work with a HEAD instead of a
LIST.

On S3 a LIST is billed like a PUT, a HEAD twelve and a half times less, so
an idle worker that looks at one object every ``interval`` seconds pays for
it what it would pay for a LIST every ``12.5 * interval`` (docs/queue.md
prices both). A StoreQueue that enqueues a job rewrites the doorbell
(``<prefix>/doorbell``, a few random bytes) unless it did within the last
``RING_EVERY`` seconds; an idle claimer whose look finds the doorbell's etag
changed lists at once instead of at its backed-off pace.

Like a store's notices, the doorbell is a hint, never the only way work is
found: a ring can fail or be skipped (a process that rang a moment ago, an
older version that never rings, a release or a retry, which do not ring),
and the listings go on at their pace.
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import time

from stepstone.store.base import ObjectStore
from stepstone.store.errors import NotFound, StoreError

log = logging.getLogger("stepstone.runtime.store_queue")

RING_EVERY = 0.1
"""Seconds a StoreQueue waits after a ring before it rings again: a burst of
submits rings a few times, not once a job. An enqueue within this of the
last ring is rung for once more at its end (one trailing ring for however
many came between), since the listing that ring started may have been made
before it was written. A process submitting a job at a time pays a PUT a
job for it, one submitting more than ten a second less."""


class Doorbell:
    """One StoreQueue's doorbell at ``key``: rung by its enqueues, looked at
    by its claims every ``interval`` seconds while they come up short (0:
    neither)."""

    def __init__(self, store: ObjectStore, key: str, interval: float) -> None:
        self.store = store
        self.key = key
        self.interval = interval
        self.looks = 0
        """HEADs of the doorbell so far."""
        self.rings = 0
        """Rewrites of the doorbell so far."""
        self._etag: str | None = None
        self._known = False
        self._next_look = -math.inf
        self._gap = interval / 4
        """Seconds to the look after the next: a quarter of ``interval`` at
        the start and after work was claimed, doubling with each quiet look
        up to ``interval``. At the start, because the first look only learns
        the doorbell: a job submitted just after it (an API process that
        waited for the worker to come up) would otherwise wait a whole
        ``interval`` for the second."""
        self._rung_at = -math.inf
        self._trailing: asyncio.TimerHandle | None = None
        self._ringing: set[asyncio.Task[None]] = set()

    @property
    def on(self) -> bool:
        return self.interval > 0

    def look_due(self) -> bool:
        return self.on and time.monotonic() >= self._next_look

    def seconds_to_look(self) -> float | None:
        """Real seconds until the next look is due (None: never)."""
        if not self.on:
            return None
        return max(0.0, self._next_look - time.monotonic())

    async def rang(self) -> bool:
        """Look (a HEAD): whether the doorbell changed since the last look.
        The first look only learns it; a failed one says no (the listings
        go on)."""
        self._next_look = time.monotonic() + self._gap
        self._gap = min(2 * self._gap, self.interval)
        self.looks += 1
        try:
            etag: str | None = (await self.store.head(self.key)).etag
        except NotFound:
            etag = None
        except StoreError as exc:
            log.debug("could not look at the doorbell %s: %s", self.key, exc)
            return False
        changed = self._known and etag != self._etag
        self._etag, self._known = etag, True
        return changed

    def worked(self) -> None:
        """A claim took work: the next job is likelier soon (a submitter that
        awaits each result submits the next as this one ends), so look again
        after a quarter of ``interval``, then back off to it."""
        if self.on:
            self._gap = self.interval / 4
            self._next_look = min(self._next_look, time.monotonic() + self._gap)

    async def ring(self) -> None:
        """Rewrite the doorbell; within ``RING_EVERY`` of this instance's last
        ring, once more when that time is up instead (at most one ring waits)."""
        if not self.on:
            return
        wait = self._rung_at + RING_EVERY - time.monotonic()
        if wait <= 0:
            await self._rewrite()
        elif self._trailing is None:
            self._trailing = asyncio.get_running_loop().call_later(wait, self._ring_trailing)

    def _ring_trailing(self) -> None:
        self._trailing = None
        task = asyncio.ensure_future(self._rewrite())
        self._ringing.add(task)
        task.add_done_callback(self._ringing.discard)

    async def _rewrite(self) -> None:
        self._rung_at = time.monotonic()
        self.rings += 1
        try:
            await self.store.put(self.key, secrets.token_bytes(8))
        except StoreError as exc:
            log.debug("could not ring the doorbell %s: %s", self.key, exc)

    async def close(self) -> None:
        """Ring what waits to be rung now, so a queue closed just after an
        enqueue leaves no job unrung, and no timer behind."""
        if self._trailing is not None:
            self._trailing.cancel()
            self._trailing = None
            await self._rewrite()
        if self._ringing:
            await asyncio.gather(*self._ringing, return_exceptions=True)

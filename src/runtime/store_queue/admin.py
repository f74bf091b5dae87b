"""What operators and the workflow layer do to records outside a claim:
cancel, withdraw a record just created, drop a dead one, requeue a dead one.

Each is a write fenced on the version it read (a conditional DELETE or
PUT), so it never undoes a change it did not see: a requeue between reading
a dead record and deleting it wins, and a create withdrawn is only the one
that create made.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from stepstone.store.errors import NotFound, PreconditionFailed

from ..clock import Clock
from ..queue import Enqueued
from ..run_id import is_storable_id
from .record_io import SWAP_TRIES, RecordIO
from .records import StoredJob


class RecordAdmin:
    """One instance's cancels, withdrawals, discards and requeues; ``notify``
    tells this process's listeners when a requeue makes work due."""

    def __init__(self, io: RecordIO, clock: Clock, notify: Callable[[], None]) -> None:
        self._io = io
        self._cache = io.cache
        self._clock = clock
        self._notify = notify

    async def cancel(self, run_id: str) -> bool:
        if not is_storable_id(run_id):
            return False
        store, key = self._io.store, self._io.key(run_id)
        seen = self._cache.get(run_id)
        etag = None if seen is None else seen.etag
        for _ in range(SWAP_TRIES):
            try:
                if etag is None:
                    etag = (await store.head(key)).etag
                await store.delete(key, if_match=etag)
            except PreconditionFailed:
                etag = None
                continue
            except NotFound:
                self._cache.forget(run_id)
                return False
            self._cache.forget(run_id)
            return True
        # It keeps changing under us (a busy holder renewing): it exists, so remove it.
        await store.delete(key)
        self._cache.forget(run_id)
        return True

    async def withdraw(self, enqueued: Enqueued) -> bool:
        """A delete fenced on the etag the create answered."""
        etag = enqueued.version
        if etag is None or not is_storable_id(enqueued.id):  # (only a create has a version)
            return False
        try:
            await self._io.remove(enqueued.id, etag)
        except (PreconditionFailed, NotFound):
            self._cache.forget(enqueued.id, etag)  # (if the cache still holds that version)
            return False
        return True

    async def discard_dead(self, run_id: str) -> bool:
        """Delete the record if it is dead, fenced on the dead version's etag
        (a requeue in between wins)."""
        return await self._if_dead(run_id, lambda etag, _: self._io.remove(run_id, etag))

    async def requeue(self, run_id: str) -> bool:
        async def revive(etag: str, job: StoredJob) -> None:
            now = self._clock.now()
            new = job.next(now, dead=False, dead_reason=None, attempts=0, lapses=0, run_at=now)
            await self._io.swap(run_id, new, etag)

        if not await self._if_dead(run_id, revive):
            return False
        self._notify()
        return True

    async def _if_dead(self, run_id: str, act: Callable[[str, StoredJob], Awaitable[None]]) -> bool:
        """Do ``act(etag, job)`` to the record if it is dead, a write fenced on
        that etag; a record that moved on meanwhile is looked at again. False
        when there is no dead record of ``run_id`` (or it kept moving)."""
        if not is_storable_id(run_id):
            return False
        for _ in range(SWAP_TRIES):
            fetched = await self._io.fetch(run_id)
            if fetched is None or not fetched[1].dead:
                return False
            try:
                await act(*fetched)
            except (PreconditionFailed, NotFound):
                continue
            return True
        return False

"""Changes of a record after its claim, each a compare-and-swap on its etag.

Every change of a claimed record (renew, and the settlements: ack, nack,
suspend, dead-letter, release) is made by the holder of the record's token
and fenced by it: :meth:`RecordTransitions.fenced` reads the record (the cache's
copy, when it holds this token's version), checks the token still owns it,
and swaps the changed record over that version; a swap refused because the
record moved on reads it again. A token that no longer owns the record
changes nothing and answers LOST. A wake needs no token, only a swap: it
marks a held record, or makes a waiting one due.

**One change of a record at a time.** The heartbeat renews a lease while
the attempt settles, and a settlement's swap may wait (for a throttled
partition's rate, or a hot object's turn), while a renewal is sent
first. Run side by side, each renewal that landed meanwhile moved the
record past the version the settlement swaps over, and after a few the
settlement gave up and the job was reported lost by its own holder. So the
changes of one record by one instance wait for each other: a settlement
swaps over the version the renewal before it wrote, and a renewal behind a
settlement that removed the record finds it settled.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from stepstone.store.errors import NotFound, PreconditionFailed

from ..clock import Clock
from ..queue import Delivery, Settlement
from ..run_id import is_storable_id
from ..status import JobStatus, Wait, still_pending
from .record_io import SWAP_TRIES, RecordIO
from .records import CorruptRecord, StoredJob

log = logging.getLogger("stepstone.runtime.store_queue")

RecordChange = Callable[[StoredJob, float], StoredJob | None]
"""The next version of a record at a time (None: delete it; the record
itself: write nothing, only confirm the token still owns it)."""


class RecordTransitions:
    """One instance's changes of the records its claims hold; ``notify``
    tells this process's listeners when a change makes work due now."""

    def __init__(self, io: RecordIO, clock: Clock, notify: Callable[[], None]) -> None:
        self._io = io
        self._cache = io.cache
        self._clock = clock
        self._notify = notify
        self._changing: dict[str, asyncio.Future[None]] = {}
        """The change of each record under way here: its end, for the next to wait on."""

    async def fenced(
        self, delivery: Delivery, change: RecordChange
    ) -> StoredJob | Settlement | None:
        """Apply ``change`` to the record the delivery's token owns, by swap.

        ``change`` returns the next version, None to delete, or the record
        itself to write nothing (then a HEAD confirms the token still owns it).
        Returns what was written (None for a delete), or Settlement.LOST.
        """
        run_id = delivery.id  # the record's changes here go one at a time (module docstring)
        while (under_way := self._changing.get(run_id)) is not None:
            await asyncio.shield(under_way)  # (its end, however it ended)
        ended = asyncio.get_running_loop().create_future()
        self._changing[run_id] = ended
        try:
            return await self._fenced(delivery, change)
        finally:
            del self._changing[run_id]
            ended.set_result(None)

    async def _fenced(
        self, delivery: Delivery, change: RecordChange
    ) -> StoredJob | Settlement | None:
        run_id = delivery.id
        key = self._io.key(run_id)
        seen = self._cache.get(run_id)
        known: tuple[str, StoredJob] | None = None
        if (
            seen is not None
            and seen.job is not None
            and not seen.job.partial
            and seen.job.token == delivery.token
            and not seen.job.dead
        ):
            known = (seen.etag, seen.job)
        for _ in range(SWAP_TRIES):
            if known is None:
                try:
                    known = await self._io.fetch(run_id)
                except CorruptRecord as exc:
                    log.warning("treating a settlement as lost: %s", exc)
                    return Settlement.LOST
                if known is None:
                    return Settlement.LOST
                if known[1].token != delivery.token or known[1].dead:
                    return Settlement.LOST
            etag, job = known
            new = change(job, self._clock.now())
            try:
                with self._io.write_of(run_id):  # (this process's claims wait for it)
                    if new is None:
                        await self._io.remove(run_id, etag)
                    elif new is job:
                        if (await self._io.store.head(key)).etag != etag:
                            raise PreconditionFailed("moved on", key=key)
                    else:
                        await self._io.swap(run_id, new, etag)
                return new
            except PreconditionFailed:
                known = None
            except NotFound:
                self._cache.forget(run_id)
                return Settlement.LOST
        return Settlement.LOST

    async def renew(self, delivery: Delivery, at_least: float) -> float | None:
        def extend(job: StoredJob, now: float) -> StoredJob:
            assert job.lease_expires_at is not None
            wanted = now + at_least
            if wanted <= job.lease_expires_at:
                return job  # never shorten; confirm ownership with a HEAD
            return job.next(now, lease_expires_at=wanted)

        result = await self.fenced(delivery, extend)
        if not isinstance(result, StoredJob):
            return None
        return result.lease_expires_at

    async def ack(self, delivery: Delivery) -> Settlement:
        result = await self.fenced(delivery, lambda job, now: None)
        return Settlement.LOST if result is Settlement.LOST else Settlement.ACKED

    async def nack(
        self, delivery: Delivery, *, delay: float, count: bool = True, error: str | None = None
    ) -> Settlement:
        def retry(job: StoredJob, now: float) -> StoredJob:
            last_error = error if error is not None else job.last_error
            if count and job.attempts >= job.max_attempts:
                return killed(job, now, error or "exhausted its attempts", last_error)
            return job.next(
                now,
                attempts=job.attempts if count else job.attempts - 1,
                token=None,
                lease_expires_at=None,
                run_at=now + max(0.0, delay),
                last_error=last_error,
            )

        result = await self.fenced(delivery, retry)
        if not isinstance(result, StoredJob):
            return Settlement.LOST
        if result.dead:
            return Settlement.DEAD
        if delay <= 0:
            self._notify()
        return Settlement.RETRIED

    async def suspend(self, delivery: Delivery, *, until: float, wait: Wait) -> Settlement:
        def give_back(job: StoredJob, now: float) -> StoredJob:
            needed = tuple(n for n in dict.fromkeys(wait.pending) if n not in job.arrivals)
            if job.woken or (wait.pending and not needed):
                # Woken while it ran, or all it counted arrived meanwhile:
                # due at once, to look again.
                return job.next(
                    now,
                    attempts=job.attempts - 1,
                    token=None,
                    lease_expires_at=None,
                    run_at=now,
                    woken=False,
                    wait=None,
                    pending=(),
                    arrivals=(),
                )
            return job.next(
                now,
                attempts=job.attempts - 1,
                token=None,
                lease_expires_at=None,
                run_at=until,
                wait=(wait.status.value, wait.detail),
                pending=needed,
                arrivals=(),
            )

        result = await self.fenced(delivery, give_back)
        if not isinstance(result, StoredJob):
            return Settlement.LOST
        if result.wait is None:
            self._notify()
            return Settlement.RETRIED
        return Settlement.SUSPENDED

    async def dead_letter(self, delivery: Delivery, reason: str) -> Settlement:
        result = await self.fenced(
            delivery, lambda job, now: killed(job, now, reason, job.last_error)
        )
        return Settlement.DEAD if isinstance(result, StoredJob) else Settlement.LOST

    async def release(self, delivery: Delivery) -> Settlement:
        def give_back(job: StoredJob, now: float) -> StoredJob:
            return job.next(
                now,
                attempts=job.attempts - 1,
                token=None,
                lease_expires_at=None,
                run_at=min(job.run_at, now),
            )

        result = await self.fenced(delivery, give_back)
        if not isinstance(result, StoredJob):
            return Settlement.LOST
        self._notify()
        return Settlement.RELEASED

    async def wake(self, run_id: str, waiting_for: JobStatus, arrived: str | None) -> bool:
        if not is_storable_id(run_id):
            return False
        for _ in range(SWAP_TRIES):
            try:
                fetched = await self._io.fetch(run_id)
            except CorruptRecord:
                return False
            if fetched is None or fetched[1].dead:
                return False
            etag, job = fetched
            now = self._clock.now()
            # Due "now" by this process's clock may be the future by the clock
            # of the process that suspended the job (docs/guarantees.md, clock
            # agreement): due since its last change is due by both. For the
            # same reason a held job is marked even if its lease looks lapsed
            # here: its holder may still be running it.
            due = min(now, job.updated_at)
            if job.token is not None:
                if job.woken or (arrived is not None and arrived in job.arrivals):
                    return True  # already marked
                if arrived is None:
                    new = job.next(now, woken=True)
                else:  # its suspension takes it off what the wait needs
                    new = job.next(now, arrivals=(*job.arrivals, arrived))
            elif job.wait is None or job.wait[0] != waiting_for.value:
                return True  # not waiting for what arrived: its run-at stands
            elif (left := still_pending(job.pending, arrived)) is not None:
                if left == job.pending:
                    return True  # not among what it still needs
                new = job.next(now, pending=left)  # the rest still to come
            elif job.run_at > due:
                new = job.next(now, run_at=due, wait=None, pending=())
            else:
                return True  # due already
            try:
                await self._io.swap(run_id, new, etag)
            except (PreconditionFailed, NotFound):
                continue  # it moved on (claimed, settled): look again
            if new.token is None:
                self._notify()
            return True
        return True  # it keeps moving: it is live, and whoever moves it sees the work


def killed(job: StoredJob, now: float, reason: str, last_error: str | None) -> StoredJob:
    """``job`` dead for ``reason``: its token and lease dropped."""
    return job.next(
        now,
        dead=True,
        dead_reason=reason,
        last_error=last_error,
        token=None,
        lease_expires_at=None,
    )

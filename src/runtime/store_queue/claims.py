"""The claim race: taking due records by compare-and-swap, against other
processes that race for the same ones.

A claim picks due records from the cache, in line order, and writes each one
claimed (a new token, a lease) over the version it knows. Two processes that
race for a record cannot both win: the loser's swap is refused and it moves
on, remembering the record as held elsewhere. Under contention, processes
holding the same cache race for its head, so a claim takes its records at
random from a wider head (``spread``), and a cache that keeps losing races is
listed again sooner (:mod:`stepstone.runtime.store_queue.pacing`). What a
listing showed but nobody read yet is read as the claim needs it
(:class:`stepstone.runtime.store_queue.discovery.Discovery`).

A claim holds what it won until it returns, and nothing renews a lease the
worker has not been handed: so each record's lease is set as its swap is
sent (not when the claim began, seconds earlier under throttling), a claim
starts no new round once a quarter of its lease has gone, and the leases it
won are extended, ahead of the process's waiting requests, whenever half of
one is gone before it is handed out.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Collection, Sequence

from stepstone.store.base import urgent
from stepstone.store.errors import NotFound, PreconditionFailed, StoreUnavailable

from ..clock import Clock
from ..queue import DEFAULT_LEASE, Delivery
from .discovery import Discovery
from .doorbell import Doorbell
from .pacing import ScanPacing
from .record_io import RecordIO
from .records import CorruptRecord, StoredJob, delivery_of
from .size_hints import held_elsewhere, new_token

CLAIM_ROUNDS = 8
"""Bound on the rounds of swaps (and re-listings between them) of one claim."""

HELD_BACK = 0.25
"""A claim starts no new round once it has taken this much of its lease,
and keeps the leases it won meanwhile from running down, looking as often."""


class ClaimRace:
    """One instance's claims."""

    def __init__(
        self,
        io: RecordIO,
        discovery: Discovery,
        pacing: ScanPacing,
        clock: Clock,
        doorbell: Doorbell,
    ) -> None:
        self._io = io
        self._cache = io.cache
        self._discovery = discovery
        self._pacing = pacing
        self._clock = clock
        self._doorbell = doorbell
        self.lease_hint = DEFAULT_LEASE
        """The last lease this instance claimed with: the guess for others' leases."""
        self.came_up_short = False
        """The last claim returned fewer jobs than asked."""

    def candidates(
        self,
        now: float,
        kinds: frozenset[str] | None,
        limit: int,
        skip: Collection[str] = (),
    ) -> list[str]:
        """Up to ``limit`` ids due now, in line order, of ``kinds`` if given,
        not in ``skip`` or being claimed."""
        writing = self._io.writing
        busy = set(writing).union(skip) if skip else writing
        return self._cache.candidates(now, kinds, limit, busy)

    async def claim(
        self,
        n: int,
        *,
        lease: float,
        kinds: Collection[str] | None = None,
        holder: str | None = None,
    ) -> list[Delivery]:
        if n <= 0:
            return []
        self.lease_hint = lease
        wanted = None if kinds is None else frozenset(kinds)
        now = self._clock.now()
        candidates = self.candidates(now, wanted, n)
        if self._discovery.hinted and (len(candidates) < n or self._cache.fairness_classes() - {0}):
            # The store told of new records: read them when short of work,
            # or, while runs with fairness keys are due, at once, so another
            # tenant's run is served (without keys, the unread line's
            # order stands: a new record does not pass older unread ones).
            await self._discovery.read_hinted()
            now = self._clock.now()
            candidates = self.candidates(now, wanted, n)
        if len(candidates) < n and self._doorbell.look_due() and await self._doorbell.rang():
            self._pacing.list_soon()  # someone enqueued: list now, not at the idle pace
        began = time.monotonic()
        if self._pacing.list_first(
            began, len(candidates) < n, (self._cache[i].confirmed for i in candidates)
        ):
            await self._discovery.scan(self.lease_hint)
            now = self._clock.now()
        if self._discovery.unread:
            await self._discovery.read_other_classes(self._cache.fairness_classes(), now)
        out: list[Delivery] = []
        tried: set[str] = set()
        refused_before = self._pacing.refusals
        for _ in range(CLAIM_ROUNDS):
            need = n - len(out)
            # Under contention other processes hold the same cache in the same
            # order and race for its head: take ours from a wider, shuffled head.
            candidates = self.candidates(now, wanted, need * self._pacing.spread, tried)
            if len(candidates) < need and self._discovery.unread:
                await self._discovery.read_ahead(need - len(candidates), now)
                candidates = self.candidates(now, wanted, need * self._pacing.spread, tried)
            if candidates:
                picked = sorted(random.sample(range(len(candidates)), min(need, len(candidates))))
                batch = [candidates[i] for i in picked]
                tried.update(batch)
                out.extend(await self._swaps(batch, lease, began, holder))
                if len(out) >= n or time.monotonic() - began >= lease * HELD_BACK:
                    break
            elif not self._discovery.unread:
                break
            # (else all it read was taken: read on from wherever it jumped to)
            if self._pacing.stale():
                await self._discovery.scan(self.lease_hint)  # cheaper than more refusals
                now = self._clock.now()
        self.came_up_short = len(out) < n
        if out:
            self._doorbell.worked()
        self._pacing.claimed(contended=self._pacing.refusals > refused_before)
        return out

    async def _swaps(
        self, batch: list[str], lease: float, fresh_since: float, holder: str | None
    ) -> list[Delivery]:
        """Claim each of ``batch`` at once. Those that landed are handed out
        together, so while the others still wait on the store (a throttled
        process sends its writes at its share of the partition: seconds
        each), the leases of those that landed are kept from running down:
        each is extended from now once half of it is gone, and checked again
        as it is handed out. A run claimed and held back past its lease
        would be claimed by another process and run twice."""
        tasks = [
            asyncio.ensure_future(self._claim_one(run_id, lease, fresh_since, holder))
            for run_id in batch
        ]
        pending: set[asyncio.Future[StoredJob | None]] = set(tasks)
        latest: dict[str, StoredJob | None] = {}
        """Each landed claim's version as last written, None once taken by another."""

        async def keep_landed() -> None:
            landed = [latest.get(job.id, job) for job in _landed(tasks)]
            kept = await asyncio.gather(*(self._keep(job, lease) for job in landed if job))
            latest.update(zip((job.id for job in landed if job), kept, strict=True))

        try:
            while pending:
                _, pending = await asyncio.wait(pending, timeout=lease * HELD_BACK)
                if pending:
                    await keep_landed()
        finally:
            for task in pending:
                task.cancel()  # (the claim was cancelled: as gather would)
        await keep_landed()
        won = [job for job in latest.values() if job is not None]
        for job in won:
            self._cache.served(job)  # (its fairness key's share moves on)
        return [delivery_of(job) for job in won]

    async def _claim_one(
        self, run_id: str, lease: float, fresh_since: float, holder: str | None
    ) -> StoredJob | None:
        """Claim one record from what the cache holds of it: the claimed
        version, or None. Its lease is set as the swap is sent (a claim
        waits on listings and reads before it: seconds when throttled)."""
        now = self._clock.now()
        seen = self._cache.get(run_id)
        # Checked again here, not only when the candidates were picked: a
        # concurrent claim in this process may have taken it since, and its
        # etag in the cache is then the one our swap would match.
        if (
            seen is None
            or seen.job is None
            or run_id in self._io.writing
            or not seen.job.claimable(now)
        ):
            return None
        with self._io.write_of(run_id):
            etag, job = seen.etag, seen.job
            if job.partial:  # a lapsed lease of another process: its payload is not here
                try:
                    fetched = await self._io.fetch(run_id)
                except (CorruptRecord, StoreUnavailable):
                    return None
                if fetched is None or not fetched[1].claimable(now):
                    return None
                etag, job = fetched
            new = job.claimed(now, token=new_token(holder), lease_expires_at=now + lease)
            try:
                await self._io.swap(run_id, new, etag)
            except NotFound:
                self._pacing.refused(seen.confirmed, fresh_since)
                self._pacing.tried(won=0, lost=1)
                self._cache.forget(run_id, etag)
                return None
            except PreconditionFailed:
                # Someone else moved it first, most likely by claiming it. Say
                # so (keeping the stale etag): the next listing then reads it
                # only if its size says otherwise.
                self._io.stats.lost_races += 1
                self._pacing.refused(seen.confirmed, fresh_since)
                self._pacing.tried(won=0, lost=1)
                current = self._cache.get(run_id)
                if current is not None and current.etag == etag:
                    self._cache.file(run_id, held_elsewhere(job, etag, now, self.lease_hint))
                return None
            except StoreUnavailable:
                # Not raised: the other claims of this batch landed, and failing
                # the batch would strand them. The write itself may have landed
                # with only its answer lost: then the record holds our token.
                try:
                    fetched = await self._io.fetch(run_id)
                except (CorruptRecord, StoreUnavailable):
                    return None
                if fetched is None or fetched[1].token != new.token:
                    return None
                self._pacing.tried(won=1, lost=0)
                return await self._keep(fetched[1], lease)
            self._pacing.tried(won=1, lost=0)
            return await self._keep(new, lease)

    async def _keep(self, claimed: StoredJob, lease: float) -> StoredJob | None:
        """A claim whose lease has less than half of ``lease`` left (its
        write took that long: S3 waiting out a burst of conflicts on the key,
        or a throttled process's wait; or it waits on the rest of its batch)
        is extended from now, sent ahead of the process's waiting requests
        as a renewal is, or another claimer could take it as it starts and
        the job would run twice. None: another claimer took it meanwhile."""
        run_id = claimed.id
        now = self._clock.now()
        assert claimed.lease_expires_at is not None
        seen = self._cache.get(run_id)
        if seen is None or seen.job is None:
            return claimed
        if seen.job.token != claimed.token:
            return None  # taken by another meanwhile, and read since
        if claimed.lease_expires_at - now >= lease / 2:
            return claimed
        longer = claimed.next(now, lease_expires_at=now + lease)
        with self._io.write_of(run_id), urgent():
            try:
                await self._io.swap(run_id, longer, seen.etag)
            except (NotFound, PreconditionFailed):
                return None
            except StoreUnavailable:
                return seen.job  # (the worker renews it at once: its first beat is due)
        return longer


def _landed(tasks: Sequence[asyncio.Future[StoredJob | None]]) -> list[StoredJob]:
    """The claims of ``tasks`` that landed so far."""
    return [job for task in tasks if task.done() and (job := task.result()) is not None]

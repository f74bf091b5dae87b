"""The cache: what one StoreQueue instance knows of the records, without asking.

Requests are what S3 bills, so each instance remembers, for every record it
wrote or read, its etag, its size and the record itself: id -> :class:`Seen`.
A job this process enqueued is then claimed, renewed and settled without a
GET, and a listing that shows an etag the cache holds costs nothing more.

The cache is bounded (``max_entries``, ``max_bytes`` of payload): past either,
the least recently filed entries are forgotten and read again if needed. A
process that only enqueues (a web app submitting jobs) would otherwise
remember every job it ever submitted.

It is indexed as MemoryQueue's records are: one heap by when each entry
becomes claimable (run-at, lease expiry), one by place in line, entries
invalidated by a stamp rather than removed. A claim costs O(k log n) for the
k entries it looks at, not a pass over the cache.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import secrets
import time
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field

from ..fair_line import FairLine
from ..fairness import bucket_of, fairness_of
from ..queue import sort_key
from .records import StoredJob


@dataclass(slots=True)
class Seen:
    """What this instance knows of one record: its etag and, unless the bytes
    would not decode, the record (possibly stripped of its payload)."""

    etag: str
    job: StoredJob | None
    size: int
    confirmed: float = field(default_factory=time.monotonic)
    """When (monotonic) this instance last wrote, read or listed this version."""
    stamp: int = 0
    """Set when filed in the cache; heap entries with another stamp are stale."""
    guessed: bool = False
    """``job`` is inferred from a listed size (a claim elsewhere), not read:
    see :mod:`stepstone.runtime.store_queue.size_hints`."""
    own: bool = False
    """This instance wrote this version (so no other process has listed it yet)."""


class RecordCache(Mapping[str, Seen]):
    """The records one instance knows, by id, in filing order, with the two
    heaps that say which are due and in what order; see the module docstring.

    ``priority_aging`` places entries in line (:func:`stepstone.runtime.queue.sort_key`);
    ``claim_jitter`` is the most this instance adds to the place of a job it
    learned by reading (see :meth:`_jitter`).
    """

    def __init__(
        self, *, max_entries: int, max_bytes: int, priority_aging: float, claim_jitter: float
    ) -> None:
        self.max_entries = max(1, max_entries)
        self.max_bytes = max_bytes
        self.priority_aging = priority_aging
        self.claim_jitter = max(0.0, claim_jitter)
        self.payload_bytes = 0
        """Payload bytes the entries hold (what ``max_bytes`` bounds)."""
        self._salt = secrets.token_bytes(16)
        self._entries: dict[str, Seen] = {}
        self._timed: list[tuple[float, int, str]] = []
        self._line = FairLine()
        self._stamps = itertools.count(1)

    def __getitem__(self, run_id: str) -> Seen:
        return self._entries[run_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def etag(self, run_id: str) -> str | None:
        seen = self._entries.get(run_id)
        return None if seen is None else seen.etag

    def learn(self, run_id: str, etag: str, job: StoredJob, size: int) -> None:
        """Remember a version this instance wrote. A dead one keeps no payload."""
        self.file(run_id, Seen(etag, job.stripped() if job.dead else job, size, own=True))

    def learn_read(self, run_id: str, etag: str, job: StoredJob, size: int) -> None:
        """Remember a version this instance read. One that is held (by some
        other token, as far as this instance knows) or dead keeps no payload:
        nothing here needs it before it changes, and a change means a GET."""
        held = job.token is not None or job.dead
        self.file(run_id, Seen(etag, job.stripped() if held else job, size))

    def forget(self, run_id: str, etag: str | None = None) -> None:
        """Drop an entry, but only the version ``etag`` if given, so a newer
        version another coroutine learned meanwhile survives."""
        seen = self._entries.get(run_id)
        if seen is not None and (etag is None or seen.etag == etag):
            del self._entries[run_id]
            self.payload_bytes -= _payload_size(seen)

    def clear(self) -> None:
        self._entries.clear()
        self.payload_bytes = 0
        self._timed.clear()
        self._line.clear()

    def file(self, run_id: str, seen: Seen) -> None:
        """Put an entry in the cache and in the heap its state belongs to.

        ``_timed`` orders entries by when they become claimable (run-at,
        lease expiry), ``_line`` orders the claimable ones by place in line.
        Entries are never removed from a heap when the cache changes; a
        popped one whose stamp is not the cache's is skipped.
        """
        seen.stamp = next(self._stamps)
        old = self._entries.pop(run_id, None)  # re-inserted last: the cache is in filing order
        self.payload_bytes += _payload_size(seen) - _payload_size(old)
        self._entries[run_id] = seen
        self._bound()
        job = seen.job
        if job is None or job.dead:
            return
        heapq.heappush(self._timed, (job.due, seen.stamp, run_id))
        if len(self._timed) + len(self._line) > 2 * len(self._entries) + 1024:
            self._reindex()

    def _bound(self) -> None:
        """Evict the least recently filed entries past ``max_entries`` or
        ``max_bytes`` of payload; an evicted entry costs one GET if this
        process needs it again."""
        while len(self._entries) > self.max_entries or (
            self.payload_bytes > self.max_bytes and len(self._entries) > 1
        ):
            self.forget(next(iter(self._entries)))

    def _reindex(self) -> None:
        """Rebuild both heaps from the cache, dropping stale entries."""
        self._timed = []
        self._line.clear()
        for run_id, seen in self._entries.items():
            job = seen.job
            if job is not None and not job.dead:
                self._timed.append((job.due, seen.stamp, run_id))
        heapq.heapify(self._timed)

    def _current(self, run_id: str, stamp: int) -> StoredJob | None:
        seen = self._entries.get(run_id)
        if seen is None or seen.stamp != stamp:
            return None
        return seen.job

    def _promote(self, now: float) -> None:
        """Move entries that have become claimable from ``_timed`` to ``_line``."""
        while self._timed and self._timed[0][0] <= now:
            _, stamp, run_id = heapq.heappop(self._timed)
            job = self._current(run_id, stamp)
            if job is not None:
                key = sort_key(job.run_at, job.priority, self.priority_aging)
                if not self._entries[run_id].own:
                    key += self._jitter(run_id)
                fkey, weight = fairness_of(job.headers)
                self._line.push(key, job.priority, fkey, weight, run_id, stamp)

    def _jitter(self, run_id: str) -> float:
        """This instance's own offset for a job, in ``[0, claim_jitter)`` seconds.

        Processes that list the same burst of jobs would otherwise all walk
        it in the same order and race for the same job at every claim. A
        per-instance pseudo-random offset, stable for the job, gives each
        process its own order among jobs due within ``claim_jitter`` of each
        other (and leaves jobs further apart, and priorities, in order).
        Only jobs this instance learned by reading get one: its own writes
        keep exact order, so a single process is strictly FIFO per priority.
        """
        if not self.claim_jitter:
            return 0.0
        digest = hashlib.blake2b(run_id.encode(), digest_size=8, key=self._salt).digest()
        return int.from_bytes(digest, "big") / 2**64 * self.claim_jitter

    def candidates(
        self,
        now: float,
        kinds: frozenset[str] | None,
        limit: int,
        skip: Collection[str] = (),
    ) -> list[str]:
        """Up to ``limit`` ids due now, in the order claims take them (line
        order, fairness keys served round-robin: :mod:`stepstone.runtime.fair_line`),
        of ``kinds`` if given, not in ``skip``."""
        self._promote(now)

        def current(run_id: str, stamp: int) -> bool:
            job = self._current(run_id, stamp)
            if job is None:
                return False  # stale: the cache has moved on, and refiled it
            if not job.claimable(now):  # only if the clock went back
                heapq.heappush(self._timed, (job.due, stamp, run_id))
                return False
            return True

        def accept(run_id: str) -> bool:
            if run_id in skip:
                return False
            job = self._entries[run_id].job
            return job is not None and (kinds is None or job.kind in kinds)

        return [run_id for run_id, _, _ in self._line.order(limit, current, accept)]

    def served(self, job: StoredJob) -> None:
        """A claim of ``job`` was won: its fairness key's share moves on."""
        self._line.served(*fairness_of(job.headers))

    def fairness_classes(self) -> set[int]:
        """The classes (:func:`stepstone.runtime.fairness.bucket_of`) of the
        fairness keys of the due jobs the cache holds (some may have been
        claimed since)."""
        return {bucket_of(key) for key in self._line.fairness_keys()}

    def next_due(self) -> float | None:
        """The earliest run-at or lease expiry of an entry not yet seen due."""
        while self._timed:
            due, stamp, run_id = self._timed[0]
            if self._current(run_id, stamp) is not None:
                return due
            heapq.heappop(self._timed)
        return None


def _payload_size(seen: Seen | None) -> int:
    if seen is None or seen.job is None:
        return 0
    return len(seen.job.payload)

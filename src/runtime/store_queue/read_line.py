"""The order in which a StoreQueue reads records it has only seen listed.

A listing shows each key's etag, size and last-modified time, not what the
record holds. A process that read every record a listing showed it did not
know would read each job once per process: P processes sharing a backlog
would pay P GETs for every job one of them runs. So a StoreQueue reads
unknown records only as its claims need them, in this order:

- **In line order, as far as a listing shows it.** A record's place in line
  is ``run_at + priority * priority_aging`` (:func:`stepstone.runtime.queue.sort_key`);
  the listing gives its last-modified time (for a waiting record, when it
  was enqueued or given back: its run-at, unless it was scheduled later)
  and, through its size, its priority
  (:func:`stepstone.runtime.store_queue.records.listed_priority`). So an urgent job another
  process enqueued is read before a backlog of ordinary ones, and a backlog
  is read first in first out.
- **In chunks**: records whose estimated places are within ``window`` (the
  queue's ``claim_jitter``) of the one before form a chunk, of at most
  ``chunk`` records. Within a chunk, every process walks the same key order
  but from a random point of its own, wrapping around, so processes read
  different stretches and claim from them without racing for the same
  records; when one runs into records another has taken (claimed or gone
  since the listing), it jumps to a new random point of the chunk
  (:meth:`ReadLine.jump`). Picking each record at random would instead
  collide with a probability that grows with the share of the chunk in
  flight, and strict order would send every process to the same record.
  This is the claim jitter's bargain again: order among jobs due within
  ``window`` of each other is given up for fewer races.

- **Tenants round-robin.** A record's size also says the class of its fairness
  key (:func:`stepstone.runtime.store_queue.records.listed_bucket`): the
  classes whose first records have the priority first in line are read
  round-robin, a record each, so one tenant's backlog is not read through before
  another tenant's job is found. Two keys of one class (one in 31 for two
  tenants) are read in line order between them.

Which record is claimed is still decided by the line order among the
records the process has read, fairness keys served round-robin
(:mod:`stepstone.runtime.fair_line`); this only orders the reading.
"""

from __future__ import annotations

import collections
import operator
import random
from collections.abc import Collection, Iterable
from dataclasses import dataclass

ReadLineEntry = tuple[str, "str | None"]
"""``(id, the etag the cache held when listed)``."""

Listed = tuple[str, "str | None", float] | tuple[str, "str | None", float, int, int]
"""``(id, known etag, estimated place[, listed priority, listed class])``:
the class of its fairness key (0, none, when not given)."""


@dataclass(slots=True)
class _Chunk:
    place: float
    priority: int
    entries: collections.deque[ReadLineEntry]


class ReadLine:
    """Listed records to read, in chunks by estimated place in line; see the
    module docstring."""

    def __init__(self, chunk: int, window: float, rng: random.Random | None = None) -> None:
        if chunk < 1:
            raise ValueError(f"chunk must be at least 1, got {chunk}")
        self.chunk = chunk
        self.window = window
        self._rng = rng or random.Random()
        self._classes: dict[int, collections.deque[_Chunk]] = {}
        """The chunks of each class of fairness key, in line order."""
        self._serving = 0
        """The class read from last: the next of the same priority goes next."""
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def classes(self) -> set[int]:
        """The classes of fairness key with records to read."""
        return set(self._classes)

    def reset(self, listed: Iterable[Listed]) -> None:
        """Replace the line with the entries of ``listed``."""
        self._classes = {}
        by_class: dict[int, list[tuple[str, str | None, float, int]]] = {}
        count = 0
        for entry in listed:
            bucket = entry[4] if len(entry) == 5 else 0
            priority = entry[3] if len(entry) == 5 else 0
            by_class.setdefault(bucket, []).append((entry[0], entry[1], entry[2], priority))
            count += 1
        for bucket, entries in by_class.items():
            in_line = sorted(entries, key=operator.itemgetter(2))
            part: list[tuple[str, str | None, float, int]] = []
            chunks: collections.deque[_Chunk] = collections.deque()
            for item in in_line:
                if part and (len(part) >= self.chunk or item[2] - part[-1][2] > self.window):
                    chunks.append(self._chunk_of(part))
                    part = []
                part.append(item)
            if part:
                chunks.append(self._chunk_of(part))
            self._classes[bucket] = chunks
        self._count = count

    def _chunk_of(self, part: list[tuple[str, str | None, float, int]]) -> _Chunk:
        entries = collections.deque((run_id, known) for run_id, known, _, _ in sorted(part))
        entries.rotate(-self._rng.randrange(len(entries)))
        return _Chunk(part[0][2], part[0][3], entries)

    def _next_class(self, among: Collection[int] | None) -> int | None:
        """The class to read from next: of those (in ``among`` if given) whose
        first chunk has the priority of the first chunk in line, the next
        after the last one read from."""
        heads = {b: c[0] for b, c in self._classes.items() if among is None or b in among}
        if not heads:
            return None
        priority = min(heads.values(), key=lambda chunk: chunk.place).priority
        ready = sorted(b for b, chunk in heads.items() if chunk.priority == priority)
        after = [b for b in ready if b > self._serving]
        self._serving = after[0] if after else ready[0]
        return self._serving

    def take(self, n: int, among: Collection[int] | None = None) -> list[ReadLineEntry]:
        """Remove and return the next ``n`` entries (fewer if the line is
        shorter), of the classes ``among`` if given: the classes whose first
        records have one priority are read round-robin, one record each."""
        out: list[ReadLineEntry] = []
        while len(out) < n:
            bucket = self._next_class(among)
            if bucket is None:
                break
            chunks = self._classes[bucket]
            out.append(chunks[0].entries.popleft())
            if not chunks[0].entries:
                chunks.popleft()
                if not chunks:
                    del self._classes[bucket]
        self._count -= len(out)
        return out

    def jump(self) -> None:
        """Go on from a random point of the chunk last read from."""
        chunks = self._classes.get(self._serving)
        if chunks and len(chunks[0].entries) > 1:
            head = chunks[0].entries
            head.rotate(-self._rng.randrange(len(head)))

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

Which record is claimed is still decided by the line order among the
records the process has read; this only orders the reading.
"""

from __future__ import annotations

import collections
import operator
import random
from collections.abc import Iterable

ReadLineEntry = tuple[str, "str | None"]
"""``(id, the etag the view held when listed)``."""


class ReadLine:
    """Listed records to read, in chunks by estimated place in line; see the
    module docstring."""

    def __init__(self, chunk: int, window: float, rng: random.Random | None = None) -> None:
        if chunk < 1:
            raise ValueError(f"chunk must be at least 1, got {chunk}")
        self.chunk = chunk
        self.window = window
        self._rng = rng or random.Random()
        self._chunks: collections.deque[collections.deque[ReadLineEntry]] = collections.deque()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def reset(self, listed: Iterable[tuple[str, str | None, float]]) -> None:
        """Replace the line with ``(id, known etag, estimated place)`` entries."""
        self._chunks = collections.deque()
        in_line = sorted(listed, key=operator.itemgetter(2))
        part: list[tuple[str, str | None, float]] = []
        for entry in in_line:
            if part and (len(part) >= self.chunk or entry[2] - part[-1][2] > self.window):
                self._add_chunk(part)
                part = []
            part.append(entry)
        if part:
            self._add_chunk(part)
        self._count = len(in_line)

    def _add_chunk(self, part: list[tuple[str, str | None, float]]) -> None:
        entries = collections.deque((run_id, known) for run_id, known, _ in sorted(part))
        entries.rotate(-self._rng.randrange(len(entries)))
        self._chunks.append(entries)

    def take(self, n: int) -> list[ReadLineEntry]:
        """Remove and return the next ``n`` entries (fewer if the line is shorter)."""
        out: list[ReadLineEntry] = []
        while self._chunks and len(out) < n:
            head = self._chunks[0]
            while head and len(out) < n:
                out.append(head.popleft())
            if not head:
                self._chunks.popleft()
        self._count -= len(out)
        return out

    def jump(self) -> None:
        """Go on from a random point of the current chunk."""
        if self._chunks and len(self._chunks[0]) > 1:
            head = self._chunks[0]
            head.rotate(-self._rng.randrange(len(head)))

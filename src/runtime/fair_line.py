"""The line of due jobs, in lanes by priority and fairness key.

What a MemoryQueue and a StoreQueue's cache claim from: each lane a heap by
place in line (:func:`stepstone.runtime.queue.sort_key`), and the order of
claims the rule of :mod:`stepstone.runtime.fairness` gives: the priority of
the first job in line, then the key served next, then that key's first
job. Entries are never removed when a job changes; the owner says which
are current (``current``) and a stale one is dropped as it is met.

With one key (no job names one) the order is the line's, as before. A
claim looks at every lane's head, so it costs O(lanes) per job it takes:
lanes are the fairness keys with due jobs, times their priorities.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

from .fairness import FairShares

Lane = tuple[int, str]
"""``(priority, fairness key)``."""
_Entry = tuple[float, int, str, int, int]
"""``(place, tiebreak, run id, stamp, weight)``."""


class FairLine:
    """Due jobs in lanes; see the module docstring."""

    def __init__(self) -> None:
        self._lanes: dict[Lane, list[_Entry]] = {}
        self._seq = itertools.count()
        self.shares = FairShares()
        """The keys' shares: moved on by :meth:`served`, for each claim made."""

    def __len__(self) -> int:
        return sum(len(lane) for lane in self._lanes.values())

    def push(
        self, place: float, priority: int, key: str, weight: int, run_id: str, stamp: int
    ) -> None:
        """File a due job (``stamp`` tells its version from later ones)."""
        entry = (place, next(self._seq), run_id, stamp, weight)
        heapq.heappush(self._lanes.setdefault((priority, key), []), entry)

    def clear(self) -> None:
        """Drop every entry (the shares stay)."""
        self._lanes.clear()

    def fairness_keys(self) -> set[str]:
        """The fairness keys with entries (some may be stale)."""
        return {key for _, key in self._lanes}

    def served(self, key: str, weight: int) -> None:
        """Record a claim of one of ``key``'s jobs."""
        self.shares.served(key, weight)

    def order(
        self,
        limit: int,
        current: Callable[[str, int], bool],
        accept: Callable[[str], bool],
    ) -> list[tuple[str, str, int]]:
        """Up to ``limit`` jobs ``(run id, key, weight)`` in the order claims
        would take them, of those ``accept`` takes, if each were claimed one
        after another. Nothing changes: the entries stay, and the shares move
        only by :meth:`served`. An entry ``current`` says is stale is dropped."""
        shares = self.shares.copy()
        heads: dict[Lane, _Entry] = {}
        held: list[tuple[Lane, _Entry]] = []

        def advance(lane: Lane) -> None:
            heap = self._lanes[lane]
            while heap:
                entry = heapq.heappop(heap)
                if not current(entry[2], entry[3]):
                    continue
                held.append((lane, entry))
                if accept(entry[2]):
                    heads[lane] = entry
                    return
            heads.pop(lane, None)

        for lane in list(self._lanes):
            advance(lane)
        out: list[tuple[str, str, int]] = []
        while heads and len(out) < limit:
            first = min(heads, key=lambda lane: heads[lane][0])
            priority = first[0]
            lanes = [lane for lane in heads if lane[0] == priority]
            if len(lanes) > 1:  # (one lane, the common case: no shares to weigh)
                lane = min(lanes, key=lambda lane: (shares.standing(lane[1]), heads[lane][0]))
            else:
                lane = first
            entry = heads[lane]
            out.append((entry[2], lane[1], entry[4]))
            shares.served(lane[1], entry[4])
            advance(lane)
        for lane, entry in held:
            heapq.heappush(self._lanes[lane], entry)
        for lane in [lane for lane, heap in self._lanes.items() if not heap]:
            del self._lanes[lane]
        return out

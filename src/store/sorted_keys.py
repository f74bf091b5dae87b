"""Keys kept in listing order, so a MemoryStore lists a prefix without looking at the rest.

A listing is by UTF-8 bytes, from a prefix or a start-after key, a page at a
time. Filtering and sorting every key in the store for each page made a
page cost the size of the whole store: the retention sweep lists a run's
memos and events for every run it removes, and the StoreQueue lists its
records every claim round, so the time per job grew with the store
(docs/performance.md, "Growth with retention"). Here a page costs a binary
search and the keys it returns.

The keys are held in chunks of up to 2 * CHUNK sorted keys, beside the last
key of each chunk: adding or removing one moves at most a chunk's worth of
references, where one sorted list would move half the store's.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator

CHUNK = 512
"""Keys per chunk after a split; a chunk splits when it grows past twice this."""


class SortedKeys:
    """A set of keys (UTF-8 bytes) in byte order."""

    def __init__(self) -> None:
        self._chunks: list[list[bytes]] = []
        self._lasts: list[bytes] = []
        """The last key of each chunk, to find a key's chunk by binary search."""

    def add(self, key: bytes) -> None:
        """Add ``key``, which must not be in the set."""
        if not self._chunks:
            self._chunks.append([key])
            self._lasts.append(key)
            return
        i = bisect_left(self._lasts, key)
        if i == len(self._chunks):  # past every key: it ends the last chunk
            i -= 1
            self._chunks[i].append(key)
            self._lasts[i] = key
        else:
            insort(self._chunks[i], key)
        chunk = self._chunks[i]
        if len(chunk) > 2 * CHUNK:
            self._chunks[i : i + 1] = [chunk[:CHUNK], chunk[CHUNK:]]
            self._lasts[i : i + 1] = [chunk[CHUNK - 1], chunk[-1]]

    def remove(self, key: bytes) -> None:
        """Remove ``key``, which must be in the set."""
        i = bisect_left(self._lasts, key)
        chunk = self._chunks[i]
        j = bisect_left(chunk, key)
        del chunk[j]
        if not chunk:
            del self._chunks[i]
            del self._lasts[i]
        elif j == len(chunk):
            self._lasts[i] = chunk[-1]

    def from_(self, key: bytes, *, inclusive: bool) -> Iterator[bytes]:
        """The keys from ``key`` on (``inclusive``: ``key`` too, if it is one), in order.
        Do not change the set while iterating."""
        find = bisect_left if inclusive else bisect_right
        i = find(self._lasts, key)
        if i == len(self._chunks):
            return
        yield from self._chunks[i][find(self._chunks[i], key) :]
        for later in range(i + 1, len(self._chunks)):
            yield from self._chunks[later]

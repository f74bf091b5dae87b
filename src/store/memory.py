"""MemoryStore: the contract held in a dict, for tests and embedded use.

It holds the same guarantees as the durable backends within one process
(create-if-absent and compare-and-swap are atomic because nothing awaits
between the check and the write), so code tested on it behaves the same on
files and S3, only faster. Its keys are also kept in listing order
(``sorted_keys``), so a listing costs the page it returns, not the store.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

from .base import DEFAULT_PAGE_SIZE, ObjectInfo, ObjectStore, StoredObject
from .errors import AlreadyExists, NotFound, PreconditionFailed
from .keys import validate_key, validate_prefix
from .sorted_keys import SortedKeys


@dataclass(slots=True)
class _Entry:
    data: bytes
    etag: str
    modified: float


class MemoryStore(ObjectStore):
    """An in-process object store.

    ``clock`` gives the ``modified`` time of each write (epoch seconds); pass
    the engine's fake clock in tests where retention is the subject.
    Etags are unique per write (a counter), so two writes of the same bytes
    never share one.
    """

    def __init__(self, *, clock: Callable[[], float] | None = None, name: str = "") -> None:
        self.location = f"memory://{name}"
        self._objects: dict[str, _Entry] = {}
        self._order = SortedKeys()
        self._counter = itertools.count(1)
        self._now = clock or time.time

    def _write(self, key: str, data: bytes) -> str:
        etag = f'"m{next(self._counter):x}"'
        if key not in self._objects:
            self._order.add(key.encode())
        self._objects[key] = _Entry(bytes(data), etag, self._now())
        return etag

    def _entry(self, key: str) -> _Entry:
        validate_key(key, location=self.location)
        entry = self._objects.get(key)
        if entry is None:
            raise NotFound("no such object", location=self.location, key=key)
        return entry

    async def get(self, key: str) -> StoredObject:
        entry = self._entry(key)
        return StoredObject(key, entry.data, entry.etag)

    async def head(self, key: str) -> ObjectInfo:
        entry = self._entry(key)
        return ObjectInfo(key, entry.etag, len(entry.data), entry.modified)

    async def put(self, key: str, data: bytes) -> str:
        validate_key(key, location=self.location)
        return self._write(key, data)

    async def put_if_absent(self, key: str, data: bytes) -> str:
        validate_key(key, location=self.location)
        if key in self._objects:
            raise AlreadyExists("object already exists", location=self.location, key=key)
        return self._write(key, data)

    async def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        entry = self._entry(key)
        if entry.etag != etag:
            raise PreconditionFailed(
                f"etag is {entry.etag}, not {etag}", location=self.location, key=key
            )
        return self._write(key, data)

    async def delete(self, key: str, *, if_match: str | None = None) -> None:
        validate_key(key, location=self.location)
        if if_match is not None:
            entry = self._entry(key)
            if entry.etag != if_match:
                raise PreconditionFailed(
                    f"etag is {entry.etag}, not {if_match}", location=self.location, key=key
                )
        if self._objects.pop(key, None) is not None:
            self._order.remove(key.encode())

    async def list(
        self,
        prefix: str = "",
        *,
        start_after: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
    ) -> list[ObjectInfo]:
        validate_prefix(prefix, location=self.location)
        start = prefix.encode()
        after = start_after.encode() if start_after is not None else None
        # every key under the prefix sorts at or after it, and together
        if after is not None and after >= start:
            keys = self._order.from_(after, inclusive=False)
        else:
            keys = self._order.from_(start, inclusive=True)
        page: list[ObjectInfo] = []
        for encoded in keys:
            if len(page) >= limit or not encoded.startswith(start):
                break
            key = encoded.decode()
            entry = self._objects[key]
            page.append(ObjectInfo(key, entry.etag, len(entry.data), entry.modified))
        return page

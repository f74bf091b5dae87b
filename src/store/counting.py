"""CountingStore: how many store requests the engine makes, by kind.

On S3 the bill (and the latency) is per request, and the kinds are priced
differently: PUT, COPY, POST and LIST cost far more than a GET or HEAD, and
DELETE is free (docs/storage.md). Benchmarks wrap the store in this to report
requests per job, so a change that adds a LIST to every claim shows up as a
number.

Change notices (a FileStore's inotify watch) pass through uncounted: they
cost no request, and a store wrapped to be counted should find its work as
the bare store would.

Each call to the contract is counted once, whether it succeeds or fails (a
failed request is still a request). One ``list`` call is one LIST even though
S3Store pages beyond 1000 keys internally; the engine never asks for more.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence

from .base import (
    DEFAULT_PAGE_SIZE,
    ChangeNotices,
    NewObject,
    ObjectInfo,
    ObjectStore,
    PresignsPuts,
    StoredObject,
)
from .errors import StoreError
from .parts import Parts, SplitObject, Splitter

GET = "GET"
HEAD = "HEAD"
PUT = "PUT"
CONDITIONAL_PUT = "CONDITIONAL_PUT"
LIST = "LIST"
DELETE = "DELETE"

KINDS = (GET, HEAD, PUT, CONDITIONAL_PUT, LIST, DELETE)
"""Every kind counted; ``counts`` holds zero for the ones not seen yet."""


class CountingStore(ObjectStore):
    """Forwards every call to ``inner`` and counts it in ``counts`` by kind."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.location = inner.location
        self.key_limit = inner.key_limit
        self.remote = inner.remote
        self.counts: Counter[str] = Counter()
        self.reset()

    def reset(self) -> None:
        """Zero every count (e.g. after a benchmark's setup)."""
        self.counts.clear()
        self.counts.update(dict.fromkeys(KINDS, 0))

    @property
    def total(self) -> int:
        """Every request counted so far, of every operation."""
        return sum(self.counts.values())

    async def get(self, key: str) -> StoredObject:
        self._read(key)
        return await self.inner.get(key)

    async def get_many(self, keys: Sequence[str]) -> list[StoredObject | None]:
        """Each key counted as the GET it is (one each on S3)."""
        for key in keys:
            self._read(key)
        return await self.inner.get_many(keys)

    def _read(self, key: str) -> None:
        """One GET, alone or in a batch."""
        self.counts[GET] += 1

    async def head(self, key: str) -> ObjectInfo:
        self.counts[HEAD] += 1
        return await self.inner.head(key)

    async def put(self, key: str, data: bytes) -> str:
        self.counts[PUT] += 1
        return await self.inner.put(key, data)

    async def put_if_absent(self, key: str, data: bytes) -> str:
        self._created(key)
        return await self.inner.put_if_absent(key, data)

    async def put_many_if_absent(self, objects: Sequence[NewObject]) -> list[str | StoreError]:
        """Each object counted as the create-if-absent it is (a PUT each on S3)."""
        for obj in objects:
            self._created(obj.key)
        return await self.inner.put_many_if_absent(objects)

    def _created(self, key: str) -> None:
        """One create-if-absent, alone or in a batch."""
        self.counts[CONDITIONAL_PUT] += 1

    async def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        self.counts[CONDITIONAL_PUT] += 1
        return await self.inner.put_if_match(key, data, etag)

    async def put_parts(
        self, key: str, parts: Parts, *, if_absent: bool = False, if_match: str | None = None
    ) -> str:
        """One PUT (conditional or not) however many parts the inner store
        sends them in: a multipart upload's requests are not told apart."""
        self.counts[CONDITIONAL_PUT if if_absent or if_match is not None else PUT] += 1
        return await self.inner.put_parts(key, parts, if_absent=if_absent, if_match=if_match)

    async def get_split(self, key: str, splitter: Splitter) -> SplitObject:
        self._read(key)
        return await self.inner.get_split(key, splitter)

    async def delete(self, key: str, *, if_match: str | None = None) -> None:
        self.counts[DELETE] += 1
        await self.inner.delete(key, if_match=if_match)

    def _listed(self, prefix: str) -> None:
        """One page of a listing (a LIST request on S3)."""
        self.counts[LIST] += 1

    async def list(
        self,
        prefix: str = "",
        *,
        start_after: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
    ) -> list[ObjectInfo]:
        self._listed(prefix)
        return await self.inner.list(prefix, start_after=start_after, limit=limit)

    async def scan(
        self,
        prefix: str = "",
        *,
        start_after: str | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> AsyncIterator[ObjectInfo]:
        """The inner store's own scan (a FileStore walks once), counted as the
        pages a listing page by page would request: one, and one more after
        every full page."""
        self._listed(prefix)
        n = 0
        async for info in self.inner.scan(prefix, start_after=start_after, page_size=page_size):
            yield info
            n += 1
            if n % page_size == 0:
                self._listed(prefix)

    def watch_changes(
        self, prefix: str, on_change: Callable[[str | None], None]
    ) -> Callable[[], None] | None:
        """The inner store's notices (:class:`~stepstone.store.base.ChangeNotices`),
        or None where it gives none."""
        if isinstance(self.inner, ChangeNotices):
            return self.inner.watch_changes(prefix, on_change)
        return None

    async def presign_put(self, key: str, expires_in: float) -> str | None:
        """The inner store's presigned PUT (:class:`~stepstone.store.base.PresignsPuts`),
        or None where it presigns nothing; signing sends no request, so
        nothing is counted."""
        if isinstance(self.inner, PresignsPuts):
            return await self.inner.presign_put(key, expires_in)
        return None

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        await self.inner.close()

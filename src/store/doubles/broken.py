"""BrokenStore: a store that lacks one property the engine needs, on purpose.

The conformance check (:mod:`stepstone.store.conformance`, ``stepstone
check-store``) is only worth running if it catches a store that falls short.
This wrapper makes one property of :data:`stepstone.store.conformance.PROPERTIES`
fail over any real store, the way stores and the gateways in front of them
do fail in practice, so a test can show each break is caught:

- ``create-if-absent``: the check and the write are two steps (a HEAD, then
  a PUT), so concurrent creators can all win;
- ``compare-and-swap``: ``If-Match`` ignored on an existing object;
- ``concurrent-increments``: ``If-Match`` checked and then written in two
  steps (moto's own way, without the test server's lock);
- ``if-match-on-missing``: a write with ``If-Match`` on a missing key creates it
  (an old MinIO's bug);
- ``conditional-delete``: ``If-Match`` on a delete ignored;
- ``list-after-write``: a listing that lags by one write;
- ``read-after-overwrite``: the first read after an overwrite returns the
  version before it (a cache in front of the bucket);
- ``large-objects``: bodies cut at ``body_limit`` bytes (a proxy's limit).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from ..base import DEFAULT_PAGE_SIZE, ObjectInfo, ObjectStore, StoredObject
from ..errors import AlreadyExists, NotFound, PreconditionFailed

BREAKS = (
    "create-if-absent",
    "compare-and-swap",
    "concurrent-increments",
    "if-match-on-missing",
    "conditional-delete",
    "list-after-write",
    "read-after-overwrite",
    "large-objects",
)


class BrokenStore(ObjectStore):
    """Wraps ``inner`` and breaks the property ``breaks`` names; see the module docstring."""

    def __init__(self, inner: ObjectStore, breaks: str, *, body_limit: int = 1024 * 1024) -> None:
        if breaks not in BREAKS:
            raise ValueError(f"unknown property {breaks!r}; known: {', '.join(BREAKS)}")
        self.inner = inner
        self.breaks = breaks
        self.body_limit = body_limit
        self.location = inner.location
        self.key_limit = inner.key_limit
        self.remote = inner.remote
        self._unlisted: str | None = None  # the last key written, while a listing lags
        self._before: dict[str, StoredObject] = {}  # what a cached read still returns

    async def _written(self, key: str, write: Awaitable[str]) -> str:
        etag = await write
        self._unlisted = key if self.breaks == "list-after-write" else None
        return etag

    async def _remember(self, key: str) -> None:
        if self.breaks == "read-after-overwrite":
            try:
                self._before[key] = await self.inner.get(key)
            except NotFound:
                self._before.pop(key, None)

    def _body(self, data: bytes) -> bytes:
        return data[: self.body_limit] if self.breaks == "large-objects" else data

    async def get(self, key: str) -> StoredObject:
        before = self._before.pop(key, None)
        return before if before is not None else await self.inner.get(key)

    async def head(self, key: str) -> ObjectInfo:
        return await self.inner.head(key)

    async def put(self, key: str, data: bytes) -> str:
        await self._remember(key)
        return await self._written(key, self.inner.put(key, self._body(data)))

    async def put_if_absent(self, key: str, data: bytes) -> str:
        if self.breaks != "create-if-absent":
            return await self._written(key, self.inner.put_if_absent(key, self._body(data)))
        try:
            await self.inner.head(key)
        except NotFound:
            await asyncio.sleep(0)  # between the check and the write, others run
            return await self.inner.put(key, data)
        raise AlreadyExists("object already exists", location=self.location, key=key)

    async def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        await self._remember(key)
        if self.breaks == "compare-and-swap":
            await self.inner.head(key)
            return await self.inner.put(key, data)
        if self.breaks == "if-match-on-missing":
            try:
                await self.inner.head(key)
            except NotFound:
                return await self.inner.put(key, data)
        if self.breaks == "concurrent-increments":
            if (await self.inner.head(key)).etag != etag:
                raise PreconditionFailed("etag mismatch", location=self.location, key=key)
            await asyncio.sleep(0)  # between the check and the write, others run
            return await self.inner.put(key, data)
        return await self._written(key, self.inner.put_if_match(key, data, etag))

    async def delete(self, key: str, *, if_match: str | None = None) -> None:
        if self.breaks == "conditional-delete":
            if_match = None
        await self.inner.delete(key, if_match=if_match)

    async def list(
        self,
        prefix: str = "",
        *,
        start_after: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
    ) -> list[ObjectInfo]:
        page = await self.inner.list(prefix, start_after=start_after, limit=limit)
        return [info for info in page if info.key != self._unlisted]

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        await self.inner.close()

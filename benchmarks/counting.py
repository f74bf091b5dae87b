"""CountingStore: an ObjectStore wrapper that counts requests by operation.

Used by the harness when ``store.counting`` has not landed. The categories are
what S3 bills: GET (and HEAD, billed alike), PUT (unconditional), CPUT
(conditional PUT: create-if-absent or compare-and-swap), LIST (one per page),
DELETE (not billed). A request that fails (404, 412) is counted all the same,
because S3 bills it.
"""

from __future__ import annotations

from collections import Counter

from store.base import DEFAULT_PAGE_SIZE, ObjectInfo, ObjectStore, StoredObject

OPERATIONS = ("GET", "HEAD", "PUT", "CPUT", "LIST", "DELETE")


class CountingStore(ObjectStore):
    """Passes every call to ``inner`` and counts it in ``counts``."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.location = inner.location
        self.counts: Counter[str] = Counter()

    def reset(self) -> None:
        self.counts.clear()

    def snapshot(self) -> dict[str, int]:
        return {op: self.counts[op] for op in OPERATIONS}

    async def get(self, key: str) -> StoredObject:
        self.counts["GET"] += 1
        return await self.inner.get(key)

    async def head(self, key: str) -> ObjectInfo:
        self.counts["HEAD"] += 1
        return await self.inner.head(key)

    async def put(self, key: str, data: bytes) -> str:
        self.counts["PUT"] += 1
        return await self.inner.put(key, data)

    async def put_if_absent(self, key: str, data: bytes) -> str:
        self.counts["CPUT"] += 1
        return await self.inner.put_if_absent(key, data)

    async def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        self.counts["CPUT"] += 1
        return await self.inner.put_if_match(key, data, etag)

    async def delete(self, key: str, *, if_match: str | None = None) -> None:
        self.counts["DELETE"] += 1
        await self.inner.delete(key, if_match=if_match)

    async def list(
        self,
        prefix: str = "",
        *,
        start_after: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
    ) -> list[ObjectInfo]:
        self.counts["LIST"] += 1
        return await self.inner.list(prefix, start_after=start_after, limit=limit)

    async def close(self) -> None:
        await self.inner.close()

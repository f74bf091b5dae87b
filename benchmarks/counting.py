"""Request accounting for the harness: stepstone.store.counting.CountingStore, plus a
breakdown by area (the key's first segment under the runner's prefix:
``queue``, ``memos``, ``outcomes``, ``progress``), so a figure like "3 GETs per
job" says whose GETs they are.

Kinds, as S3 bills them: GET and HEAD (read class), PUT and CPUT (a
conditional PUT: create-if-absent or compare-and-swap; write class), LIST
(write class, one per page), DELETE (free). A request that fails (404, 412)
is counted: S3 bills it.
"""

from __future__ import annotations

from collections import Counter

from stepstone.store.base import ObjectInfo
from stepstone.store.counting import CONDITIONAL_PUT, DELETE, GET, HEAD, LIST, PUT
from stepstone.store.counting import CountingStore as _CountingStore

OPERATIONS = ("GET", "HEAD", "PUT", "CPUT", "LIST", "DELETE")
_SHORT = {
    GET: "GET",
    HEAD: "HEAD",
    PUT: "PUT",
    CONDITIONAL_PUT: "CPUT",
    LIST: "LIST",
    DELETE: "DELETE",
}


def _area(key: str) -> str:
    return key.split("/", 1)[0] or "root"


class CountingStore(_CountingStore):
    """stepstone.store.counting.CountingStore that also counts by (operation, area)."""

    def reset(self) -> None:
        super().reset()
        self.by_area: Counter[str] = Counter()

    def snapshot(self) -> dict[str, int]:
        return {_SHORT[kind]: self.counts[kind] for kind in _SHORT}

    def areas(self) -> dict[str, int]:
        return dict(sorted(self.by_area.items()))

    def _read(self, key: str) -> None:
        self.by_area[f"GET {_area(key)}"] += 1
        super()._read(key)

    async def head(self, key: str) -> ObjectInfo:
        self.by_area[f"HEAD {_area(key)}"] += 1
        return await super().head(key)

    async def put(self, key: str, data: bytes) -> str:
        self.by_area[f"PUT {_area(key)}"] += 1
        return await super().put(key, data)

    def _created(self, key: str) -> None:
        self.by_area[f"CPUT {_area(key)}"] += 1
        super()._created(key)

    async def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        self.by_area[f"CPUT {_area(key)}"] += 1
        return await super().put_if_match(key, data, etag)

    async def delete(self, key: str, *, if_match: str | None = None) -> None:
        self.by_area[f"DELETE {_area(key)}"] += 1
        await super().delete(key, if_match=if_match)

    def _listed(self, prefix: str) -> None:
        self.by_area[f"LIST {_area(prefix)}"] += 1
        super()._listed(prefix)

"""The FileStore class: the ObjectStore contract, put together from the parts beside it.

Every call's file I/O runs on the event loop's default thread pool, so the
loop never waits on the disk; the store keeps no thread or descriptor of
its own between calls, so it needs no closing and starts afresh after a
fork.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TypeVar

from ..base import DEFAULT_PAGE_SIZE, ObjectInfo, ObjectStore, StoredObject
from ..errors import StoreConfigError
from ..keys import RESERVED_SEGMENT
from ..parts import Parts, SplitObject, Splitter
from . import notices
from .listing import list_page, next_page, objects_under
from .locks import KeyLocks
from .paths import KeyPaths, make_own_directory
from .reads import head_object, read_object, read_split
from .writes import Condition, Writer, sweep

T = TypeVar("T")


class FileStore(ObjectStore):
    """An object store in a local directory; see the ``stepstone.store.file`` docstring."""

    def __init__(self, root: str | Path) -> None:
        """Open the store at the directory ``root``, made if it is missing."""
        self.root = os.path.realpath(os.fspath(root))
        self.location = f"file://{self.root}"
        temp = os.path.join(self.root, RESERVED_SEGMENT)
        locks = os.path.join(temp, "locks")
        try:
            os.makedirs(self.root, exist_ok=True)
        except OSError as exc:
            raise StoreConfigError(
                f"cannot create the store directory: {exc.strerror}", location=self.location
            ) from exc
        make_own_directory(temp, self.location)
        make_own_directory(locks, self.location)
        self._paths = KeyPaths(self.root, self.location)
        self._writer = Writer(self._paths, KeyLocks(locks, self.location), temp)
        sweep(temp)

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(fn, *args))

    async def _write(
        self, key: str, data: bytes | Parts | None, condition: Condition = "none", tag: str = ""
    ) -> str:
        return await self._run(self._writer.write, key, data, condition, tag) or ""

    # -- the contract -----------------------------------------------------

    async def get(self, key: str) -> StoredObject:
        return await self._run(read_object, self._paths.of(key), key, self.location)

    async def head(self, key: str) -> ObjectInfo:
        return await self._run(head_object, self._paths.of(key), key, self.location)

    async def put(self, key: str, data: bytes) -> str:
        return await self._write(key, bytes(data))

    async def put_if_absent(self, key: str, data: bytes) -> str:
        return await self._write(key, bytes(data), "absent")

    async def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        return await self._write(key, bytes(data), "match", etag)

    async def put_parts(
        self, key: str, parts: Parts, *, if_absent: bool = False, if_match: str | None = None
    ) -> str:
        """The buffers written to the object's file one after another, never joined."""
        if if_absent:
            return await self._write(key, parts, "absent")
        if if_match is not None:
            return await self._write(key, parts, "match", if_match)
        return await self._write(key, parts)

    async def get_split(self, key: str, splitter: Splitter) -> SplitObject:
        """The large piece read from the file straight into its own allocation."""
        path = self._paths.of(key)
        # Handed over in a box, not as the executor future's result: a
        # finished future can outlive the read (in a handle of the loop not
        # yet collected), and with it the piece, the value's size again.
        box: list[SplitObject] = []
        await self._run(lambda: box.append(read_split(path, key, self.location, splitter)))
        return box.pop()

    async def delete(self, key: str, *, if_match: str | None = None) -> None:
        if if_match is None:
            await self._write(key, None)
        else:
            await self._write(key, None, "match", if_match)

    async def list(
        self,
        prefix: str = "",
        *,
        start_after: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
    ) -> list[ObjectInfo]:
        return await self._run(list_page, self.root, self.location, prefix, start_after, limit)

    async def scan(
        self,
        prefix: str = "",
        *,
        start_after: str | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> AsyncIterator[ObjectInfo]:
        """Every object under ``prefix`` in key order, from one walk of the
        tree handed over a page at a time. (Listing page after page would
        read and sort a whole directory again for every page: a scan of a
        directory of N files would cost N * N / page_size.)"""
        walk = objects_under(self.root, self.location, prefix, start_after)
        try:
            while True:
                page = await self._run(next_page, walk, max(1, page_size), self.location)
                for info in page:
                    yield info
                if len(page) < page_size:
                    return
        finally:
            # (still running in a pool thread if we were cancelled mid-page:
            # then it is closed when collected)
            with contextlib.suppress(ValueError):
                walk.close()

    def watch_changes(
        self, prefix: str, on_change: Callable[[str | None], None]
    ) -> Callable[[], None] | None:
        """Notices of objects placed directly under ``prefix`` by any process
        on this machine (:mod:`stepstone.store.file.notices`, inotify); None
        where the platform has none."""
        if not prefix.endswith("/"):
            raise ValueError(f"watch_changes takes a prefix ending in '/', got {prefix!r}")
        directory = os.path.dirname(self._paths.of(prefix + "x"))
        return notices.watch(directory, prefix, on_change)

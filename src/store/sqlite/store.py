"""The SqliteStore class: the ObjectStore contract on one SQLite file, put
together from the parts beside it.

What is the class's own: requests queue in two batchers, writes and reads
(``batches``), each served a batch at a time on a thread of its own, so the
event loop never waits on the database; each batch takes a connection from
the store's idle ones (any thread may use one, one at a time). A store
used before a fork starts afresh in the child, and leaves the parent's
connections alone (SQLite's rule for a fork).
"""

from __future__ import annotations

import asyncio
import builtins
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from ..base import DEFAULT_PAGE_SIZE, NewObject, ObjectInfo, ObjectStore, StoredObject
from ..errors import StoreConfigError, StoreError
from ..forks import forks
from ..keys import validate_key
from ..parts import Parts, SplitObject, Splitter
from . import notices, reads, writes
from .batches import Batcher
from .connection import Synchronous, connect, prepare
from .reads import Changes, Get, GetMany, GetSplit, Head, ListPage, Read
from .writes import Condition, Write


class SqliteStore(ObjectStore):
    """An object store in one SQLite file, shared by every process on this
    machine that opens it; see the ``stepstone.store.sqlite`` docstring."""

    def __init__(
        self, path: str | Path, *, synchronous: Synchronous = "full", create: bool = True
    ) -> None:
        """Open the database at ``path``, made (with its directory) if it is
        missing and ``create`` (a URL opens only one that exists:
        :func:`stepstone.store.open_store`). ``synchronous`` is how durable a
        write is when it returns: ``"full"``, across a power cut (the log is
        synced at every commit), or ``"normal"``, across its process being
        killed, while a power cut can undo the last commits (docs/storage.md).

        Raises StoreConfigError when the file cannot be opened, is no SQLite
        database, or is another application's."""
        self.path = os.path.realpath(os.fspath(path))
        self.location = f"sqlite://{self.path}"
        if synchronous not in ("full", "normal"):
            raise StoreConfigError(
                f"synchronous={synchronous!r}: use 'full' or 'normal'", location=self.location
            )
        self.synchronous: Synchronous = synchronous
        if create:
            try:
                os.makedirs(os.path.dirname(self.path), exist_ok=True)
            except OSError as exc:
                raise StoreConfigError(
                    f"cannot create the store's directory: {exc.strerror}", location=self.location
                ) from exc
        conn = connect(self.path, self.location, synchronous=synchronous, create=create)
        try:
            prepare(conn, self.location)
        except BaseException:
            conn.close()
            raise
        self._idle = [conn]
        self._lock = threading.Lock()
        self._start_afresh()

    # -- plumbing ---------------------------------------------------------

    def _start_afresh(self) -> None:
        """New batchers (and, in a forked child, no connections of the parent's)."""
        self._generation = forks()
        self._writes: Batcher[Write] = Batcher(self._commit, "stepstone-sqlite-writes")
        self._reads: Batcher[Read] = Batcher(self._serve_reads, "stepstone-sqlite-reads")

    def _forked(self) -> None:
        """In a child forked from a process that used this store, start afresh:
        the parent's threads did not come along, and its connections must
        not be used (nor closed) here."""
        if self._generation != forks():
            self._idle = []
            self._start_afresh()

    def _connection(self) -> sqlite3.Connection:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return connect(self.path, self.location, synchronous=self.synchronous, create=False)

    def _done_with(self, conn: sqlite3.Connection) -> None:
        with self._lock:
            self._idle.append(conn)

    def _commit(self, batch: list[Write]) -> None:
        try:
            conn = self._connection()
        except StoreError as exc:
            for write in batch:
                write.error = exc
            return
        try:
            placed = writes.commit(conn, batch, self.location)
        finally:
            self._done_with(conn)
        if placed:
            notices.ring(self.path)

    def _serve_reads(self, batch: list[Read]) -> None:
        try:
            conn = self._connection()
        except StoreError as exc:
            for read in batch:
                read.error = exc
            return
        try:
            reads.serve(conn, batch, self.location)
        finally:
            self._done_with(conn)

    async def _write(self, write: Write) -> str | None:
        validate_key(write.key, location=self.location)
        self._forked()
        await self._writes.run((write,))
        if write.error is not None:
            raise write.error
        return write.result

    async def _read(self, read: Read) -> None:
        self._forked()
        await self._reads.run((read,))
        if read.error is not None:
            raise read.error

    # -- the contract -----------------------------------------------------

    async def get(self, key: str) -> StoredObject:
        read = Get(validate_key(key, location=self.location))
        await self._read(read)
        assert read.result is not None
        return read.result

    async def get_many(self, keys: Sequence[str]) -> list[StoredObject | None]:
        """All ``keys`` read in one read transaction (None for each that names nothing)."""
        for key in keys:
            validate_key(key, location=self.location)
        if not keys:
            return []
        read = GetMany("", keys=list(keys))
        await self._read(read)
        return read.results

    async def head(self, key: str) -> ObjectInfo:
        read = Head(validate_key(key, location=self.location))
        await self._read(read)
        assert read.result is not None
        return read.result

    async def put(self, key: str, data: bytes) -> str:
        return _etag_of(await self._write(Write(key, bytes(data))))

    async def put_if_absent(self, key: str, data: bytes) -> str:
        return _etag_of(await self._write(Write(key, bytes(data), "absent")))

    async def put_many_if_absent(self, objects: Sequence[NewObject]) -> list[str | StoreError]:
        """Every create of the call in one transaction, with one commit."""
        answers: list[str | StoreError] = []
        batch: list[Write] = []
        for obj in objects:
            try:
                validate_key(obj.key, location=self.location)
            except StoreError as exc:
                answers.append(exc)
                continue
            answers.append("")
            batch.append(Write(obj.key, bytes(obj.data), "absent"))
        if batch:
            self._forked()
            await self._writes.run(batch)
        made = iter(batch)
        return [answer if answer else _answer(next(made)) for answer in answers]

    async def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        return _etag_of(await self._write(Write(key, bytes(data), "match", etag)))

    async def put_parts(
        self, key: str, parts: Parts, *, if_absent: bool = False, if_match: str | None = None
    ) -> str:
        """The buffers written a piece at a time as they are cut from the
        body (a piece of ``PIECE`` bytes at most joined), never joined whole."""
        condition: Condition = (
            "absent" if if_absent else "match" if if_match is not None else "none"
        )
        return _etag_of(await self._write(Write(key, parts, condition, if_match)))

    async def get_split(self, key: str, splitter: Splitter) -> SplitObject:
        """A large object's piece filled from the database a piece at a time."""
        read = GetSplit(validate_key(key, location=self.location), splitter=splitter)
        await self._read(read)
        result, read.result = read.result, None  # (the request may outlive the read)
        assert result is not None
        return result

    async def delete(self, key: str, *, if_match: str | None = None) -> None:
        await self._write(Write(key, None, "none" if if_match is None else "match", if_match))

    async def list(
        self,
        prefix: str = "",
        *,
        start_after: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
    ) -> list[ObjectInfo]:
        read = ListPage(prefix, start_after=start_after, limit=limit)
        await self._read(read)
        return read.result

    # -- notices ----------------------------------------------------------

    def watch_changes(
        self, prefix: str, on_change: Callable[[str | None], None]
    ) -> Callable[[], None] | None:
        """Notices of objects placed directly under ``prefix`` by any process
        on this machine (:mod:`stepstone.store.sqlite.notices`); None where
        the platform has no inotify."""
        if not prefix.endswith("/"):
            raise ValueError(f"watch_changes takes a prefix ending in '/', got {prefix!r}")
        return notices.watch(self.path, prefix, self._changes, on_change)

    async def _changes(
        self, prefix: str, after: int | None
    ) -> tuple[int, builtins.list[str] | None]:
        read = Changes(prefix, after=after)
        await self._read(read)
        return read.top, read.keys

    async def close(self) -> None:
        """Finish the batches queued, then close the connections. The store
        can be used again."""
        if self._generation != forks():
            self._forked()
            return
        for batcher in (self._writes, self._reads):
            thread = batcher.stop()
            if thread is not None:
                await asyncio.get_running_loop().run_in_executor(None, thread.join)
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _answer(write: Write) -> str | StoreError:
    """A create's etag, or the StoreError that refused it (anything else is a bug: raised)."""
    if write.error is None:
        return _etag_of(write.result)
    if isinstance(write.error, StoreError):
        return write.error
    raise write.error


def _etag_of(result: str | None) -> str:
    assert result is not None, "a committed put has an etag"
    return result

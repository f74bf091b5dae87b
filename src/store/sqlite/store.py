"""The SqliteStore class: the contract on one SQLite file, its calls served
in batches off the event loop.

Writes and reads queue in a batcher each (``calls``), served on a thread of
its own, so the event loop never waits on the database: a batch of writes
in one transaction, reads one statement each. A batch takes a connection
from the store's idle ones (any thread may use one, one at a time). A store
used before a fork starts afresh in the child, and leaves the parent's
connections alone (SQLite's rule for a fork).
"""

from __future__ import annotations

import asyncio
import builtins
import os
import sqlite3
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..base import DEFAULT_PAGE_SIZE, NewObject, ObjectInfo, ObjectStore, StoredObject
from ..errors import StoreConfigError, StoreError
from ..keys import validate_key
from ..parts import Parts, SplitObject, Splitter
from . import notices
from . import objects as db
from .calls import SqlBatcher, SqlCall, call
from .database import Synchronous, connect, prepare, store_error, transaction

_STORES: weakref.WeakSet[SqliteStore] = weakref.WeakSet()


def _forked() -> None:
    for store in _STORES:
        store._start_afresh()


os.register_at_fork(after_in_child=_forked)


class SqliteStore(ObjectStore):
    """An object store in one SQLite file, shared by the processes of this
    machine that open it; see the ``stepstone.store.sqlite`` docstring."""

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
        self.commits = 0
        """Write transactions this store committed (each a sync of the log
        with ``synchronous`` FULL, none with NORMAL)."""
        self._start_afresh()
        self._idle.append(conn)
        _STORES.add(self)

    def _start_afresh(self) -> None:
        """New batchers and no connections (in a forked child: not the parent's)."""
        self._lock = threading.Lock()
        self._idle: list[sqlite3.Connection] = []
        self._writes = SqlBatcher(self._commit, "stepstone-sqlite-writes")
        self._reads = SqlBatcher(self._read_all, "stepstone-sqlite-reads")

    def _connection(self) -> sqlite3.Connection:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return connect(self.path, self.location, synchronous=self.synchronous, create=False)

    def _done_with(self, conn: sqlite3.Connection) -> None:
        with self._lock:
            self._idle.append(conn)

    def _commit(self, calls: list[SqlCall]) -> None:
        """A batch of writes in one transaction (a lone write of one
        statement, as its own); then the watchers are told (``notices``)."""
        try:
            conn = self._connection()
            try:
                if len(calls) == 1 and not isinstance(calls[0].args[1], Parts):
                    call(conn, calls[0])
                else:
                    with transaction(conn):
                        for one in calls:
                            call(conn, one)
            finally:
                self._done_with(conn)
        except (sqlite3.Error, StoreError) as exc:
            for one in calls:
                if one.error is None:
                    one.result = None
                    one.error = (
                        exc
                        if isinstance(exc, StoreError)
                        else (store_error(exc, self.location, one.key, "cannot write"))
                    )
            return
        self.commits += 1
        if any(isinstance(one.result, str) for one in calls):
            notices.ring(self.path)

    def _read_all(self, calls: list[SqlCall]) -> None:
        try:
            conn = self._connection()
        except StoreError as exc:
            for one in calls:
                one.error = exc
            return
        try:
            for one in calls:
                try:
                    call(conn, one)
                except sqlite3.Error as exc:
                    one.error = store_error(exc, self.location, one.key, "cannot read")
        finally:
            self._done_with(conn)

    async def _run(self, batcher: SqlBatcher, calls: Sequence[SqlCall]) -> list[Any]:
        await batcher.run(calls)
        for one in calls:
            if one.error is not None and not isinstance(one.error, StoreError):
                raise one.error  # (a failed stream's ValueError; a bug)
        return [one.error or one.result for one in calls]

    async def _one(self, batcher: SqlBatcher, fn: Callable[..., Any], *args: Any) -> Any:
        key = validate_key(args[0], location=self.location) if args else None
        [answer] = await self._run(batcher, [SqlCall(fn, (*args, self.location), key)])
        if isinstance(answer, StoreError):
            raise answer
        return answer

    async def _write(self, *args: Any) -> Any:
        return await self._one(self._writes, db.write, *args)

    # -- the contract -----------------------------------------------------

    async def get(self, key: str) -> StoredObject:
        found: StoredObject = await self._one(self._reads, db.get, key)
        return found

    async def get_many(self, keys: Sequence[str]) -> builtins.list[StoredObject | None]:
        """All ``keys`` read in one batch (None for each that names nothing)."""
        for key in keys:
            validate_key(key, location=self.location)
        calls = [SqlCall(db.get_or_none, (key, self.location), key) for key in keys]
        answers = await self._run(self._reads, calls)
        for answer in answers:
            if isinstance(answer, StoreError):
                raise answer
        return answers

    async def head(self, key: str) -> ObjectInfo:
        found: ObjectInfo = await self._one(self._reads, db.head, key)
        return found

    async def put(self, key: str, data: bytes) -> str:
        return str(await self._write(key, bytes(data), "none", None))

    async def put_if_absent(self, key: str, data: bytes) -> str:
        return str(await self._write(key, bytes(data), "absent", None))

    async def put_many_if_absent(
        self, objects: Sequence[NewObject]
    ) -> builtins.list[str | StoreError]:
        """Every create of the call in one transaction, with one commit."""
        answers: list[str | StoreError] = []
        calls: list[SqlCall] = []
        for obj in objects:
            try:
                validate_key(obj.key, location=self.location)
            except StoreError as exc:
                answers.append(exc)
                continue
            args = (obj.key, bytes(obj.data), "absent", None, self.location)
            calls.append(SqlCall(db.write, args, obj.key))
            answers.append("")
        made = iter(await self._run(self._writes, calls) if calls else [])
        return [answer or next(made) for answer in answers]

    async def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        return str(await self._write(key, bytes(data), "match", etag))

    async def put_parts(
        self, key: str, parts: Parts, *, if_absent: bool = False, if_match: str | None = None
    ) -> str:
        """The buffers written a piece at a time as they are cut from the
        body (a piece of ``PIECE`` bytes at most joined), never joined whole."""
        condition = "absent" if if_absent else "match" if if_match is not None else "none"
        return str(await self._write(key, parts, condition, if_match))

    async def get_split(self, key: str, splitter: Splitter) -> SplitObject:
        """A large object's piece filled from the database a piece at a time."""
        found: SplitObject = await self._one(self._reads, db.split, key, splitter)
        return found

    async def delete(self, key: str, *, if_match: str | None = None) -> None:
        await self._write(key, None, "none" if if_match is None else "match", if_match)

    async def list(
        self,
        prefix: str = "",
        *,
        start_after: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
    ) -> builtins.list[ObjectInfo]:
        page = SqlCall(db.listing, (prefix, start_after, limit, self.location))
        [answer] = await self._run(self._reads, [page])
        if isinstance(answer, StoreError):
            raise answer
        found: list[ObjectInfo] = answer
        return found

    # -- notices ----------------------------------------------------------

    def watch_changes(
        self, prefix: str, on_change: Callable[[str | None], None]
    ) -> Callable[[], None] | None:
        """Notices of objects placed directly under ``prefix`` by any process
        on this machine (:mod:`stepstone.store.sqlite.notices`), from the
        moment of the call; None where the platform has no inotify."""
        if not prefix.endswith("/"):
            raise ValueError(f"watch_changes takes a prefix ending in '/', got {prefix!r}")
        since = self._last_write()
        return notices.watch(self.path, prefix, self._changes, on_change, since=since)

    def _last_write(self) -> int | None:
        """The number of the last write, read now on the caller's thread (one
        row; a watch starts once per queue); None if it cannot be read (the
        watch's first look learns it then)."""
        try:
            conn = self._connection()
        except StoreError:
            return None
        try:
            return db.changes(conn, "", None)[0]
        except sqlite3.Error:
            return None
        finally:
            self._done_with(conn)

    async def _changes(
        self, prefix: str, after: int | None
    ) -> tuple[int, builtins.list[str] | None]:
        [answer] = await self._run(self._reads, [SqlCall(db.changes, (prefix, after))])
        if isinstance(answer, StoreError):
            raise answer
        found: tuple[int, list[str] | None] = answer
        return found

    async def close(self) -> None:
        """Finish the calls queued, then close the connections. The store
        can be used again."""
        for batcher in (self._writes, self._reads):
            thread = batcher.stop()
            if thread is not None:
                await asyncio.get_running_loop().run_in_executor(None, thread.join)
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

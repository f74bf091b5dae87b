"""Reads: each one statement, but for an object kept in pieces.

A read of a small object is one statement (SQLite makes it its own read
transaction), for the reason a write is (``writes``). An object kept in
pieces is read in a read transaction, which sees the database as of its
first read whatever is committed meanwhile, so its row and its pieces are
of one version. Its pieces come out one at a time, straight into the place
that keeps its bytes (an allocation of its size, or a split's sink), so a
read holds at most one piece beside the value.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ..base import ObjectInfo, StoredObject
from ..errors import NotFound, StoreConfigError, StoreError
from ..keys import validate_prefix
from ..parts import SPLIT_LOOK, Sink, SplitObject, Splitter, filled, split_in_memory
from .batches import Request
from .connection import store_error, transaction
from .writes import etag

Row = tuple[int, int, bytes | None]
"""An object's id, size and data (None: in pieces)."""

CHANGES_AT_ONCE = 1000
"""The most changes under a prefix one look reports; past it the watcher
hears that notices were lost, and lists."""


@dataclass(eq=False, slots=True)
class Read(Request):
    """A read of ``key`` (a listing's prefix, for a listing)."""

    key: str

    def serve(self, conn: sqlite3.Connection, location: str) -> None:
        raise NotImplementedError


@dataclass(eq=False, slots=True)
class Get(Read):
    result: StoredObject | None = None

    def serve(self, conn: sqlite3.Connection, location: str) -> None:
        self.result = _get(conn, self.key, location)


@dataclass(eq=False, slots=True)
class GetMany(Read):
    """``get_many``'s keys (``key`` unused), None for each that names nothing."""

    keys: list[str] = field(default_factory=list)
    results: list[StoredObject | None] = field(default_factory=list)

    def serve(self, conn: sqlite3.Connection, location: str) -> None:
        self.results = []
        for key in self.keys:
            try:
                self.results.append(_get(conn, key, location))
            except NotFound:
                self.results.append(None)


@dataclass(eq=False, slots=True)
class Head(Read):
    result: ObjectInfo | None = None

    def serve(self, conn: sqlite3.Connection, location: str) -> None:
        row = conn.execute(
            "SELECT id, size, modified FROM objects WHERE key = ?", (self.key,)
        ).fetchone()
        if row is None:
            raise NotFound("no such object", location=location, key=self.key)
        self.result = ObjectInfo(self.key, etag(row[0]), row[1], row[2])


@dataclass(eq=False, slots=True)
class ListPage(Read):
    """One page of a listing of the prefix ``key``."""

    start_after: str | None = None
    limit: int = 0
    result: list[ObjectInfo] = field(default_factory=list)

    def serve(self, conn: sqlite3.Connection, location: str) -> None:
        validate_prefix(self.key, location=location)
        where, params = ["key >= ?"], [self.key]
        end = end_of(self.key)
        if end is not None:
            where.append("key < ?")
            params.append(end)
        if self.start_after is not None:
            where.append("key > ?")
            params.append(self.start_after)
        rows = conn.execute(
            f"SELECT key, id, size, modified FROM objects WHERE {' AND '.join(where)}"
            " ORDER BY key LIMIT ?",
            (*params, max(0, self.limit)),
        )
        self.result = [ObjectInfo(key, etag(i), size, modified) for key, i, size, modified in rows]


@dataclass(eq=False, slots=True)
class GetSplit(Read):
    splitter: Splitter | None = None
    result: SplitObject | None = None

    def serve(self, conn: sqlite3.Connection, location: str) -> None:
        _read(conn, self.key, location, lambda conn, found: self._split(conn, found, location))

    def _split(self, conn: sqlite3.Connection, found: Row, location: str) -> None:
        assert self.splitter is not None
        object_id, size, data = found
        tag = etag(object_id)
        if data is not None:
            self.result = split_in_memory(self.key, data, tag, self.splitter)
            return
        body = _Body(conn, object_id, self.key, location)
        look = body.peek(SPLIT_LOOK)
        split = self.splitter(look)
        if split is None or split.start > len(look) or split.start + split.length > size:
            self.result = SplitObject(self.key, body.take(size), b"", b"", tag)
            return
        before = body.take(split.start)
        if split.into is not None:
            body.hand_over(split.length, split.into)
            piece = b""
        else:
            piece = filled(split.length, body.fill)
        after = body.take(size - split.start - split.length)
        self.result = SplitObject(self.key, before, piece, after, tag)


@dataclass(eq=False, slots=True)
class Changes(Read):
    """The keys placed directly under the prefix ``key`` since the write
    numbered ``after`` (None: none, only where the numbers are now), and the
    number of the last write; ``keys`` None when there were too many."""

    after: int | None = None
    top: int = 0
    keys: list[str] | None = None

    def serve(self, conn: sqlite3.Connection, location: str) -> None:
        row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'objects'").fetchone()
        self.top = row[0] if row else 0
        if self.after is None or self.after >= self.top:
            self.keys = []
            return
        rows = conn.execute(
            "SELECT key FROM objects WHERE id > ? AND id <= ? AND key >= ? AND key < ?"
            " ORDER BY id LIMIT ?",
            (self.after, self.top, self.key, end_of(self.key), CHANGES_AT_ONCE + 1),
        ).fetchall()
        if len(rows) > CHANGES_AT_ONCE:
            self.keys = None
            return
        start = len(self.key)
        self.keys = [key for (key,) in rows if "/" not in key[start:]]


def serve(conn: sqlite3.Connection, reads: list[Read], location: str) -> None:
    """Serve ``reads``; each gets its result or error."""
    for read in reads:
        try:
            read.serve(conn, location)
        except StoreError as exc:
            read.error = exc
        except sqlite3.Error as exc:
            read.error = store_error(exc, location, read.key or None, "cannot read")


def end_of(prefix: str) -> str | None:
    """The least string after every string that starts with ``prefix`` (None:
    there is none, for the empty prefix). UTF-8 orders strings as their code
    points do, so it is ``prefix`` with its last character the next one."""
    for i in range(len(prefix) - 1, -1, -1):
        after = ord(prefix[i]) + 1
        if after <= 0x10FFFF:
            if 0xD800 <= after <= 0xDFFF:  # (surrogates are no characters)
                after = 0xE000
            return prefix[:i] + chr(after)
    return None


def _read(
    conn: sqlite3.Connection,
    key: str,
    location: str,
    use: Callable[[sqlite3.Connection, Row], None],
) -> None:
    """``use`` the object's row; a row whose bytes are in pieces is read again,
    and used, in a read transaction (the first read was its own)."""
    found = _row(conn, key, location)
    if found[2] is not None:
        use(conn, found)
        return
    with transaction(conn, "BEGIN"):
        use(conn, _row(conn, key, location))


def _row(conn: sqlite3.Connection, key: str, location: str) -> Row:
    row = conn.execute("SELECT id, size, data FROM objects WHERE key = ?", (key,)).fetchone()
    if row is None:
        raise NotFound("no such object", location=location, key=key)
    return row[0], row[1], row[2]


def _get(conn: sqlite3.Connection, key: str, location: str) -> StoredObject:
    got: list[StoredObject] = []

    def whole(conn: sqlite3.Connection, found: Row) -> None:
        object_id, size, data = found
        if data is None:
            data = filled(size, _Body(conn, object_id, key, location).fill)
        got.append(StoredObject(key, data, etag(object_id)))

    _read(conn, key, location, whole)
    return got[0]


class _Body:
    """A large object's bytes, read from its pieces in order, a length at a time."""

    def __init__(self, conn: sqlite3.Connection, object_id: int, key: str, location: str) -> None:
        self._pieces: Iterator[tuple[bytes]] = conn.execute(
            "SELECT data FROM pieces WHERE object = ? ORDER BY n", (object_id,)
        )
        self._left = memoryview(b"")
        self._key = key
        self._location = location

    def _next(self) -> memoryview:
        if not self._left:
            row = next(self._pieces, None)
            if row is None:
                raise StoreConfigError(
                    "the object's pieces end before its size: the database is damaged",
                    location=self._location,
                    key=self._key,
                )
            self._left = memoryview(row[0])
        return self._left

    def fill(self, view: memoryview) -> None:
        """Fill ``view`` with the next bytes."""
        done = 0
        while done < len(view):
            left = self._next()
            n = min(len(left), len(view) - done)
            view[done : done + n] = left[:n]
            self._left = left[n:]
            done += n

    def hand_over(self, length: int, into: Sink) -> None:
        """The next ``length`` bytes handed to ``into``, a piece's worth at most at a time."""
        while length:
            left = self._next()
            n = min(len(left), length)
            into(left[:n])
            self._left = left[n:]
            length -= n

    def take(self, length: int) -> bytes:
        """The next ``length`` bytes."""
        return filled(length, self.fill)

    def peek(self, length: int) -> bytes:
        """Up to ``length`` of the next bytes, left to be read again (at most a piece)."""
        return bytes(self._next()[:length])

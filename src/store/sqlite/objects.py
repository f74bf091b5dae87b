"""The objects in the database: each operation of the contract as statements.

A write is one statement that carries its condition (``ON CONFLICT DO
NOTHING`` for a create, ``WHERE EXISTS`` the etag for a swap, ``AND id =``
for a conditional delete), made inside a transaction that holds the write
lock, so no writer, in any process, comes between the check and the act;
every write of an object inserts a new row (a swap or a put REPLACEs the
old one), so its etag is new every time. One statement a call, because each
is where the serving thread takes the interpreter lock back from a busy
event loop. An object's bytes past ``PIECE`` are kept in pieces of that
size, written as they are cut from the body and read one at a time into
their place, in a read transaction (its row and its pieces of one
version), so a large value is never held twice, nor limited by SQLite's
largest value (a GB).
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import Literal, TypeVar

from ..base import ObjectInfo, StoredObject
from ..errors import AlreadyExists, NotFound, PreconditionFailed, StoreConfigError
from ..keys import validate_prefix
from ..parts import SPLIT_LOOK, Parts, Sink, SplitObject, Splitter, filled, split_in_memory
from .database import transaction

Condition = Literal["none", "absent", "match"]
T = TypeVar("T")

PIECE = 1 << 20
"""The size of a large object's pieces, and the largest object kept in its row."""

CHANGES_AT_ONCE = 1000
"""The most changes one look for them reports; past it, notices were lost."""

_INTO = "INTO objects (key, size, modified, data)"
_WRITE = {
    "none": f"INSERT OR REPLACE {_INTO} VALUES (?, ?, ?, ?)",
    "absent": f"INSERT {_INTO} VALUES (?, ?, ?, ?) ON CONFLICT (key) DO NOTHING",
    "match": f"INSERT OR REPLACE {_INTO} SELECT ?, ?, ?, ?"
    " WHERE EXISTS (SELECT 1 FROM objects WHERE key = ? AND id = ?)",
}
_DELETE = {
    "none": "DELETE FROM objects WHERE key = ?",
    "match": "DELETE FROM objects WHERE key = ? AND id = ?",
}


def etag(object_id: int) -> str:
    return f'"{object_id}"'


def write(
    conn: sqlite3.Connection,
    key: str,
    data: bytes | Parts | None,
    condition: Condition,
    tag: str | None,
    location: str,
) -> str | None:
    """Put ``data`` at ``key`` (None: delete it) if ``condition`` holds; the
    new etag. A body of parts goes in a savepoint, so that a stream that
    fails part-way (a value changed since it was counted) undoes this write
    alone."""
    with _savepoint(conn) if isinstance(data, Parts) else contextlib.nullcontext():
        digits = (tag or "").strip('"')
        match = (int(digits) if digits.isdigit() else -1,) if condition == "match" else ()
        result = None
        if data is None:
            done = conn.execute(_DELETE[condition], (key, *match)).rowcount
        else:
            small = len(data) <= PIECE
            body = (data.join() if isinstance(data, Parts) else data) if small else None
            made = conn.execute(
                _WRITE[condition], (key, len(data), time.time(), body, *(key,) * len(match), *match)
            )
            done, object_id = made.rowcount, made.lastrowid
            if done and object_id is not None:
                result = etag(object_id)
                whole = data if isinstance(data, Parts) else Parts([data])
                for n, piece in enumerate(() if small else whole.slices(PIECE)):
                    conn.execute(
                        "INSERT INTO pieces VALUES (?, ?, ?)", (object_id, n, piece.join())
                    )
        if done or condition == "none":
            return result
        if condition == "absent":
            raise AlreadyExists("object already exists", location=location, key=key)
        found = conn.execute("SELECT id FROM objects WHERE key = ?", (key,)).fetchone()
        if found is None:
            raise NotFound("no such object", location=location, key=key)
        raise PreconditionFailed(f"etag is {etag(found[0])}, not {tag}", location=location, key=key)


@contextlib.contextmanager
def _savepoint(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("SAVEPOINT large")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK TO large")
        raise
    finally:
        conn.execute("RELEASE large")


def head(conn: sqlite3.Connection, key: str, location: str) -> ObjectInfo:
    row = conn.execute("SELECT id, size, modified FROM objects WHERE key = ?", (key,)).fetchone()
    if row is None:
        raise NotFound("no such object", location=location, key=key)
    return ObjectInfo(key, etag(row[0]), row[1], row[2])


def get(conn: sqlite3.Connection, key: str, location: str) -> StoredObject:
    def whole(object_id: int, size: int, data: bytes | None, body: _Body | None) -> StoredObject:
        return StoredObject(key, body.take(size) if body else data or b"", etag(object_id))

    return _read(conn, key, location, whole)


def get_or_none(conn: sqlite3.Connection, key: str, location: str) -> StoredObject | None:
    try:
        return get(conn, key, location)
    except NotFound:
        return None


def split(conn: sqlite3.Connection, key: str, splitter: Splitter, location: str) -> SplitObject:
    """The object in the pieces ``splitter`` finds in its first bytes
    (``stepstone.store.parts``), its large piece filled in place."""

    def cut(object_id: int, size: int, data: bytes | None, body: _Body | None) -> SplitObject:
        tag = etag(object_id)
        if body is None:
            return split_in_memory(key, data or b"", tag, splitter)
        look = body.peek(SPLIT_LOOK)
        split = splitter(look)
        if split is None or split.start > len(look) or split.start + split.length > size:
            return SplitObject(key, body.take(size), b"", b"", tag)
        before = body.take(split.start)
        if split.into is not None:
            body.feed(split.length, split.into)
            piece = b""
        else:
            piece = body.take(split.length)
        after = body.take(size - split.start - split.length)
        return SplitObject(key, before, piece, after, tag)

    return _read(conn, key, location, cut)


def _read(
    conn: sqlite3.Connection,
    key: str,
    location: str,
    use: Callable[[int, int, bytes | None, _Body | None], T],
) -> T:
    """What ``use`` makes of the object at ``key`` (its id, size, and data or
    pieces); an object in pieces is read in a read transaction."""
    query = "SELECT id, size, data FROM objects WHERE key = ?"
    row = conn.execute(query, (key,)).fetchone()
    if row is not None and row[2] is None:
        with transaction(conn, "BEGIN"):  # (the first read was its own)
            row = conn.execute(query, (key,)).fetchone()
            if row is not None and row[2] is None:
                return use(row[0], row[1], None, _Body(conn, row[0], key, location))
    if row is None:
        raise NotFound("no such object", location=location, key=key)
    return use(row[0], row[1], row[2], None)


class _Body:
    """A large object's bytes, from its pieces in order, a length at a time."""

    def __init__(self, conn: sqlite3.Connection, object_id: int, key: str, location: str) -> None:
        query = "SELECT data FROM pieces WHERE object = ? ORDER BY n"
        self._pieces: Iterator[tuple[bytes]] = conn.execute(query, (object_id,))
        self._left = memoryview(b"")
        self._key, self._location = key, location

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

    def peek(self, length: int) -> bytes:
        """Up to ``length`` of the next bytes, left to be read (a piece at most)."""
        return bytes(self._next()[:length])

    def feed(self, length: int, into: Sink) -> None:
        """The next ``length`` bytes handed to ``into``, a piece at most at a time."""
        while length:
            left = self._next()
            n = min(len(left), length)
            into(left[:n])
            self._left, length = left[n:], length - n

    def take(self, length: int) -> bytes:
        """The next ``length`` bytes, in an allocation of their own."""

        def fill(view: memoryview) -> None:
            at = 0

            def put(piece: memoryview) -> None:
                nonlocal at
                view[at : at + len(piece)] = piece
                at += len(piece)

            self.feed(len(view), put)

        return filled(length, fill)


def listing(
    conn: sqlite3.Connection, prefix: str, start_after: str | None, limit: int, location: str
) -> list[ObjectInfo]:
    """One page of the objects under ``prefix`` after ``start_after``, in key order."""
    validate_prefix(prefix, location=location)
    where, params = ["key >= ?"], [prefix]
    if (end := end_of(prefix)) is not None:
        where, params = [*where, "key < ?"], [*params, end]
    if start_after is not None:
        where, params = [*where, "key > ?"], [*params, start_after]
    rows = conn.execute(
        f"SELECT key, id, size, modified FROM objects WHERE {' AND '.join(where)}"
        " ORDER BY key LIMIT ?",
        (*params, max(0, limit)),
    )
    return [ObjectInfo(key, etag(i), size, modified) for key, i, size, modified in rows]


def changes(
    conn: sqlite3.Connection, prefix: str, after: int | None
) -> tuple[int, list[str] | None]:
    """The number of the last write, and the keys placed directly under
    ``prefix`` by the writes after the one numbered ``after`` (none for
    None; None when there were too many to tell)."""
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'objects'").fetchone()
    top = row[0] if row else 0
    if after is None or after >= top:
        return top, []
    rows = conn.execute(
        "SELECT key FROM objects WHERE id > ? AND id <= ? AND key >= ? AND key < ?"
        " ORDER BY id LIMIT ?",
        (after, top, prefix, end_of(prefix), CHANGES_AT_ONCE + 1),
    ).fetchall()
    if len(rows) > CHANGES_AT_ONCE:
        return top, None
    return top, [key for (key,) in rows if "/" not in key[len(prefix) :]]


def end_of(prefix: str) -> str | None:
    """The least string after every string that starts with ``prefix`` (None
    for the empty one): UTF-8 orders strings as their code points do, so it
    is ``prefix`` with its last character the next one."""
    for i in range(len(prefix) - 1, -1, -1):
        after = ord(prefix[i]) + 1
        if after <= 0x10FFFF:
            return prefix[:i] + chr(0xE000 if 0xD800 <= after <= 0xDFFF else after)
    return None

"""A batch of writes in one transaction: each checked and applied, then one commit.

A write's condition is checked against the object as the transaction sees
it, which no other writer can change meanwhile (the transaction holds the
database's write lock), so create-if-absent, compare-and-swap and the
conditional delete need nothing more. A write that loses its condition gets
its answer (AlreadyExists, PreconditionFailed, NotFound) and the others go
on; a failure of the database itself (a full disk, a lock held too long)
rolls the batch back, and each write in it that had not lost gets the error.

Every write of an object inserts a new row, so its ``id`` (the etag) is new
on every write, never reused. An object's bytes beyond ``PIECE`` are kept
in pieces of that size, each cut from the body as it is written, so a large
value is never held joined, nor limited by SQLite's largest value (a GB).
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from typing import Literal

from ..errors import AlreadyExists, NotFound, PreconditionFailed, StoreError
from ..parts import Parts
from .batches import Request
from .connection import store_error, transaction

Condition = Literal["none", "absent", "match"]

PIECE = 1 << 20
"""The size of the pieces a large object is kept in, and the largest object
kept in one piece, in its row."""


def etag(object_id: int) -> str:
    """The etag of the object row ``object_id``."""
    return f'"{object_id}"'


@dataclass(eq=False, slots=True)
class Write(Request):
    """One mutation of one key, and, once committed, its new etag."""

    key: str
    data: bytes | Parts | None  # None: delete the key
    condition: Condition = "none"
    etag: str | None = None
    result: str | None = None


def commit(conn: sqlite3.Connection, writes: list[Write], location: str) -> bool:
    """Apply ``writes`` in one transaction, in order; each gets its result or
    its error. Returns whether an object was placed (created or replaced)."""
    now = time.time()
    try:
        with transaction(conn):
            for write in writes:
                _apply(conn, write, now, location)
    except sqlite3.Error as exc:
        for write in writes:
            if write.error is None:
                write.result = None
                write.error = store_error(exc, location, write.key, "cannot write")
        return False
    return any(write.data is not None and write.error is None for write in writes)


def _apply(conn: sqlite3.Connection, write: Write, now: float, location: str) -> None:
    """One write, within the batch's transaction. A body of parts is written
    in a savepoint of its own, so that a stream that fails part-way (a
    value changed since it was counted) undoes that write alone."""
    large = isinstance(write.data, Parts)
    if large:
        conn.execute("SAVEPOINT large")
    try:
        found = conn.execute(
            "SELECT id, data IS NULL FROM objects WHERE key = ?", (write.key,)
        ).fetchone()
        _check(write, found, location)
        if found is not None:
            conn.execute("DELETE FROM objects WHERE id = ?", (found[0],))
            if found[1]:
                conn.execute("DELETE FROM pieces WHERE object = ?", (found[0],))
        if write.data is not None:
            write.result = _insert(conn, write.key, write.data, now)
    except (StoreError, ValueError) as exc:
        if large:
            conn.execute("ROLLBACK TO large")
        write.error = exc
    if large:
        conn.execute("RELEASE large")


def _check(write: Write, found: tuple[int, int] | None, location: str) -> None:
    """Raise if ``write``'s condition does not hold against the row ``found``."""
    if write.condition == "absent" and found is not None:
        raise AlreadyExists("object already exists", location=location, key=write.key)
    if write.condition == "match":
        if found is None:
            raise NotFound("no such object", location=location, key=write.key)
        if etag(found[0]) != write.etag:
            raise PreconditionFailed(
                f"etag is {etag(found[0])}, not {write.etag}", location=location, key=write.key
            )


def _insert(conn: sqlite3.Connection, key: str, data: bytes | Parts, now: float) -> str:
    """A new row for ``key`` holding ``data`` (in pieces past ``PIECE``); its etag."""
    size = len(data)
    if size <= PIECE:
        body = data.join() if isinstance(data, Parts) else data
        cursor = conn.execute(
            "INSERT INTO objects (key, size, modified, data) VALUES (?, ?, ?, ?)",
            (key, size, now, body),
        )
        assert cursor.lastrowid is not None
        return etag(cursor.lastrowid)
    cursor = conn.execute(
        "INSERT INTO objects (key, size, modified, data) VALUES (?, ?, ?, NULL)", (key, size, now)
    )
    object_id = cursor.lastrowid
    assert object_id is not None
    whole = data if isinstance(data, Parts) else Parts([data])
    for n, piece in enumerate(whole.slices(PIECE)):
        conn.execute(
            "INSERT INTO pieces (object, n, data) VALUES (?, ?, ?)", (object_id, n, piece.join())
        )
    return etag(object_id)

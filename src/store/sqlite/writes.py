"""A batch of writes in one transaction: each checked and applied, then one commit.

Each write is one statement that carries its condition (``ON CONFLICT DO
NOTHING`` for a create, ``WHERE EXISTS`` the etag for a swap, ``AND id =``
for a conditional delete), applied inside a transaction that holds the
database's write lock, so no other writer, in any process, comes between
the check and the act. One statement a write, and none more for a batch of
one (which SQLite makes its own transaction), because the statements are
where the serving thread takes the interpreter lock back from a busy event
loop. A write that loses its condition gets its answer (AlreadyExists,
PreconditionFailed, NotFound) and the others go on; a failure of the
database itself (a full disk, a lock held too long) rolls the batch back,
and each write in it that had not lost gets the error.

Every write of an object inserts a new row (a swap or a put REPLACEs the
old one), so its ``id``, the etag, is new on every write, never reused. An
object's bytes beyond ``PIECE`` are kept in pieces of that size, each cut
from the body as it is written, so a large value is never held joined, nor
limited by SQLite's largest value (a GB).
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

_COLUMNS = "INTO objects (key, size, modified, data)"
_WRITE = {
    "none": f"INSERT OR REPLACE {_COLUMNS} VALUES (?, ?, ?, ?)",
    "absent": f"INSERT {_COLUMNS} VALUES (?, ?, ?, ?) ON CONFLICT (key) DO NOTHING",
    "match": f"INSERT OR REPLACE {_COLUMNS} SELECT ?, ?, ?, ?"
    " WHERE EXISTS (SELECT 1 FROM objects WHERE key = ? AND id = ?)",
}
_DELETE = {
    "none": "DELETE FROM objects WHERE key = ?",
    "match": "DELETE FROM objects WHERE key = ? AND id = ?",
}


def etag(object_id: int) -> str:
    """The etag of the object row ``object_id``."""
    return f'"{object_id}"'


def _row_id(tag: str | None) -> int:
    """The row an etag names (-1, which no row has, for one of no row)."""
    digits = (tag or "").strip('"')
    return int(digits) if digits.isdigit() else -1


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
        if len(writes) == 1 and not isinstance(writes[0].data, Parts):
            _apply(conn, writes[0], now, location)  # (its own transaction)
        else:
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
    """One write. A body of parts is written in a savepoint of its own, so
    that a stream that fails part-way (a value changed since it was
    counted) undoes that write alone."""
    if not isinstance(write.data, Parts):
        try:
            _one(conn, write, now, location)
        except StoreError as exc:
            write.error = exc
        return
    conn.execute("SAVEPOINT large")
    try:
        _one(conn, write, now, location)
    except (StoreError, ValueError) as exc:
        conn.execute("ROLLBACK TO large")
        write.error = exc
    conn.execute("RELEASE large")


def _one(conn: sqlite3.Connection, write: Write, now: float, location: str) -> None:
    match = (_row_id(write.etag),) if write.condition == "match" else ()
    if write.data is None:
        done = conn.execute(_DELETE[write.condition], (write.key, *match)).rowcount
    else:
        size = len(write.data)
        small = size <= PIECE
        body = (
            (write.data.join() if isinstance(write.data, Parts) else write.data) if small else None
        )
        cursor = conn.execute(
            _WRITE[write.condition],
            (write.key, size, now, body, *(write.key,) * len(match), *match),
        )
        done = cursor.rowcount
        if done:
            assert cursor.lastrowid is not None
            write.result = etag(cursor.lastrowid)
            if not small:
                _pieces(conn, cursor.lastrowid, write.data)
    if not done:
        _refused(conn, write, location)


def _refused(conn: sqlite3.Connection, write: Write, location: str) -> None:
    """Raise why ``write`` was not made (a delete without a condition always is)."""
    if write.condition == "absent":
        raise AlreadyExists("object already exists", location=location, key=write.key)
    if write.condition == "match":
        found = conn.execute("SELECT id FROM objects WHERE key = ?", (write.key,)).fetchone()
        if found is None:
            raise NotFound("no such object", location=location, key=write.key)
        raise PreconditionFailed(
            f"etag is {etag(found[0])}, not {write.etag}", location=location, key=write.key
        )


def _pieces(conn: sqlite3.Connection, object_id: int, data: bytes | Parts) -> None:
    """``data`` into the pieces of the object row ``object_id``, a piece at a time."""
    whole = data if isinstance(data, Parts) else Parts([data])
    for n, piece in enumerate(whole.slices(PIECE)):
        conn.execute(
            "INSERT INTO pieces (object, n, data) VALUES (?, ?, ?)", (object_id, n, piece.join())
        )

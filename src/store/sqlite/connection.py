"""Opening the database: one file in WAL mode, its schema, and what its errors mean.

- **WAL mode** (a write-ahead log beside the file): readers never wait for
  the writer nor it for them, and a commit appends to one file. The mode is
  kept in the file, so every process that opens it uses it.
- **Durable when a write returns**, by default: ``synchronous=FULL`` syncs
  the log at every commit, so what a write returned survives a power cut,
  as on every durable stepstone store. ``NORMAL`` syncs it only at
  checkpoints: a write that returned survives its process being killed,
  but a power cut or an OS crash can undo the last commits before it
  (never leaving the file corrupt). The batches (``batches``) share one
  sync per commit either way.
- **One writer at a time, across processes**: a write transaction begins
  with ``BEGIN IMMEDIATE``, taking the write lock at once (a read that
  later wanted to write could fail instead of wait), and a process waits
  for the lock at most ``LOCK_WAIT`` seconds (SQLite's busy timeout) before
  its requests fail with StoreUnavailable, which its callers retry.
- **Whose file**: ``application_id`` marks a stepstone database and
  ``user_version`` its schema; a database of another application, or of a
  later schema, is refused rather than written into.
"""

from __future__ import annotations

import contextlib
import sqlite3
import urllib.parse
from collections.abc import Iterator
from typing import Literal

from ..errors import StoreConfigError, StoreError, StoreUnavailable

Synchronous = Literal["full", "normal"]

APPLICATION_ID = 0x53545053
"""``PRAGMA application_id`` of a stepstone database ("STPS")."""

SCHEMA = 1
"""``PRAGMA user_version``: the schema this release writes and reads."""

LOCK_WAIT = 30.0
"""Seconds a process waits for the database's write lock (another process's
transaction, which holds it for one batch) before its requests fail."""

TABLES = (
    # ``id`` numbers every write (AUTOINCREMENT never hands a number out
    # twice): it is the object's etag, and the order changes are noticed in.
    # ``key`` in BINARY collation sorts by UTF-8 bytes, as S3 lists.
    # ``data`` is NULL when the bytes are in ``pieces`` (a large object).
    """CREATE TABLE objects (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        key TEXT NOT NULL UNIQUE,
        size INTEGER NOT NULL,
        modified REAL NOT NULL,
        data BLOB
    )""",
    """CREATE TABLE pieces (
        object INTEGER NOT NULL,
        n INTEGER NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (object, n)
    )""",
    # An object's pieces go with its row, however the row goes (a delete, or
    # the REPLACE of a later write: with ``recursive_triggers`` on, its
    # deletion fires the trigger too).
    """CREATE TRIGGER pieces_go AFTER DELETE ON objects WHEN old.data IS NULL
    BEGIN DELETE FROM pieces WHERE object = old.id; END""",
)

_CONFIG_CODES = {
    sqlite3.SQLITE_READONLY,
    sqlite3.SQLITE_CANTOPEN,
    sqlite3.SQLITE_PERM,
    sqlite3.SQLITE_AUTH,
    sqlite3.SQLITE_NOTADB,
    sqlite3.SQLITE_CORRUPT,
}
"""What retrying will not mend: the file cannot be written or is no database."""


def connect(
    path: str, location: str, *, synchronous: Synchronous, create: bool
) -> sqlite3.Connection:
    """A connection to the database at ``path`` (made if missing with
    ``create``), in WAL mode. Any thread may use it, one at a time."""
    mode = "rwc" if create else "rw"
    try:
        conn = sqlite3.connect(
            f"file:{urllib.parse.quote(path)}?mode={mode}",
            uri=True,
            timeout=LOCK_WAIT,
            isolation_level=None,  # transactions are begun and ended here, explicitly
            check_same_thread=False,
        )
    except sqlite3.Error as exc:
        raise store_error(exc, location, None, "cannot open the database") from exc
    try:
        conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
        conn.execute("PRAGMA recursive_triggers=ON")
        journal = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    except sqlite3.Error as exc:
        conn.close()
        raise store_error(exc, location, None, "cannot open the database") from exc
    if journal != "wal":
        conn.close()
        raise StoreConfigError(
            f"the database cannot keep a write-ahead log here (journal mode {journal!r}):"
            " put it on a local filesystem",
            location=location,
        )
    return conn


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection, begin: str = "BEGIN IMMEDIATE") -> Iterator[None]:
    """A transaction around the block: committed if it ends, rolled back if it raises."""
    conn.execute(begin)
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise


def prepare(conn: sqlite3.Connection, location: str) -> None:
    """Check that the database is a stepstone one of a schema this release
    reads, or make an empty one so; StoreConfigError if it is neither."""
    try:
        with transaction(conn):
            _check_or_make(conn, location)
    except sqlite3.Error as exc:
        raise store_error(exc, location, None, "cannot open the database") from exc


def _check_or_make(conn: sqlite3.Connection, location: str) -> None:
    application = conn.execute("PRAGMA application_id").fetchone()[0]
    if application == 0:
        if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
            raise StoreConfigError(
                "this SQLite database belongs to another application (it has tables and"
                " no stepstone mark): refused, so as not to write into it",
                location=location,
            )
        for table in TABLES:
            conn.execute(table)
        conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version={SCHEMA}")
        return
    if application != APPLICATION_ID:
        raise StoreConfigError(
            f"this SQLite database belongs to another application (application_id"
            f" {application:#x}): refused, so as not to write into it",
            location=location,
        )
    schema = conn.execute("PRAGMA user_version").fetchone()[0]
    if schema > SCHEMA:
        raise StoreConfigError(
            f"this database was made by a later release of stepstone (schema {schema});"
            f" this release reads schema {SCHEMA}: upgrade stepstone",
            location=location,
        )


def store_error(exc: sqlite3.Error, location: str, key: str | None, doing: str) -> StoreError:
    """The StoreError to raise for ``exc``, met while ``doing`` something (to ``key``)."""
    code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
    if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return StoreUnavailable(
            f"{doing}: another process held the database's write lock for {LOCK_WAIT:g} s",
            location=location,
            key=key,
        )
    if code in _CONFIG_CODES:
        return StoreConfigError(f"{doing}: {exc}", location=location, key=key)
    return StoreUnavailable(f"{doing}: {exc}", location=location, key=key)

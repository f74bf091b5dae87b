"""The database file: its connections, its schema, and what its errors mean.

WAL mode: readers never wait for the writer, nor it for them. A write
transaction begins with ``BEGIN IMMEDIATE``, taking the write lock at once,
and a process waits for the lock at most ``LOCK_WAIT`` seconds (SQLite's
busy timeout) before its requests fail with StoreUnavailable, which callers
retry. ``synchronous``: FULL syncs the log at every commit, so what a write
returned survives a power cut; NORMAL syncs it at checkpoints, so a power
cut or an OS crash can undo the last commits before it, a killed process
none (the file is never left corrupt). ``application_id`` marks a stepstone
database, ``user_version`` its schema: another application's file is
refused, not written into.
"""

from __future__ import annotations

import contextlib
import sqlite3
import urllib.parse
from collections.abc import Iterator
from typing import Literal

from ..errors import StoreConfigError, StoreError, StoreUnavailable

Synchronous = Literal["full", "normal"]

APPLICATION_ID = 0x53545053  # "STPS"
SCHEMA = 1

LOCK_WAIT = 30.0
"""Seconds a process waits for the write lock another process holds (for
one batch, usually milliseconds) before its requests fail."""

TABLES = (
    # ``id`` numbers every write, never twice (AUTOINCREMENT): the object's
    # etag, and the order changes are noticed in. ``key`` sorts by UTF-8
    # bytes (BINARY), as S3 lists. ``data`` is NULL when the bytes are in
    # ``pieces``, which go with their row however it goes (a REPLACE too,
    # with ``recursive_triggers`` on).
    """CREATE TABLE objects (id INTEGER PRIMARY KEY AUTOINCREMENT,
        key TEXT NOT NULL UNIQUE, size INTEGER NOT NULL, modified REAL NOT NULL, data BLOB)""",
    """CREATE TABLE pieces (object INTEGER NOT NULL, n INTEGER NOT NULL,
        data BLOB NOT NULL, PRIMARY KEY (object, n))""",
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
    conn = None
    try:
        conn = sqlite3.connect(
            f"file:{urllib.parse.quote(path)}?mode={'rwc' if create else 'rw'}",
            uri=True,
            timeout=LOCK_WAIT,
            isolation_level=None,  # transactions are begun and ended explicitly
            check_same_thread=False,
        )
        conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
        conn.execute("PRAGMA recursive_triggers=ON")
        journal = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    except sqlite3.Error as exc:
        if conn is not None:
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
    reads, or make an empty one so; StoreConfigError if it is neither. An
    existing store is only read here: opening one waits for no writer."""
    try:
        if _marked(conn, location):
            return
        with transaction(conn):
            if not _marked(conn, location):
                for table in TABLES:
                    conn.execute(table)
                conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version={SCHEMA}")
    except sqlite3.Error as exc:
        raise store_error(exc, location, None, "cannot open the database") from exc


def _marked(conn: sqlite3.Connection, location: str) -> bool:
    """Whether the database is a stepstone one this release reads (False: an
    empty one); StoreConfigError for another application's or a later one."""
    refused = "this SQLite database belongs to another application"
    application = conn.execute("PRAGMA application_id").fetchone()[0]
    if application == 0:
        if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
            raise StoreConfigError(
                f"{refused} (it has tables and no stepstone mark): refused, so as not to"
                " write into it",
                location=location,
            )
        return False
    if application != APPLICATION_ID:
        raise StoreConfigError(
            f"{refused} (application_id {application:#x}): refused, so as not to write into it",
            location=location,
        )
    if (schema := conn.execute("PRAGMA user_version").fetchone()[0]) > SCHEMA:
        raise StoreConfigError(
            f"this database was made by a later release of stepstone (schema {schema});"
            f" this release reads schema {SCHEMA}: upgrade stepstone",
            location=location,
        )
    return True


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

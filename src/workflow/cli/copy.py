"""``stepstone copy SRC DST``: every object of one store put into another.

Any two stores: a bucket's prefix into a SQLite file or a directory, to
look at offline with ``ls``, ``show`` and ``ui`` (``--mark`` puts the copy's
mark there, so no worker starts on it), and back, or from one local store
to another. A destination that is a local path naming nothing is made: a
SQLite file when its name ends in ``.db``, ``.sqlite`` or ``.sqlite3`` (or it
is a ``sqlite://`` URL), else a directory. Objects are read and written
``COPYING`` at a time, each held whole meanwhile; an object the
destination holds already is replaced, and one only the destination holds
is left alone.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

from stepstone.cli.errors import CliError
from stepstone.cli.render import emit_json
from stepstone.records.layout import Layout
from stepstone.store import FileStore, NotFound, ObjectStore, SqliteStore, open_store
from stepstone.telemetry.escaping import escape_controls

COPYING = 16
"""Objects read and written at once."""

SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
"""A new destination path with one of these names a SQLite file; any other, a directory."""


def cmd_copy(args: argparse.Namespace) -> int:
    if args.source == args.destination:
        raise CliError("the source and the destination are the same store", 2)

    async def run() -> tuple[int, int]:
        source = open_store(args.source)
        try:
            target = _destination(args.destination)
            try:
                if target.location == source.location:
                    raise CliError("the source and the destination are the same store", 2)
                copied = await copy_objects(source, target)
                if args.mark:
                    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%MZ")
                    mark = Layout(getattr(args, "prefix", "") or "").copy_mark()
                    await target.put(mark, f"{source.location} copied {when}\n".encode())
                return copied
            finally:
                await target.close()
        finally:
            await source.close()

    count, size = asyncio.run(run())
    if args.json:
        emit_json(
            {
                "source": args.source,
                "destination": args.destination,
                "objects": count,
                "bytes": size,
            }
        )
    else:
        sys.stdout.write(
            f"copied {count} objects ({size / 1024 / 1024:.1f} MiB) from "
            f"{escape_controls(args.source)} to {escape_controls(args.destination)}\n"
        )
    return 0


async def copy_objects(source: ObjectStore, target: ObjectStore) -> tuple[int, int]:
    """Put every object of ``source`` into ``target``, ``COPYING`` at a time;
    returns how many and their bytes. An object deleted while the copy runs
    is not copied."""
    room = asyncio.Semaphore(COPYING)
    copied = [0, 0]

    async def one(key: str) -> None:
        try:
            try:
                stored = await source.get(key)
            except NotFound:
                return
            await target.put(key, stored.data)
            copied[0] += 1
            copied[1] += len(stored.data)
        finally:
            room.release()

    async with asyncio.TaskGroup() as group:
        async for info in source.scan():
            await room.acquire()
            group.create_task(one(info.key))
    return copied[0], copied[1]


def _destination(spec: str) -> ObjectStore:
    """The store ``spec`` names, made first if it is a local path naming nothing."""
    parts = urlsplit(spec)
    scheme = parts.scheme.lower()
    if scheme in ("", "file", "sqlite") and parts.netloc in ("", "localhost"):
        path = Path(unquote(parts.path) if scheme else spec).expanduser()
        if not os.path.lexists(path):
            if scheme == "sqlite" or (scheme == "" and path.suffix in SQLITE_SUFFIXES):
                return SqliteStore(path)
            return FileStore(path)
    return open_store(spec)

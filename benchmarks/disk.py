"""How fast and how dear a durable write is here: ``python -m benchmarks.disk [DIR]``.

Prints, for small files in DIR (default: the temp directory):

- the raw patterns: each file fsynced then its directory fsynced (what a
  store that flushes per write pays), against temp files renamed into place
  in batches of 1, 4, 16 and 64 with one ``syncfs`` before and one after
  (the FileStore's group commit);
- the FileStore itself: ``put_if_absent`` one at a time, and 64 at a time,
  in each sync mode;
- one SQLite transaction of one insert in WAL mode, ``synchronous=FULL`` (a
  sync of the log each) and ``NORMAL``, and the SqliteStore in each mode,
  ``put_if_absent`` one at a time and 64 at a time;
- the cost of creating a file in DIR: on ext4 without a journal it grows
  with the files deleted nearby in the last minutes (see docs/performance.md).

Each row gives writes per second and the CPU (user and system) each write
cost this process: on a VM the system time of a flush is far from zero, and
it is what a durable FileStore spends.
"""

from __future__ import annotations

import asyncio
import functools
import os
import resource
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from stepstone.store import FileStore, ObjectStore, SqliteStore
from stepstone.store.file.flush import HAVE_SYNCFS, syncfs

Usage = tuple[float, float, float]


def usage() -> Usage:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime, time.perf_counter()


def row(what: str, n: int, a: Usage, b: Usage) -> dict[str, Any]:
    return {
        "what": what,
        "writes_per_s": round(n / (b[2] - a[2])),
        "user_us": round((b[0] - a[0]) / n * 1e6),
        "sys_us": round((b[1] - a[1]) / n * 1e6),
    }


@contextmanager
def scratch(directory: str) -> Iterator[str]:
    root = tempfile.mkdtemp(prefix="stepstone-disk-", dir=directory)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def fsync_each(root: str, n: int) -> dict[str, Any]:
    dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    a = usage()
    for i in range(n):
        tmp = os.path.join(root, f"{i}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, b"x" * 100)
        os.fsync(fd)
        os.close(fd)
        os.rename(tmp, os.path.join(root, str(i)))
        os.fsync(dfd)
    b = usage()
    os.close(dfd)
    return row("fsync file + directory, one write at a time", n, a, b)


def syncfs_batches(root: str, n: int, batch: int) -> dict[str, Any]:
    dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    a = usage()
    for start in range(0, n, batch):
        temps = []
        for i in range(start, start + batch):
            tmp = os.path.join(root, f"{batch}-{i}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, b"x" * 100)
            os.close(fd)
            temps.append(tmp)
        syncfs(dfd)
        for tmp in temps:
            os.rename(tmp, tmp[:-4])
        syncfs(dfd)
    b = usage()
    os.close(dfd)
    return row(f"syncfs before and after, batches of {batch}", n, a, b)


def creates(what: str, make: Callable[[], ObjectStore], n: int, concurrent: int) -> dict[str, Any]:
    """``n`` small ``put_if_absent`` calls, ``concurrent`` at a time, on ``make()``."""

    async def main() -> tuple[Usage, Usage]:
        async with make() as store:
            await store.put_if_absent("warm", b"x")
            gate = asyncio.Semaphore(concurrent)

            async def one(i: int) -> None:
                async with gate:
                    await store.put_if_absent(f"d{i % 50}/k{i}", b"y" * 100)

            a = usage()
            await asyncio.gather(*(one(i) for i in range(n)))
            return a, usage()

    a, b = asyncio.run(main())
    return row(f"{what}.put_if_absent, {concurrent} at a time", n, a, b)


def filestore(root: str, n: int, concurrent: int, sync: str) -> dict[str, Any]:
    make = functools.partial(FileStore, root, sync=sync)
    return creates(f"FileStore(sync={sync!r})", make, n, concurrent)  # type: ignore[arg-type]


def sqlite_each(root: str, n: int, synchronous: str) -> dict[str, Any]:
    conn = sqlite3.connect(os.path.join(root, "raw.db"), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("CREATE TABLE t (key TEXT PRIMARY KEY, data BLOB)")
    a = usage()
    for i in range(n):
        conn.execute("INSERT INTO t VALUES (?, ?)", (str(i), b"x" * 100))
    b = usage()
    conn.close()
    return row(f"SQLite, one insert a transaction, WAL, synchronous={synchronous}", n, a, b)


def sqlitestore(root: str, n: int, concurrent: int, synchronous: str) -> dict[str, Any]:
    path = os.path.join(root, "jobs.db")
    make = functools.partial(SqliteStore, path, synchronous=synchronous)
    return creates(f"SqliteStore(synchronous={synchronous!r})", make, n, concurrent)  # type: ignore[arg-type]


def create_cost(root: str, n: int = 2000) -> dict[str, Any]:
    a = usage()
    for i in range(n):
        os.close(os.open(os.path.join(root, f"c{i}"), os.O_WRONLY | os.O_CREAT, 0o644))
    return row("create an empty file (no flush)", n, a, usage())


def main() -> None:
    directory = sys.argv[1] if len(sys.argv) > 1 else tempfile.gettempdir()
    print(f"# {directory}, load average {os.getloadavg()[0]:.2f}")
    probes: list[Callable[[str], dict[str, Any]]] = [
        create_cost,
        functools.partial(fsync_each, n=600),
    ]
    if HAVE_SYNCFS:
        probes += [functools.partial(syncfs_batches, n=640, batch=b) for b in (1, 4, 16, 64)]
    modes = ["syncfs", "fsync"] if HAVE_SYNCFS else ["fsync"]
    probes += [
        functools.partial(filestore, n=300 if c == 1 else 2000, concurrent=c, sync=m)
        for m in modes
        for c in (1, 64)
    ]
    probes += [
        functools.partial(sqlite_each, n=600, synchronous="FULL"),
        functools.partial(sqlite_each, n=2000, synchronous="NORMAL"),
    ]
    probes += [
        functools.partial(sqlitestore, n=300 if c == 1 else 2000, concurrent=c, synchronous=m)
        for m in ("full", "normal")
        for c in (1, 64)
    ]
    for probe in probes:
        with scratch(directory) as root:
            print(probe(root), flush=True)


if __name__ == "__main__":
    main()

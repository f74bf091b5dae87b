"""Writing an object plainly: its bytes to a temp file, flushed, then moved into place.

A write is durable when it returns: its bytes go to a temp file in
``<root>/.stepstone-tmp/`` (the same filesystem, so moving it into place is
atomic), which is flushed (``fsync``); then, under the key's lock
(``locks``), its condition is checked against the object there and the
file is renamed over the key's path; then the directory is flushed, so the
new name is on the disk before the caller hears back. A create needs no
lock: it ``link``s the file into place, which fails if anything is there,
in any process, atomically. A crash leaves the old object or the new one,
never a torn one, and at worst a temp file, swept by a store opened on the
root an hour later.

Etags come from ``stat`` (``stats``). For an etag to change on every write,
even where a filesystem reuses inodes and keeps coarse times, the writer
sets the temp file's mtime itself, strictly after the replaced file's,
while it holds the key's lock.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import time
from typing import Literal

from ..errors import AlreadyExists, NotFound, PreconditionFailed, StoreError
from ..parts import Parts
from .locks import KeyLocks
from .os_errors import CONFLICT_ERRNOS, key_conflict, store_error
from .paths import KeyPaths, fsync_directory
from .stats import etag, regular, stat_any

STALE_TEMP_SECONDS = 3600
"""A temp file older than this was left by a writer that crashed."""

Condition = Literal["none", "absent", "match"]


def sweep(directory: str) -> None:
    """Remove the temp files in ``directory`` that a crashed writer left
    behind: those untouched for an hour (a live writer's lives for
    milliseconds)."""
    cutoff = time.time() - STALE_TEMP_SECONDS
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:  # (best effort: temp files are never listed)
            if entry.name.endswith(".tmp") and entry.stat().st_mtime < cutoff:
                os.unlink(entry.path)


class Writer:
    """Writes the objects of one store: its keys' paths, locks and temp directory."""

    def __init__(self, paths: KeyPaths, locks: KeyLocks, temp: str) -> None:
        self._paths = paths
        self._locks = locks
        self._temp = temp
        self._location = paths.location

    def write(
        self, key: str, data: bytes | Parts | None, condition: Condition, tag: str | None
    ) -> str | None:
        """Put ``data`` at ``key`` (None: delete it) if ``condition`` holds
        (``"match"``: the object's etag is ``tag``); the new etag."""
        path = self._paths.of(key)
        try:
            if data is None:
                self._delete(path, key, condition, tag)
                return None
            return self._put(path, key, data, condition, tag)
        except StoreError:
            raise
        except OSError as exc:
            if exc.errno in CONFLICT_ERRNOS:
                raise key_conflict(self._location, key) from exc
            raise store_error(exc, self._location, key, "cannot write") from exc

    def _put(
        self, path: str, key: str, data: bytes | Parts, condition: Condition, tag: str | None
    ) -> str:
        found = stat_any(path)
        current = regular(found)
        self._check(key, condition, tag, current)  # (a write bound to fail makes no file)
        if found is not None and stat.S_ISDIR(found.st_mode):
            raise key_conflict(self._location, key)
        directory = os.path.dirname(path)
        self._paths.makedirs(directory, key)
        tmp, st = self._stage(data, current.st_mtime_ns if current else 0)
        try:
            if condition == "absent":
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    if stat.S_ISDIR(os.lstat(path).st_mode):
                        raise key_conflict(self._location, key) from None
                    raise AlreadyExists(
                        "object already exists", location=self._location, key=key
                    ) from None
            else:
                st = self._place(tmp, path, key, condition, tag, st)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)  # (after a link: the object keeps its one name)
        fsync_directory(directory)
        return etag(st)

    def _place(
        self,
        tmp: str,
        path: str,
        key: str,
        condition: Condition,
        tag: str | None,
        st: os.stat_result,
    ) -> os.stat_result:
        """Under the key's lock: check the condition again and rename the
        temp file over the key's path; its stat, as placed."""
        fd = self._locks.lock(key)
        try:
            found = stat_any(path)
            current = regular(found)
            self._check(key, condition, tag, current)
            if found is not None and stat.S_ISDIR(found.st_mode):
                raise key_conflict(self._location, key)
            if current is not None and current.st_mtime_ns >= st.st_mtime_ns:
                # replaced since staging by a write with a later mtime: ours
                # must be later still, or its etag could repeat an old one
                later = current.st_mtime_ns + 1
                os.utime(tmp, ns=(later, later))
                st = os.stat(tmp)
            self._paths.check_inside(os.path.dirname(path), key)
            os.rename(tmp, path)
            return st
        finally:
            os.close(fd)

    def _delete(self, path: str, key: str, condition: Condition, tag: str | None) -> None:
        fd = self._locks.lock(key)
        try:
            current = regular(stat_any(path))
            self._check(key, condition, tag, current)
            if current is None:
                return
            self._paths.check_inside(os.path.dirname(path), key)
            os.unlink(path)
        finally:
            os.close(fd)
        fsync_directory(os.path.dirname(path))

    def _check(
        self, key: str, condition: Condition, tag: str | None, current: os.stat_result | None
    ) -> None:
        """Raise if ``condition`` does not hold against ``current``."""
        if condition == "absent" and current is not None:
            raise AlreadyExists("object already exists", location=self._location, key=key)
        if condition == "match":
            if current is None:
                raise NotFound("no such object", location=self._location, key=key)
            actual = etag(current)
            if actual != tag:
                raise PreconditionFailed(
                    f"etag is {actual}, not {tag}", location=self._location, key=key
                )

    def _stage(self, data: bytes | Parts, not_before_ns: int) -> tuple[str, os.stat_result]:
        """``data`` in a new temp file, flushed, with an mtime later than
        ``not_before_ns``; its path and stat."""
        tmp = os.path.join(self._temp, f"{secrets.token_hex(8)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            for buffer in data.chunks() if isinstance(data, Parts) else (data,):
                view = memoryview(buffer)
                while view:
                    view = view[os.write(fd, view) :]
            now = max(time.time_ns(), not_before_ns + 1)
            os.utime(fd, ns=(now, now))
            os.fsync(fd)
            st = os.fstat(fd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
        return tmp, st

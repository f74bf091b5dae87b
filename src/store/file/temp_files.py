"""Temp files: where a write's bytes go before they become the object.

A write's bytes go to a temp file in ``<root>/.stepstone-tmp/`` (the same
filesystem, so moving it into place is an atomic ``rename`` or ``link``),
written from a spare inode when the store has one (see ``spares``). Its
mtime is set here, strictly later than any the inode or the object it
replaces had, so that no etag can come back (see ``stats``). A crashed
writer's leftovers are swept by the next store opened on the root.
"""

from __future__ import annotations

import contextlib
import os
import time

from ..parts import Parts
from .spares import SPARE_SUFFIX, SparePool

STALE_TEMP_SECONDS = 3600


def sweep(directory: str) -> None:
    """Remove the temp files and spares in ``directory`` that a crashed or
    exited writer left behind.

    Only those untouched for an hour: a live writer's temp file lives for
    milliseconds, and its spares are rewritten or unlinked when it
    closes. A spare's mtime is that of the object it was, so its age is
    its ctime, which retiring it set (and which nobody can set back).
    """
    cutoff = time.time() - STALE_TEMP_SECONDS
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.endswith(".tmp"):
                    age = entry.stat(follow_symlinks=False).st_mtime
                elif entry.name.endswith(SPARE_SUFFIX):
                    age = entry.stat(follow_symlinks=False).st_ctime
                else:
                    continue
                if age < cutoff:
                    os.unlink(entry.path)
    except OSError:
        pass  # best effort: leftovers in the temp directory are never listed


class TempFiles:
    """The temp files of one store object, in ``directory``, and its spare inodes."""

    def __init__(self, directory: str, *, fsync: bool) -> None:
        """With ``fsync`` (fsync mode), each temp file is fsynced once written;
        in syncfs mode the batch's first sync makes them durable."""
        self._directory = directory
        self._fsync = fsync
        self._spares = SparePool(directory)

    def sweep(self) -> None:
        """Remove temp files and spares a crashed or exited writer left behind
        (``sweep``)."""
        sweep(self._directory)

    def _open(self) -> tuple[str, int, os.stat_result | None]:
        """A temp file to write: a spare inode, else a new file.

        Returns its path, an open fd, and a spare's stat (None for a new
        file): its new mtime must be later than the spare's, so that no etag
        it had in an earlier life can come back, and bytes past the new
        length must go.
        """
        while (spare := self._spares.take()) is not None:
            try:
                fd = os.open(spare, os.O_WRONLY)
            except FileNotFoundError:
                continue  # swept by a store opened elsewhere after an idle hour
            try:
                return spare, fd, os.fstat(fd)
            except BaseException:
                os.close(fd)
                raise
        tmp = self._spares.temp_name()
        return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), None

    def write(
        self, data: bytes | Parts, not_before_ns: int, *, journaled: bool = False
    ) -> tuple[str, os.stat_result]:
        """Write ``data`` to a temp file with a unique mtime later than
        ``not_before_ns``; returns its path and stat.

        A spare is overwritten in place and then cut to length, not emptied
        first: emptying frees its block and the write allocates another,
        which costs several times the rewrite on ext4 (benchmarks/NOTES.md).

        A ``journaled`` create's file is new, never a spare, and is not
        flushed here (the journal holds its bytes). A spare may be the inode
        of an object whose deletion is not on the disk yet (the commit that
        retired it may still be flushing it, on another thread); a file
        the journal names must not be that inode, or a recovery after a
        power cut could find it under both names.
        """
        if journaled:
            tmp = self._spares.temp_name()
            fd, spare = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), None
        else:
            tmp, fd, spare = self._open()
        if spare is not None:
            not_before_ns = max(not_before_ns, spare.st_mtime_ns)
        try:
            offset = 0
            for buffer in data.chunks() if isinstance(data, Parts) else (data,):
                view = memoryview(buffer)
                end = offset + len(view)
                while offset < end:
                    offset += os.pwrite(fd, view[len(view) - (end - offset) :], offset)
            if spare is not None and spare.st_size > len(data):
                os.ftruncate(fd, len(data))
            now = max(time.time_ns(), not_before_ns + 1)
            os.utime(fd, ns=(now, now))
            if self._fsync and not journaled:
                os.fsync(fd)
            st = os.fstat(fd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
        return tmp, st

    def discard(self, tmp: str) -> None:
        """A temp file that was never placed (its write failed): back to the
        spares if it is one of ours, else unlinked. A placed temp file is the
        object now, and its temp name is gone already."""
        if self._spares.add(tmp):
            return
        with contextlib.suppress(OSError):
            os.unlink(tmp)

    def retire(self, path: str, *, move: bool) -> None:
        """Keep the inode at ``path`` as a spare: ``move`` it there (a delete),
        or give it a second name (it is about to be replaced). With the
        spares full, a delete unlinks and a replaced inode is freed."""
        spare = self._spares.reserve()
        if spare is None:
            if move:
                os.unlink(path)
            return
        (os.rename if move else os.link)(path, spare)
        self._spares.add(spare)

    def clear_spares(self) -> None:
        """Unlink every spare inode (the store is closing)."""
        self._spares.clear()

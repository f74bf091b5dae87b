"""The commit pipeline: a batch of writes, staged, checked, placed and made durable.

A write is durable when it returns: its bytes are flushed before its name
points at them, and its name is flushed before the caller hears back, so a
crash leaves the old object or the new one, never a torn one. A batch
(gathered by ``batches``) shares those two flushes. Its conditions hold
across processes because each is checked and applied under the key's lock
(``locks``), held for microseconds, never across a flush; a create needs
none, its ``link`` being the check and the act in one (``link_new``).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from typing import Protocol

from ..errors import AlreadyExists, NotFound, PreconditionFailed, StoreError
from .batches import Write
from .flush import fsync_directory, syncfs
from .locks import KeyLocks
from .os_errors import CONFLICT_ERRNOS, key_conflict, store_error
from .paths import KeyPaths
from .stats import etag, regular, stat_any
from .temp_files import TempFiles


class FlushWatcher(Protocol):
    """Who hears of the committer's flushes of the whole filesystem: the
    journal, which retires the creates linked before one (``journal``)."""

    def mark(self) -> int:
        """Taken as a flush begins."""

    def retire(self, mark: int) -> None:
        """The flush that began at ``mark`` is done."""


def link_new(write: Write, location: str) -> None:
    """Link a staged create's temp file into place if its key is free.

    ``link`` fails atomically if anything is there, so two creates of one
    key, in any processes, have one winner, and no key lock is needed: the
    other writers check a key and act under its lock, and a create that
    lands between a check and its act is one they would have met either
    way (a put replaces it, a conditional write had already failed).
    """
    assert write.tmp is not None and write.stat is not None
    try:
        os.link(write.tmp, write.path)
    except FileExistsError:
        found = stat_any(write.path)
        if found is not None and stat.S_ISDIR(found.st_mode):
            raise key_conflict(location, write.key) from None
        raise AlreadyExists("object already exists", location=location, key=write.key) from None
    # The inode is the object now: its temp name must never be taken for a
    # spare, even if the batch then fails its sync.
    with contextlib.suppress(FileNotFoundError):
        os.unlink(write.tmp)
    write.tmp = None
    write.result = etag(write.stat)


def locate(writes: list[Write], paths: KeyPaths) -> list[Write]:
    """Set each write's path; those whose key names none (InvalidKey) get
    that error and are left out of the list returned."""
    for write in writes:
        try:
            write.path = paths.of(write.key)
        except StoreError as exc:
            write.error = exc
    return [w for w in writes if w.error is None]


def attempt(write: Write, step: Callable[[Write], None], location: str, doing: str) -> None:
    """Run one write's step, turning an OSError into the write's StoreError."""
    try:
        step(write)
    except StoreError as exc:
        write.error = exc
    except OSError as exc:
        if exc.errno in CONFLICT_ERRNOS:
            write.error = key_conflict(location, write.key)
        else:
            write.error = store_error(exc, location, write.key, doing)
        write.error.__cause__ = exc


class Committer:
    """Commits batches of writes to one store's directory."""

    def __init__(
        self,
        paths: KeyPaths,
        temp_files: TempFiles,
        locks: KeyLocks,
        *,
        syncfs_fd: int | None,
        journal: FlushWatcher,
    ) -> None:
        """``syncfs_fd``: a descriptor of the root, to make a batch durable
        with ``syncfs``; None in fsync mode (the temp files fsync themselves,
        and each directory a batch wrote into is fsynced once). Every
        ``syncfs`` also retires the ``journal``'s creates linked before it."""
        self._paths = paths
        self._temp = temp_files
        self._locks = locks
        self._syncfs_fd = syncfs_fd
        self._journal = journal
        self._location = paths.location

    def commit(self, writes: list[Write]) -> None:
        """Apply ``writes`` (distinct keys) durably, with two syncs in all.

        1. stage each write: its bytes in a temp file (no lock needed);
        2. make the temp files durable (one syncfs; fsync mode did each file);
        3. for each write, under its key's lock: check its condition against
           the current object and move the temp file into place (rename), or
           remove the key; a create-if-absent links it into place, no lock;
        4. make the new names durable (one syncfs, or one fsync per
           directory), and only then answer.
        A key's lock is held only for its own step 3 (microseconds), not
        across the syncs, so batches in other processes do not queue behind
        this one. That is safe because a writer that then changes the same
        key answers only after a sync that started after its own change, and
        so covers ours. A write that fails at any step gets its own error;
        the others go on.
        """
        live = locate(writes, self._paths)
        try:
            for write in live:
                self._attempt(write, self._stage, "cannot write")
            staged = [w for w in live if w.error is None]
            if self._syncfs_fd is not None and any(w.tmp for w in staged):
                self._sync(staged, None, "cannot write")
            for write in staged:
                if write.error is None:
                    self._attempt(write, self._apply, "cannot write")
            done = [w for w in staged if w.error is None]
            self._sync(done, {os.path.dirname(w.path) for w in done}, "cannot write")
        finally:
            for write in live:
                if write.tmp is not None:
                    self._temp.discard(write.tmp)

    def _attempt(self, write: Write, step: Callable[[Write], None], doing: str) -> None:
        attempt(write, step, self._location, doing)

    def _sync(self, writes: list[Write], directories: set[str] | None, doing: str) -> None:
        """Make the batch's changes so far durable; on failure, fail every write in it.

        ``directories`` None means the temp files (syncfs mode only); else the
        directories whose entries changed.
        """
        if not writes:
            return
        try:
            if self._syncfs_fd is not None:
                mark = self._journal.mark()
                syncfs(self._syncfs_fd)
                self._journal.retire(mark)
            else:
                for directory in sorted(directories or ()):
                    fsync_directory(directory)
        except OSError as exc:
            for write in writes:
                write.error = store_error(exc, self._location, write.key, doing)
                write.error.__cause__ = exc
                write.result = None

    def _stage(self, write: Write) -> None:
        """Write a put's bytes to a temp file, making the directories it goes into.

        The condition is checked here too, without the lock, so a write that
        is bound to fail costs no temp file; step 3 checks it again.
        """
        found = stat_any(write.path)
        current = regular(found)
        self._check(write, current)
        if write.data is None:
            return  # a delete: nothing to stage
        if found is not None and stat.S_ISDIR(found.st_mode):
            raise key_conflict(self._location, write.key)
        self._paths.makedirs(os.path.dirname(write.path), write.key)
        write.tmp, write.stat = self._temp.write(write.data, current.st_mtime_ns if current else 0)

    def _check(self, write: Write, current: os.stat_result | None) -> None:
        """Raise if ``write``'s condition does not hold against ``current``."""
        if write.condition == "absent" and current is not None:
            raise AlreadyExists("object already exists", location=self._location, key=write.key)
        if write.condition == "match":
            expected = write.etag or ""
            if current is None:
                raise NotFound("no such object", location=self._location, key=write.key)
            actual = etag(current)
            if actual != expected:
                raise PreconditionFailed(
                    f"etag is {actual}, not {expected}", location=self._location, key=write.key
                )

    def _apply(self, write: Write) -> None:
        """Under the key's lock: check the condition, then place the temp file
        or remove the key. The inode a write replaces or deletes is retired
        to the spares, not freed. (A create takes no lock: ``link_new``.)"""
        if write.condition == "absent":
            link_new(write, self._location)
            return
        fd = self._locks.lock(write.key)
        try:
            found = stat_any(write.path)
            current = regular(found)
            self._check(write, current)
            if write.data is None:
                if current is not None:
                    self._paths.check_inside(os.path.dirname(write.path), write.key)
                    self._temp.retire(write.path, move=True)
                return
            assert write.tmp is not None and write.stat is not None
            if found is not None and stat.S_ISDIR(found.st_mode):
                raise key_conflict(self._location, write.key)
            if current is not None and current.st_mtime_ns >= write.stat.st_mtime_ns:
                # replaced since staging by a write with a later mtime: ours
                # must be later still, or its etag could repeat an old one
                now = current.st_mtime_ns + 1
                os.utime(write.tmp, ns=(now, now))
                write.stat = os.stat(write.tmp)
            if current is not None:
                self._temp.retire(write.path, move=False)
            os.rename(write.tmp, write.path)
            write.tmp = None
            write.result = etag(write.stat)
        finally:
            os.close(fd)

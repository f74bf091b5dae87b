"""FileStore: the contract on a local directory, durable and safe across processes.

Why it is built the way it is:

- **Durable when a write returns.** Bytes go to a temp file in
  ``<root>/.stepstone-tmp/`` (same filesystem, so a rename is atomic), which is
  made durable, moved into place with ``rename`` (or ``link`` for
  create-if-absent, which fails with EEXIST atomically), and then the new name
  is made durable. A crash leaves either the old object or the new one, never
  a torn one.
- **Durability is group-committed** (``file_commit``): writes queue, and one
  thread commits everything queued as a batch. On Linux both "made durable"
  steps are then one ``syncfs`` of the store's filesystem for the whole
  batch, so N concurrent writes cost two flushes, not 2N fsyncs; a flush on
  the disks measured here costs about the same for one file as for a
  hundred. Elsewhere, or with ``sync="fsync"``, each temp file is fsynced
  and each directory touched by the batch is fsynced once.
- **Conditional writes hold across processes.** Every mutation of a key runs
  under an exclusive ``flock`` on one of a fixed set of lock files (striped by
  a hash of the key), so a compare-and-swap in one process cannot interleave
  with a write from another. ``flock`` on separately opened files also
  excludes threads of the same process.
- **Etags come from ``stat`` alone** (inode, mtime in ns, size), so listing
  never reads a file. To make an etag change on every write even when the
  filesystem reuses an inode and the kernel's timestamps are coarse, the
  writer sets the mtime itself from ``time.time_ns()``, strictly after the
  replaced file's mtime, while holding the key's lock.
- **Inodes are recycled** (``file_spares``): a deleted or replaced object's
  inode is kept and rewritten as a later object instead of being freed,
  because freeing and allocating inodes at a high rate is what a busy store
  on ext4 without a journal spends most of its CPU on. Reads check that the
  file they read was the object throughout, so recycling cannot show them
  another object's bytes.
- **Blocking I/O runs on a small thread pool** (reads, listing, and the one
  committing thread), so the event loop never waits on the disk.
- **Nothing lands outside the root.** Keys are validated (no ``..``, no
  absolute paths), the reserved temp directory cannot be named by a key, and
  every path is checked to be under the root after normalisation (and, for
  writes, after resolving symlinks).

A filesystem cannot hold both a file ``a`` and a directory ``a``, so the keys
``a`` and ``a/b`` cannot coexist here as they can on S3; the second one is
refused with InvalidKey. The engine's key layout never does this.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import errno
import fcntl
import functools
import hashlib
import itertools
import operator
import os
import stat
import time
import weakref
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal, TypeVar

from .base import DEFAULT_PAGE_SIZE, ObjectInfo, ObjectStore, StoredObject
from .errors import (
    AlreadyExists,
    InvalidKey,
    NotFound,
    PreconditionFailed,
    StoreConfigError,
    StoreError,
    StoreUnavailable,
)
from .file_commit import HAVE_SYNCFS, Batcher, Read, Write, forks, fsync_directory, syncfs
from .file_spares import SPARE_SUFFIX, SparePool
from .keys import RESERVED_SEGMENT, validate_key, validate_prefix

T = TypeVar("T")

LOCK_STRIPES = 256

INSIDE_CACHE = 4096
"""Directories remembered as resolving inside the root (see ``FileStore._inside``)."""
"""Lock files per store. Bounded so a store with millions of keys does not
also hold millions of lock files; two keys sharing a stripe only wait on
each other for the few milliseconds of a write."""

MAX_WORKERS = 8
"""Threads doing blocking file I/O for one store: reads and listings, and the
one thread committing writes."""

SyncMode = Literal["auto", "syncfs", "fsync"]

STALE_TEMP_SECONDS = 3600

READ_ATTEMPTS = 16
"""Reads of an object that keeps changing under the reader before giving up."""

_CONFIG_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS}
_CONFLICT_ERRNOS = {errno.ENOTDIR, errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST}


class FileStore(ObjectStore):
    """An object store in a local directory; see the module docstring."""

    def __init__(
        self, root: str | Path, *, max_workers: int = MAX_WORKERS, sync: SyncMode = "auto"
    ) -> None:
        """``sync`` picks how a batch of writes is made durable: ``"syncfs"``
        (two syncs of the store's filesystem per batch; Linux only), ``"fsync"``
        (each file, then each directory it went into), or ``"auto"``: syncfs
        where the platform has it. Both are equally durable; see docs/storage.md
        for when ``fsync`` is the better choice."""
        self.root = os.path.realpath(os.fspath(root))
        self.location = f"file://{self.root}"
        self._tmp = os.path.join(self.root, RESERVED_SEGMENT)
        self._locks = os.path.join(self._tmp, "locks")
        self._max_workers = max(2, max_workers)
        self._pool: ThreadPoolExecutor | None = None
        if sync not in ("auto", "syncfs", "fsync"):
            raise StoreConfigError(
                f"sync={sync!r}: use 'auto', 'syncfs' or 'fsync'", location=self.location
            )
        if sync == "syncfs" and not HAVE_SYNCFS:
            raise StoreConfigError(
                "sync='syncfs': this platform has no syncfs; use 'fsync'", location=self.location
            )
        self.sync_mode: SyncMode = "syncfs" if sync != "fsync" and HAVE_SYNCFS else "fsync"
        try:
            os.makedirs(self._locks, exist_ok=True)
        except OSError as exc:
            raise StoreConfigError(
                f"cannot create the store directory: {exc.strerror}", location=self.location
            ) from exc
        self._root_fd = -1
        if self.sync_mode == "syncfs":
            # Held for the store's life: syncfs reports the writeback errors
            # seen since this descriptor was opened, so a fresh one per sync
            # would miss an error the kernel's flusher hit in between.
            self._root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
            weakref.finalize(self, os.close, self._root_fd)
        self._generation = forks()
        self._inside_ok: set[str] = set()
        self._queues()
        self._spares = SparePool(self._tmp)
        self._sweep_temp()

    def _sweep_temp(self) -> None:
        """Remove temp files and spares a crashed or exited writer left behind.

        Only those untouched for an hour: a live writer's temp file lives for
        milliseconds, and its spares are rewritten or unlinked when it
        closes. A spare's mtime is that of the object it was, so its age is
        its ctime, which retiring it set (and which nobody can set back).
        """
        cutoff = time.time() - STALE_TEMP_SECONDS
        try:
            with os.scandir(self._tmp) as entries:
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

    # -- plumbing ---------------------------------------------------------

    def _forked(self) -> None:
        """In a child forked from the process that used this store, start
        afresh: the parent's threads did not come along, so its pool and its
        queues (perhaps mid-batch) would wait forever."""
        if self._generation != forks():
            self._generation = forks()
            self._pool = None
            self._queues()

    def _queues(self) -> None:
        """New, empty queues for writes and reads."""
        self._writes = Batcher(self._commit, self._start, distinct_keys=True)
        self._reads = Batcher(self._serve_reads, self._start, distinct_keys=False)

    def _executor(self) -> ThreadPoolExecutor:
        self._forked()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._max_workers, thread_name_prefix="stepstone-file")
        return self._pool

    def _start(self, fn: Callable[[], None]) -> None:
        self._executor().submit(fn)

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor(), functools.partial(fn, *args))

    async def _write(self, write: Write) -> str | None:
        self._forked()
        await self._writes.run(write)
        if write.error is not None:
            raise write.error
        return write.result

    def _serve_reads(self, reads: list[Read]) -> None:
        for read in reads:
            try:
                read.result = self._get(read.key)
            except StoreError as exc:
                read.error = exc

    async def close(self) -> None:
        """Release the thread pool (a batch being committed finishes first in
        the background) and the spare inodes. The store can be used again."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)
        self._spares.clear()

    def _path(self, key: str) -> str:
        validate_key(key, location=self.location)
        path = os.path.normpath(os.path.join(self.root, key))
        if not path.startswith(self.root + os.sep):
            raise InvalidKey(f"key {key!r} would leave the root", location=self.location)
        return path

    def _error(self, exc: OSError, key: str | None, doing: str) -> StoreError:
        message = f"{doing}: {exc.strerror or exc}"
        if exc.errno == errno.ENAMETOOLONG:
            return InvalidKey(
                f"{doing}: a key segment is too long for this filesystem",
                location=self.location,
                key=key,
            )
        if exc.errno in _CONFIG_ERRNOS:
            return StoreConfigError(message, location=self.location, key=key)
        return StoreUnavailable(message, location=self.location, key=key)

    def _conflict(self, key: str) -> InvalidKey:
        return InvalidKey(
            "a key and a longer key under it ('a' and 'a/b') cannot both exist in a FileStore",
            location=self.location,
            key=key,
        )

    def _etag(self, st: os.stat_result) -> str:
        return f'"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"'

    def _info(self, key: str, st: os.stat_result) -> ObjectInfo:
        return ObjectInfo(key, self._etag(st), st.st_size, st.st_mtime_ns / 1e9)

    def _lock(self, key: str) -> int:
        """Take the key's stripe lock; returns the fd whose close releases it."""
        digest = hashlib.blake2b(key.encode(), digest_size=4).digest()
        stripe = int.from_bytes(digest, "big") % LOCK_STRIPES
        fd = os.open(os.path.join(self._locks, f"{stripe:03d}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        return fd

    @staticmethod
    def _stat_file(path: str) -> os.stat_result | None:
        """The file's stat, or None when there is no object (missing, or a directory)."""
        return FileStore._regular(FileStore._stat_any(path))

    @staticmethod
    def _regular(st: os.stat_result | None) -> os.stat_result | None:
        """``st`` if it is a regular file's (an object), else None."""
        return st if st is not None and stat.S_ISREG(st.st_mode) else None

    @staticmethod
    def _stat_any(path: str) -> os.stat_result | None:
        """Whatever is at ``path`` (file, directory, ...), or None."""
        try:
            return os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _inside(self, directory: str, key: str) -> None:
        """Refuse a directory that resolves (through symlinks) outside the root.

        A directory found inside is remembered (up to INSIDE_CACHE of them):
        resolving its path again is a ``lstat`` per component, for every
        write. What this guards against is a symlink put in the root by
        mistake, and that is caught the first time the store writes under
        it; the check was never atomic with the write that follows anyway.
        """
        if directory in self._inside_ok:
            return
        real = os.path.realpath(directory)
        if real != self.root and not real.startswith(self.root + os.sep):
            raise InvalidKey(f"key {key!r} would leave the root", location=self.location)
        if len(self._inside_ok) >= INSIDE_CACHE:
            self._inside_ok.clear()
        self._inside_ok.add(directory)

    def _makedirs(self, directory: str, key: str) -> None:
        """Create ``directory`` and any missing parents.

        The deepest existing ancestor is checked to lie inside the root before
        anything is created, so a symlink in the root cannot lead a write out.
        With fsync, each new directory is fsynced into its parent here; with
        syncfs, the batch's second sync covers them with the entries in them.
        """
        missing: list[str] = []
        d = directory
        while not os.path.isdir(d):
            if os.path.lexists(d):
                if os.path.isdir(d):
                    break  # another writer created it between our two looks
                raise self._conflict(key)
            missing.append(d)
            d = os.path.dirname(d)
        self._inside(d, key)
        raced = False
        for d in reversed(missing):
            try:
                os.mkdir(d)
            except FileExistsError:
                if not os.path.isdir(d):
                    raise self._conflict(key) from None
                raced = True  # another writer made it: perhaps a symlink
            if self.sync_mode == "fsync":
                fsync_directory(os.path.dirname(d))
        if raced:
            self._inside(directory, key)

    def _open_temp(self) -> tuple[str, int, os.stat_result | None]:
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

    def _write_temp(self, data: bytes, not_before_ns: int) -> tuple[str, os.stat_result]:
        """Write ``data`` to a temp file with a unique mtime (fsynced in fsync
        mode; in syncfs mode the batch's first sync makes it durable).

        A spare is overwritten in place and then cut to length, not emptied
        first: emptying frees its block and the write allocates another,
        74 us against 7 to 12 us a rewrite on ext4 (docs/performance.md,
        session 4).
        """
        tmp, fd, spare = self._open_temp()
        if spare is not None:
            not_before_ns = max(not_before_ns, spare.st_mtime_ns)
        try:
            view = memoryview(data)
            offset = 0
            while offset < len(view):
                offset += os.pwrite(fd, view[offset:], offset)
            if spare is not None and spare.st_size > len(data):
                os.ftruncate(fd, len(data))
            now = max(time.time_ns(), not_before_ns + 1)
            os.utime(fd, ns=(now, now))
            if self.sync_mode == "fsync":
                os.fsync(fd)
            st = os.fstat(fd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
        return tmp, st

    # -- committing a batch of writes ---------------------------------------

    def _commit(self, writes: list[Write]) -> None:
        """Apply ``writes`` (distinct keys) durably, with two syncs in all.

        1. stage each write: its bytes in a temp file (no lock needed);
        2. make the temp files durable (one syncfs; fsync mode did each file);
        3. for each write, under its key's lock: check its condition against
           the current object and move the temp file into place (rename, or
           link for create-if-absent), or remove the key;
        4. make the new names durable (one syncfs, or one fsync per
           directory), and only then answer.
        A key's lock is held only for its own step 3 (microseconds), not
        across the syncs, so batches in other processes do not queue behind
        this one. That is safe because a writer that then changes the same
        key answers only after a sync that started after its own change, and
        so covers ours. A write that fails at any step gets its own error;
        the others go on.
        """
        for write in writes:
            try:
                write.path = self._path(write.key)
            except StoreError as exc:
                write.error = exc
        live = [w for w in writes if w.error is None]
        try:
            for write in live:
                self._attempt(write, self._stage, "cannot write")
            staged = [w for w in live if w.error is None]
            if self.sync_mode == "syncfs" and any(w.tmp for w in staged):
                self._sync(staged, None, "cannot write")
            for write in staged:
                if write.error is None:
                    self._attempt(write, self._apply, "cannot write")
            done = [w for w in staged if w.error is None]
            self._sync(done, {os.path.dirname(w.path) for w in done}, "cannot write")
        finally:
            for write in live:
                if write.tmp is not None:
                    self._discard_temp(write.tmp)

    def _discard_temp(self, tmp: str) -> None:
        """A temp file that was never placed (its write failed): back to the
        spares if it is one of ours, else unlinked. A placed temp file is the
        object now, and ``_apply`` has already dropped its temp name."""
        if self._spares.add(tmp):
            return
        with contextlib.suppress(OSError):
            os.unlink(tmp)

    def _attempt(self, write: Write, step: Callable[[Write], None], doing: str) -> None:
        """Run one write's step, turning an OSError into the write's StoreError."""
        try:
            step(write)
        except StoreError as exc:
            write.error = exc
        except OSError as exc:
            if exc.errno in _CONFLICT_ERRNOS:
                write.error = self._conflict(write.key)
            else:
                write.error = self._error(exc, write.key, doing)
            write.error.__cause__ = exc

    def _sync(self, writes: list[Write], directories: set[str] | None, doing: str) -> None:
        """Make the batch's changes so far durable; on failure, fail every write in it.

        ``directories`` None means the temp files (syncfs mode only); else the
        directories whose entries changed.
        """
        if not writes:
            return
        try:
            if self.sync_mode == "syncfs":
                syncfs(self._root_fd)
            else:
                for directory in sorted(directories or ()):
                    fsync_directory(directory)
        except OSError as exc:
            for write in writes:
                write.error = self._error(exc, write.key, doing)
                write.error.__cause__ = exc
                write.result = None

    def _stage(self, write: Write) -> None:
        """Write a put's bytes to a temp file, making the directories it goes into.

        The condition is checked here too, without the lock, so a write that
        is bound to fail costs no temp file; step 3 checks it again.
        """
        found = self._stat_any(write.path)
        current = self._regular(found)
        self._check(write, current)
        if write.data is None:
            return  # a delete: nothing to stage
        if found is not None and stat.S_ISDIR(found.st_mode):
            raise self._conflict(write.key)
        self._makedirs(os.path.dirname(write.path), write.key)
        write.tmp, write.stat = self._write_temp(write.data, current.st_mtime_ns if current else 0)

    def _check(self, write: Write, current: os.stat_result | None) -> None:
        if write.condition == "absent" and current is not None:
            raise AlreadyExists("object already exists", location=self.location, key=write.key)
        if write.condition == "match":
            self._check_etag(write.key, current, write.etag or "")

    def _apply(self, write: Write) -> None:
        """Under the key's lock: check the condition, then place the temp file
        or remove the key. The inode a write replaces or deletes is retired
        to the spares, not freed."""
        fd = self._lock(write.key)
        try:
            found = self._stat_any(write.path)
            current = self._regular(found)
            self._check(write, current)
            if write.data is None:
                if current is not None:
                    self._inside(os.path.dirname(write.path), write.key)
                    self._retire(write.path, move=True)
                return
            assert write.tmp is not None and write.stat is not None
            if found is not None and stat.S_ISDIR(found.st_mode):
                raise self._conflict(write.key)
            if current is not None and current.st_mtime_ns >= write.stat.st_mtime_ns:
                # replaced since staging by a write with a later mtime: ours
                # must be later still, or its etag could repeat an old one
                now = current.st_mtime_ns + 1
                os.utime(write.tmp, ns=(now, now))
                write.stat = os.stat(write.tmp)
            if current is not None:
                self._retire(write.path, move=False)
            if write.condition == "absent":
                try:
                    os.link(write.tmp, write.path)
                except FileExistsError:
                    # something at the path that the check did not see: only
                    # a writer ignoring our locks could do that; it won.
                    raise AlreadyExists(
                        "object already exists", location=self.location, key=write.key
                    ) from None
                # The inode is the object now: its temp name must never be
                # taken for a spare, even if the batch then fails its sync.
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(write.tmp)
            else:
                os.rename(write.tmp, write.path)
            write.tmp = None
            write.result = self._etag(write.stat)
        finally:
            os.close(fd)

    def _retire(self, path: str, move: bool) -> None:
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

    def _check_etag(self, key: str, current: os.stat_result | None, etag: str) -> None:
        if current is None:
            raise NotFound("no such object", location=self.location, key=key)
        actual = self._etag(current)
        if actual != etag:
            raise PreconditionFailed(
                f"etag is {actual}, not {etag}", location=self.location, key=key
            )

    def _commit_one(self, write: Write) -> str | None:
        """Commit a batch of one, in this thread (the blocking API, for tools)."""
        self._commit([write])
        if write.error is not None:
            raise write.error
        return write.result

    # -- blocking operations ----------------------------------------------

    def _get(self, key: str) -> StoredObject:
        """Read an object, checking it stayed the object while it was read.

        Reads take no lock. If the file read was retired and rewritten as
        another object meanwhile (see file_spares), the key no longer names
        that inode with that mtime (a rewrite always sets a later one), so
        the read is retried on what the key names now.
        """
        path = self._path(key)
        for _ in range(READ_ATTEMPTS):
            try:
                with open(path, "rb") as f:
                    st = os.fstat(f.fileno())
                    if not stat.S_ISREG(st.st_mode):
                        raise NotFound("no such object", location=self.location, key=key)
                    data = f.read()
                now = self._stat_file(path)
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
                raise NotFound("no such object", location=self.location, key=key) from exc
            except OSError as exc:
                raise self._error(exc, key, "cannot read") from exc
            etag = self._etag(st)
            if now is not None and self._etag(now) == etag:
                return StoredObject(key, data, etag)
        raise StoreUnavailable(
            f"cannot read: the object changed {READ_ATTEMPTS} times while being read",
            location=self.location,
            key=key,
        )

    def _head(self, key: str) -> ObjectInfo:
        path = self._path(key)
        try:
            st = self._stat_file(path)
        except OSError as exc:
            raise self._error(exc, key, "cannot stat") from exc
        if st is None:
            raise NotFound("no such object", location=self.location, key=key)
        return self._info(key, st)

    def _put_if_absent(self, key: str, data: bytes) -> str:
        """Blocking create-if-absent in the calling thread (for tools and probes)."""
        result = self._commit_one(Write(key, bytes(data), "absent"))
        assert result is not None
        return result

    def _list(self, prefix: str, start_after: str | None, limit: int) -> list[ObjectInfo]:
        validate_prefix(prefix, location=self.location)
        after = start_after.encode() if start_after is not None else None
        out: list[ObjectInfo] = []
        if limit <= 0:
            return out
        try:
            for info in self._walk(self.root, "", prefix, after):
                out.append(info)
                if len(out) >= limit:
                    break
        except OSError as exc:
            raise self._error(exc, None, "cannot list") from exc
        return out

    def _walk(
        self, directory: str, rel: str, prefix: str, after: bytes | None
    ) -> Generator[ObjectInfo, None, None]:
        """Objects under ``directory`` in key byte order.

        Sorting each directory's entries by name, with ``/`` appended to
        directory names, gives global key order: every key under ``d/``
        compares with a sibling exactly as ``d/`` does.
        """
        entries: list[tuple[bytes, os.DirEntry[str], bool]] = []
        try:
            scan = os.scandir(directory)
        except (FileNotFoundError, NotADirectoryError):
            return
        with scan:
            for entry in scan:
                name = entry.name
                if not rel and name == RESERVED_SEGMENT:
                    continue
                try:
                    encoded = name.encode()
                except UnicodeEncodeError:
                    continue  # not a name any key can have
                is_dir = entry.is_dir(follow_symlinks=False)
                if not is_dir and not entry.is_file(follow_symlinks=False):
                    continue
                entries.append((encoded + b"/" if is_dir else encoded, entry, is_dir))
        entries.sort(key=operator.itemgetter(0))
        for _, entry, is_dir in entries:
            name = entry.name
            key = rel + name
            if is_dir:
                sub = key + "/"
                if not (sub.startswith(prefix) or prefix.startswith(sub)):
                    continue
                if after is not None and (key + "0").encode() <= after:
                    continue  # every key in it sorts before start_after
                yield from self._walk(os.path.join(directory, name), sub, prefix, after)
            else:
                if not key.startswith(prefix):
                    continue
                if after is not None and key.encode() <= after:
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # deleted while we listed
                yield self._info(key, st)

    # -- the contract -----------------------------------------------------

    async def get(self, key: str) -> StoredObject:
        read = Read(key)
        self._forked()
        await self._reads.run(read)
        if read.error is not None:
            raise read.error
        assert read.result is not None
        return read.result

    async def head(self, key: str) -> ObjectInfo:
        return await self._run(self._head, key)

    async def put(self, key: str, data: bytes) -> str:
        return _etag_of(await self._write(Write(key, bytes(data))))

    async def put_if_absent(self, key: str, data: bytes) -> str:
        return _etag_of(await self._write(Write(key, bytes(data), "absent")))

    async def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        return _etag_of(await self._write(Write(key, bytes(data), "match", etag)))

    async def delete(self, key: str, *, if_match: str | None = None) -> None:
        if if_match is None:
            await self._write(Write(key, None))
        else:
            await self._write(Write(key, None, "match", if_match))

    async def list(
        self,
        prefix: str = "",
        *,
        start_after: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
    ) -> list[ObjectInfo]:
        return await self._run(self._list, prefix, start_after, limit)

    async def scan(
        self,
        prefix: str = "",
        *,
        start_after: str | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> AsyncIterator[ObjectInfo]:
        """Every object under ``prefix`` in key order, from one walk of the
        tree handed over a page at a time. (Listing page after page would
        read and sort a whole directory again for every page: a scan of a
        directory of N files would cost N * N / page_size.)"""
        validate_prefix(prefix, location=self.location)
        after = start_after.encode() if start_after is not None else None
        walk = self._walk(self.root, "", prefix, after)
        try:
            while True:
                page = await self._run(self._next_page, walk, max(1, page_size))
                for info in page:
                    yield info
                if len(page) < page_size:
                    return
        finally:
            # (still running in a pool thread if we were cancelled mid-page:
            # then it is closed when collected)
            with contextlib.suppress(ValueError):
                walk.close()

    def _next_page(self, walk: Iterator[ObjectInfo], size: int) -> builtins.list[ObjectInfo]:
        try:
            return list(itertools.islice(walk, size))
        except OSError as exc:
            raise self._error(exc, None, "cannot list") from exc


def _etag_of(result: str | None) -> str:
    assert result is not None, "a committed put has an etag"
    return result

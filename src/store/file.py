"""FileStore: the contract on a local directory, durable and safe across processes.

Why it is built the way it is:

- **Durable when a write returns.** Bytes go to a temp file in
  ``<root>/.stepstone-tmp/`` (same filesystem, so a rename is atomic), which is
  fsynced, moved into place with ``rename`` (or ``link`` for create-if-absent,
  which fails with EEXIST atomically), and then the directory is fsynced. A
  crash leaves either the old object or the new one, never a torn one.
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
- **Blocking I/O runs on a small thread pool**, so concurrent writes (each
  waiting on an fsync) proceed in parallel without stalling the event loop.
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
import errno
import fcntl
import functools
import hashlib
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

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
from .keys import RESERVED_SEGMENT, validate_key, validate_prefix

T = TypeVar("T")

LOCK_STRIPES = 256
"""Lock files per store. Bounded so a store with millions of keys does not
also hold millions of lock files; two keys sharing a stripe only wait on
each other for the few milliseconds of a write."""

MAX_WORKERS = 8
"""Threads doing blocking file I/O for one store."""

STALE_TEMP_SECONDS = 3600

_CONFIG_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS}
_CONFLICT_ERRNOS = {errno.ENOTDIR, errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST}


def _fsync_directory(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _DirState:
    __slots__ = ("cond", "done", "requested", "running")

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.requested = 0
        self.done = 0
        self.running = False


class _DirSync:
    """Group commit for directory fsyncs.

    Writers into one directory (``queue/jobs``, ``outcomes``) each need an
    fsync of it *started after* their rename, not one of their own: a caller
    takes a ticket after its change; if an fsync is running it waits for the
    next, which one waiter starts for every ticket taken so far. Under load one
    fsync then covers many writes; alone, a writer pays exactly one, as before.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._dirs: dict[str, _DirState] = {}

    def sync(self, path: str) -> None:
        with self._lock:
            state = self._dirs.get(path)
            if state is None:
                state = self._dirs[path] = _DirState()
        with state.cond:
            state.requested += 1
            ticket = state.requested
            while state.done < ticket:
                if state.running:
                    state.cond.wait()
                    continue
                state.running = True
                target = state.requested
                state.cond.release()
                try:
                    _fsync_directory(path)
                except BaseException:
                    state.cond.acquire()
                    state.running = False
                    state.cond.notify_all()
                    raise
                state.cond.acquire()
                state.done = target
                state.running = False
                state.cond.notify_all()
            idle = not state.running and state.done == state.requested
        if idle:
            with self._lock, state.cond:
                if not state.running and state.done == state.requested:
                    self._dirs.pop(path, None)


class FileStore(ObjectStore):
    """An object store in a local directory; see the module docstring."""

    def __init__(self, root: str | Path, *, max_workers: int = MAX_WORKERS) -> None:
        self.root = os.path.realpath(os.fspath(root))
        self.location = f"file://{self.root}"
        self._tmp = os.path.join(self.root, RESERVED_SEGMENT)
        self._locks = os.path.join(self._tmp, "locks")
        self._max_workers = max_workers
        self._pool: ThreadPoolExecutor | None = None
        self._dir_sync = _DirSync()
        try:
            os.makedirs(self._locks, exist_ok=True)
        except OSError as exc:
            raise StoreConfigError(
                f"cannot create the store directory: {exc.strerror}", location=self.location
            ) from exc
        self._sweep_temp()

    def _sweep_temp(self) -> None:
        """Remove temp files a crashed writer left behind (older than an hour:
        a live writer's temp file lives for milliseconds)."""
        cutoff = time.time() - STALE_TEMP_SECONDS
        try:
            with os.scandir(self._tmp) as entries:
                for entry in entries:
                    if entry.name.endswith(".tmp") and entry.stat().st_mtime < cutoff:
                        os.unlink(entry.path)
        except OSError:
            pass  # best effort: a leftover temp file is never listed

    # -- plumbing ---------------------------------------------------------

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._max_workers, thread_name_prefix="stepstone-file")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args))

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)

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
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return st if stat.S_ISREG(st.st_mode) else None

    def _fsync_dir(self, path: str) -> None:
        """Make the entries changed in ``path`` so far durable (group commit, see _DirSync)."""
        self._dir_sync.sync(path)

    def _inside(self, directory: str, key: str) -> None:
        """Refuse a directory that resolves (through symlinks) outside the root."""
        real = os.path.realpath(directory)
        if real != self.root and not real.startswith(self.root + os.sep):
            raise InvalidKey(f"key {key!r} would leave the root", location=self.location)

    def _makedirs(self, directory: str, key: str) -> None:
        """Create ``directory`` and any missing parents durably (fsync each new one's parent).

        The deepest existing ancestor is checked to lie inside the root before
        anything is created, so a symlink in the root cannot lead a write out.
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
        for d in reversed(missing):
            try:
                os.mkdir(d)
            except FileExistsError:
                if not os.path.isdir(d):
                    raise self._conflict(key) from None
            self._fsync_dir(os.path.dirname(d))
        if missing:
            self._inside(directory, key)

    def _write_temp(self, data: bytes, not_before_ns: int) -> tuple[str, os.stat_result]:
        """Write ``data`` to a fresh fsynced temp file with a unique mtime."""
        tmp = os.path.join(self._tmp, secrets.token_hex(8) + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
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

    def _replace(
        self,
        key: str,
        data: bytes,
        check: Callable[[os.stat_result | None], None],
        exclusive: bool = False,
    ) -> str:
        """Under the key's lock: check the current object, then write ``data`` durably."""
        path = self._path(key)
        try:
            fd = self._lock(key)
            try:
                current = self._stat_file(path)
                check(current)
                if current is None and os.path.isdir(path):
                    raise self._conflict(key)
                parent = os.path.dirname(path)
                self._makedirs(parent, key)
                tmp, st = self._write_temp(data, current.st_mtime_ns if current else 0)
                try:
                    if exclusive:
                        os.link(tmp, path)
                        os.unlink(tmp)
                    else:
                        os.rename(tmp, path)
                except OSError:
                    os.unlink(tmp)
                    raise
                self._fsync_dir(parent)
                return self._etag(st)
            finally:
                os.close(fd)
        except StoreError:
            raise
        except OSError as exc:
            if exc.errno in _CONFLICT_ERRNOS:
                raise self._conflict(key) from exc
            raise self._error(exc, key, "cannot write") from exc

    # -- blocking operations ----------------------------------------------

    def _get(self, key: str) -> StoredObject:
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode):
                    raise NotFound("no such object", location=self.location, key=key)
                data = f.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
            raise NotFound("no such object", location=self.location, key=key) from exc
        except OSError as exc:
            raise self._error(exc, key, "cannot read") from exc
        return StoredObject(key, data, self._etag(st))

    def _head(self, key: str) -> ObjectInfo:
        path = self._path(key)
        try:
            st = self._stat_file(path)
        except OSError as exc:
            raise self._error(exc, key, "cannot stat") from exc
        if st is None:
            raise NotFound("no such object", location=self.location, key=key)
        return self._info(key, st)

    def _put(self, key: str, data: bytes) -> str:
        return self._replace(key, data, lambda current: None)

    def _put_if_absent(self, key: str, data: bytes) -> str:
        def check(current: os.stat_result | None) -> None:
            if current is not None:
                raise AlreadyExists("object already exists", location=self.location, key=key)

        try:
            return self._replace(key, data, check, exclusive=True)
        except InvalidKey as exc:
            # link() found something at the path that the check did not: only
            # a writer ignoring our locks could do that; report who won.
            if isinstance(exc.__cause__, FileExistsError):
                raise AlreadyExists(
                    "object already exists", location=self.location, key=key
                ) from exc
            raise

    def _check_etag(self, key: str, current: os.stat_result | None, etag: str) -> None:
        if current is None:
            raise NotFound("no such object", location=self.location, key=key)
        actual = self._etag(current)
        if actual != etag:
            raise PreconditionFailed(
                f"etag is {actual}, not {etag}", location=self.location, key=key
            )

    def _put_if_match(self, key: str, data: bytes, etag: str) -> str:
        return self._replace(key, data, lambda current: self._check_etag(key, current, etag))

    def _delete(self, key: str, if_match: str | None) -> None:
        path = self._path(key)
        try:
            fd = self._lock(key)
            try:
                current = self._stat_file(path)
                if if_match is not None:
                    self._check_etag(key, current, if_match)
                if current is None:
                    return
                self._inside(os.path.dirname(path), key)
                os.unlink(path)
                self._fsync_dir(os.path.dirname(path))
            finally:
                os.close(fd)
        except StoreError:
            raise
        except FileNotFoundError:
            return
        except OSError as exc:
            raise self._error(exc, key, "cannot delete") from exc

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
    ) -> Iterator[ObjectInfo]:
        """Objects under ``directory`` in key byte order.

        Sorting each directory's entries by name, with ``/`` appended to
        directory names, gives global key order: every key under ``d/``
        compares with a sibling exactly as ``d/`` does.
        """
        entries: list[tuple[bytes, str, bool]] = []
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
                entries.append((encoded + b"/" if is_dir else encoded, name, is_dir))
        entries.sort()
        for _, name, is_dir in entries:
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
                    st = os.stat(os.path.join(directory, name))
                except FileNotFoundError:
                    continue  # deleted while we listed
                yield self._info(key, st)

    # -- the contract -----------------------------------------------------

    async def get(self, key: str) -> StoredObject:
        return await self._run(self._get, key)

    async def head(self, key: str) -> ObjectInfo:
        return await self._run(self._head, key)

    async def put(self, key: str, data: bytes) -> str:
        return await self._run(self._put, key, bytes(data))

    async def put_if_absent(self, key: str, data: bytes) -> str:
        return await self._run(self._put_if_absent, key, bytes(data))

    async def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        return await self._run(self._put_if_match, key, bytes(data), etag)

    async def delete(self, key: str, *, if_match: str | None = None) -> None:
        await self._run(self._delete, key, if_match)

    async def list(
        self,
        prefix: str = "",
        *,
        start_after: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
    ) -> list[ObjectInfo]:
        return await self._run(self._list, prefix, start_after, limit)

"""The create journal: one flush makes a whole batch of creates durable.

A write made durable the usual way (``commit``) costs two flushes of the
filesystem: its bytes before its name, its name before the answer. The
creates of ``put_many_if_absent`` (``creates``) take another way, where one
flush does. Each object's key, bytes and identity (inode, mtime) go first
into this process's journal, a file whose blocks were written and flushed
when it was made, so that writing into it again changes only data and an
``fdatasync`` of it flushes those blocks and nothing else of the disk. Once
the journal holds a batch, its objects are linked into place and their
callers answered. Their files and names reach the disk with the next flush
of the whole filesystem: a ``syncfs`` of any batch of the store's other
writes, or a checkpoint of the journal's own a moment later. After that
their entries are *retired*, and once every entry is, the journal starts
again from the top (a new *epoch*).

If the power fails first, the journal is the record: the next store opened
on the root brings back what the disk lost (``recovery``). A journal belongs
to the process that holds its ``flock`` (it is named a journal only once
locked); one whose lock is free was left by a process that is gone.

Layout: a header (magic, the boot id of the machine that wrote it), then
entries, each ``crc32 | epoch | length | kind | body``. A reader takes the
entries from the top while their CRC holds and their epoch is the first
one's; the rest is an older epoch's, or was never flushed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import struct
import threading
import time
import uuid
import weakref
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..errors import StoreConfigError

SUFFIX = ".journal"
UNNAMED_SUFFIX = ".tmp"
"""A journal being made has its name with this added until it is locked; one
left so by a process killed meanwhile holds nothing, and is swept as any
temp file is (``temp_files.sweep``)."""
MAGIC = b"stepstone journal 1\n"
HEADER_SIZE = 64
INITIAL_SIZE = 256 * 1024
"""A new journal's size; it doubles when a batch does not fit."""

CREATE, REFUSED, EPOCH = 1, 2, 3
"""JournalEntry kinds: an object about to be linked; one that was not (its key was
taken, or the link failed); the first entry of an epoch."""

_HEAD = struct.Struct("<IIIB")  # crc32 (of all that follows it), epoch, body length, kind
_IDENT = struct.Struct("<QqH")  # inode, mtime (ns), key length; then the key
_SIZES = struct.Struct("<II")  # data length, recovered length; then both
_SAME = 0xFFFFFFFF
"""A recovered length saying: the same bytes as the data."""


def boot_id() -> bytes | None:
    """This boot of the machine, or None where the system does not say.
    A journal written in this boot lost nothing the page cache held."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return uuid.UUID(f.read().strip()).bytes
    except (OSError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One create as the journal holds it."""

    kind: int
    key: str
    ino: int
    mtime_ns: int
    data: bytes = b""
    recovered: bytes = b""


def create_entry(key: str, st: os.stat_result, data: bytes, recovered: bytes | None) -> bytes:
    """The body of a CREATE entry: the object ``key`` about to be linked from
    the file whose stat is ``st``, and what a recovery writes (None: ``data``)."""
    return b"".join(
        (
            _ident(key, st),
            _SIZES.pack(len(data), _SAME if recovered is None else len(recovered)),
            data,
            recovered or b"",
        )
    )


def refused_entry(key: str, st: os.stat_result) -> bytes:
    """The body of a REFUSED entry: the create of ``key`` from ``st`` did not happen."""
    return _ident(key, st)


def _ident(key: str, st: os.stat_result) -> bytes:
    encoded = key.encode()
    return _IDENT.pack(st.st_ino, st.st_mtime_ns, len(encoded)) + encoded


def _framed(epoch: int, kind: int, body: bytes) -> bytes:
    rest = _HEAD.pack(0, epoch, len(body), kind)[4:] + body
    return struct.pack("<I", zlib.crc32(rest)) + rest


def read_journal(fd: int) -> tuple[bytes | None, list[JournalEntry]]:
    """The boot id a journal was written in (None: unknown) and its entries
    of the current epoch, in order."""
    data = b""
    while chunk := os.pread(fd, 1 << 20, len(data)):
        data += chunk
    if len(data) < HEADER_SIZE or not data.startswith(MAGIC):
        return None, []
    boot = data[len(MAGIC) : len(MAGIC) + 16]
    return (None if boot == bytes(16) else boot), list(_entries(data))


def _entries(data: bytes) -> Iterator[JournalEntry]:
    offset, first = HEADER_SIZE, None
    while offset + _HEAD.size <= len(data):
        crc, epoch, length, kind = _HEAD.unpack_from(data, offset)
        end = offset + _HEAD.size + length
        if end > len(data) or zlib.crc32(data[offset + 4 : end]) != crc:
            return
        if first is None:
            first = epoch
        elif epoch != first:
            return
        body = data[offset + _HEAD.size : end]
        offset = end
        if kind in (CREATE, REFUSED):
            yield _entry(kind, body)


def _entry(kind: int, body: bytes) -> JournalEntry:
    ino, mtime_ns, key_length = _IDENT.unpack_from(body)
    at = _IDENT.size + key_length
    key = body[_IDENT.size : at].decode()
    if kind == REFUSED:
        return JournalEntry(kind, key, ino, mtime_ns)
    data_length, recovered_length = _SIZES.unpack_from(body, at)
    at += _SIZES.size
    data = body[at : at + data_length]
    recovered = data if recovered_length == _SAME else body[at + data_length :]
    return JournalEntry(kind, key, ino, mtime_ns, data, recovered)


class Journal:
    """One store object's journal in this process (thread-safe), made on first use.

    Groups of entries are recorded one at a time, by the thread that commits
    creates: ``record`` (durable when it returns), then ``linked`` once the
    group's objects are in place. A flush of the whole filesystem that began
    after a group was linked retires it: ``mark`` before the flush,
    ``retire(mark)`` after. ``sync`` is that flush for a checkpoint (given
    the paths linked since the last one, for a store that flushes file by
    file); ``start`` runs a function on one of the store's threads.
    """

    def __init__(
        self,
        directory: str,
        location: str,
        *,
        sync: Callable[[list[str]], None],
        start: Callable[[Callable[[], None]], object],
        checkpoint_delay: float,
    ) -> None:
        self._directory = directory
        self._location = location
        self._sync = sync
        self._start = start
        self._delay = checkpoint_delay
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._path = ""
        self._closer: Callable[[], object] | None = None  # closes the descriptor
        self._size = 0
        self._end = HEADER_SIZE
        self._epoch = 1
        self._groups = 0  # recorded
        self._linked = 0  # recorded and linked (groups complete in order)
        self._retired = 0  # linked before a flush of everything began
        self._unflushed: list[tuple[int, str]] = []  # (group, path) linked, not yet retired
        self._checkpointing = False
        self.flush_seconds: float | None = None
        """How long a flush of the journal takes here: a moving average of the
        recent ones (None before the first)."""
        self.broken = False
        """A flush of the journal failed: what it held may be lost, and the
        store stops using it (its creates take the usual way)."""

    # -- recording --------------------------------------------------------

    def record(self, kind: int, bodies: list[bytes]) -> None:
        """Append one group of entries and flush them. Raises OSError (the
        journal is then broken)."""
        with self._lock:
            if self.broken:
                raise OSError(errno.EIO, "the journal failed before")
            if self._fd is None:
                self._open()
            blob = b"".join(_framed(self._epoch, kind, body) for body in bodies)
            offset = self._end
            try:
                if offset + len(blob) > self._size:
                    self._grow(offset + len(blob))
            except OSError:
                self.broken = True
                raise
            self._end += len(blob)
            self._groups += 1
            fd = self._fd
        assert fd is not None
        try:
            view = memoryview(blob)
            while view:
                view = view[os.pwrite(fd, view, offset + len(blob) - len(view)) :]
            started = time.perf_counter()
            os.fdatasync(fd)
        except OSError:
            self.broken = True
            raise
        took = time.perf_counter() - started
        last = self.flush_seconds
        self.flush_seconds = took if last is None else last + (took - last) / 8

    def linked(self, paths: list[str]) -> None:
        """The last group recorded is done: its objects at ``paths`` are in place."""
        with self._lock:
            self._linked = self._groups
            self._unflushed.extend((self._linked, path) for path in paths)

    # -- retiring ---------------------------------------------------------

    def mark(self) -> int:
        """The groups a flush of everything beginning now will cover."""
        with self._lock:
            return self._linked

    def retire(self, mark: int) -> None:
        """A flush that began at ``mark`` is done: those groups are on the
        disk without the journal. With every group retired, start over."""
        with self._lock:
            if mark <= self._retired:
                return
            self._retired = mark
            self._unflushed = [(g, p) for g, p in self._unflushed if g > mark]
            if self._retired == self._groups and self._end > HEADER_SIZE and self._fd is not None:
                # A new epoch: what follows its first entry is the old one's,
                # which a reader stops at. (Not flushed: until it is, a
                # recovery reads retired entries and finds them in place.)
                self._epoch += 1
                first = _framed(self._epoch, EPOCH, b"")
                with contextlib.suppress(OSError):
                    os.pwrite(self._fd, first, HEADER_SIZE)
                    self._end = HEADER_SIZE + len(first)

    def checkpoint_soon(self) -> None:
        """Retire what is linked within ``checkpoint_delay``: by then a batch
        of the store's other writes has usually flushed everything anyway;
        if not, flush it here, on one of the store's threads."""
        with self._lock:
            if self._checkpointing or self._retired == self._linked:
                return
            self._checkpointing = True
        try:
            self._start(self._checkpoint)
        except BaseException:
            with self._lock:
                self._checkpointing = False
            raise

    def _checkpoint(self) -> None:
        try:
            time.sleep(self._delay)
            self.flush_linked()
        except OSError:
            pass  # not retired: the next checkpoint, or the close, tries again
        finally:
            with self._lock:
                self._checkpointing = False

    def flush_linked(self) -> None:
        """Flush everything linked so far and retire it. Raises OSError."""
        with self._lock:
            mark = self._linked
            paths = [p for g, p in self._unflushed if g <= mark]
        if mark > self._retired:
            self._sync(paths)
            self.retire(mark)

    # -- the file ---------------------------------------------------------

    def _open(self) -> None:
        """(Under the lock.) Make this process's journal: header and zeroed
        blocks written and flushed, its name flushed into the directory, and
        locked for as long as it is open.

        It is made and locked under a name a recovery does not read, and only
        then named a journal: a store opened on the root meanwhile would
        otherwise find a journal whose lock nobody holds yet, take it for a
        dead process's, and remove it from under its maker."""
        path = os.path.join(self._directory, secrets.token_hex(8) + SUFFIX)
        unnamed = path + UNNAMED_SUFFIX
        try:
            fd = os.open(unnamed, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise StoreConfigError(
                f"cannot create the journal {unnamed}: {exc.strerror}", location=self._location
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            header = MAGIC + (boot_id() or bytes(16))
            os.pwrite(fd, header.ljust(HEADER_SIZE, b"\0"), 0)
            self._fd, self._size = fd, HEADER_SIZE
            self._grow(INITIAL_SIZE)
            os.rename(unnamed, path)
            dir_fd = os.open(self._directory, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except BaseException:
            self._fd = None
            os.close(fd)
            for leftover in (unnamed, path):
                with contextlib.suppress(OSError):
                    os.unlink(leftover)
            raise
        self._path = path
        self._end = HEADER_SIZE
        self._closer = weakref.finalize(self, os.close, fd)

    def _grow(self, needed: int) -> None:
        """(Under the lock.) Zero the blocks up to at least ``needed`` bytes and
        flush them with the file's new size, so that writing there later changes
        data only."""
        assert self._fd is not None
        size = max(self._size * 2, needed, INITIAL_SIZE)
        zeros = bytes(min(size - self._size, 1 << 20))
        at = self._size
        while at < size:
            at += os.pwrite(self._fd, zeros[: size - at], at)
        os.fsync(self._fd)
        self._size = size

    def close(self) -> None:
        """Flush what is linked, then remove the journal: nothing in it is
        needed any more. If the flush fails it stays, for a recovery to read.
        The journal can be used again: a new file is made then."""
        with self._lock:
            fd, path, closer = self._fd, self._path, self._closer
            self._fd, self._path, self._closer = None, "", None
            pending = self._groups > self._retired
            paths = [p for _, p in self._unflushed]
            self._unflushed, self._end, self._size = [], HEADER_SIZE, 0
            self._groups = self._linked = self._retired = 0
            self.broken = False
        if fd is None:
            return
        try:
            if pending:
                self._sync(paths)
            os.unlink(path)  # (a broken journal's last group failed: it stays undone)
        except OSError:
            pass  # left for a recovery
        finally:
            if closer is not None:
                closer()

    def forget(self) -> None:
        """In a forked child: drop the parent's journal without touching it
        (closing our copy of its descriptor leaves the parent's lock held).
        A new lock too: a thread of the parent may have held the old one."""
        self._lock = threading.Lock()
        closer, self._closer, self._fd = self._closer, None, None
        self._path, self._end, self._size = "", HEADER_SIZE, 0
        self._groups = self._linked = self._retired = 0
        self._unflushed = []
        self._checkpointing = self.broken = False
        if closer is not None:
            closer()

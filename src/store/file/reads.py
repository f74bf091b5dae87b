"""Reading an object, and making sure the bytes read were that object's.

Reads take no lock. A FileStore rewrites retired inodes as later objects
(see ``spares``), so a reader that opened a file just before it was replaced
or deleted could otherwise return bytes of whatever object that inode became.
A read therefore checks, after reading, that the key still names the inode
it read with the mtime it had: a rewrite always sets a later one. If not, it
reads again what the key names now. A symlink at a key is not an object
(``stats``), so a read does not follow one either.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from typing import BinaryIO, TypeVar

from ..base import ObjectInfo, StoredObject
from ..errors import NotFound, StoreUnavailable
from ..parts import FEED, SPLIT_LOOK, Sink, SplitObject, Splitter, filled
from .os_errors import store_error
from .stats import etag, object_info, stat_file

T = TypeVar("T")

READ_ATTEMPTS = 16
"""Reads of an object that keeps changing under the reader before giving up."""


def read_object(path: str, key: str, location: str) -> StoredObject:
    """The object ``key`` at ``path``, checked to have stayed the object while it was read."""

    def whole(f: BinaryIO, _: os.stat_result) -> bytes:
        return f.read()

    data, read_etag = _read_checked(path, key, location, whole)
    return StoredObject(key, data, read_etag)


def read_split(path: str, key: str, location: str, splitter: Splitter) -> SplitObject:
    """The object ``key`` at ``path`` in the pieces ``splitter`` finds in its
    first bytes, its large piece read from the file into its own allocation,
    or handed to the split's ``into`` a buffer at a time
    (``stepstone.store.parts``); checked as ``read_object`` is."""

    def pieces(f: BinaryIO, st: os.stat_result) -> tuple[bytes, bytes, bytes]:
        fd = f.fileno()
        look = os.pread(fd, SPLIT_LOOK, 0)
        split = splitter(look)
        if split is None or split.start > len(look) or split.start + split.length > st.st_size:
            return f.read(), b"", b""  # (from the start: pread moves no offset)
        end = split.start + split.length

        def fill(view: memoryview) -> None:
            done = 0
            while done < len(view):
                got = os.preadv(fd, [view[done:]], split.start + done)
                if got == 0:
                    raise OSError(errno.EIO, "the file ended before its size")
                done += got

        after = os.pread(fd, max(0, st.st_size - end), end)
        if split.into is not None:
            _hand_over(fd, split.start, split.length, split.into)
            return look[: split.start], b"", after
        return look[: split.start], filled(split.length, fill), after

    (before, piece, after), read_etag = _read_checked(path, key, location, pieces)
    return SplitObject(key, before, piece, after, read_etag)


def _hand_over(fd: int, start: int, length: int, into: Sink) -> None:
    """``length`` bytes of the file from ``start`` handed to ``into``, read
    into one buffer of ``FEED`` bytes again and again."""
    buffer = bytearray(min(FEED, length))
    view = memoryview(buffer)
    done = 0
    while done < length:
        got = os.preadv(fd, [view[: length - done]], start + done)
        if got == 0:
            raise OSError(errno.EIO, "the file ended before its size")
        into(view[:got])
        done += got


def _read_checked(
    path: str, key: str, location: str, read: Callable[[BinaryIO, os.stat_result], T]
) -> tuple[T, str]:
    """What ``read`` makes of the file at ``path``, and the etag it had,
    read again while the key's inode changed under the reader."""
    for _ in range(READ_ATTEMPTS):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise NotFound("no such object", location=location, key=key)
                with open(fd, "rb", closefd=False) as f:
                    data = read(f, st)
            finally:
                os.close(fd)
            now = stat_file(path)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
            raise NotFound("no such object", location=location, key=key) from exc
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # a symlink
                raise NotFound("no such object", location=location, key=key) from exc
            raise store_error(exc, location, key, "cannot read") from exc
        read_etag = etag(st)
        if now is not None and etag(now) == read_etag:
            return data, read_etag
    raise StoreUnavailable(
        f"cannot read: the object changed {READ_ATTEMPTS} times while being read",
        location=location,
        key=key,
    )


def absent(path: str) -> bool:
    """Whether nothing is at ``path``: one ``lstat``, cheap enough to make on
    the event loop. Most reads of a submit or a first run look for what is not
    there yet (an outcome, a memo); answering those here spares each a trip
    to the reading thread and back. False when in doubt: the read then says."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False
    return False


def head_object(path: str, key: str, location: str) -> ObjectInfo:
    """The object ``key`` at ``path``'s etag, size and time, from its stat."""
    try:
        st = stat_file(path)
    except OSError as exc:
        raise store_error(exc, location, key, "cannot stat") from exc
    if st is None:
        raise NotFound("no such object", location=location, key=key)
    return object_info(key, st)

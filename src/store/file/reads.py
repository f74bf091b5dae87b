"""Reading an object: the file its key names, and the etag of what was read.

Reads take no lock: a file is never changed once it is an object (a write
places a new file under the name), so the bytes read through one open
descriptor are one object's, and the descriptor's ``fstat`` gives their
etag. A symlink at a key is not an object (``stats``), so a read does not
follow one either.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from typing import TypeVar

from ..base import ObjectInfo, StoredObject
from ..errors import NotFound
from ..parts import FEED, SPLIT_LOOK, Sink, SplitObject, Splitter, filled
from .os_errors import store_error
from .stats import etag, object_info, stat_file

T = TypeVar("T")


def read_object(path: str, key: str, location: str) -> StoredObject:
    """The object ``key`` at ``path``."""
    data, read_etag = _read(path, key, location, lambda fd, st: _pread_all(fd, 0, st.st_size))
    return StoredObject(key, data, read_etag)


def read_split(path: str, key: str, location: str, splitter: Splitter) -> SplitObject:
    """The object ``key`` at ``path`` in the pieces ``splitter`` finds in its
    first bytes, its large piece read from the file into its own allocation,
    or handed to the split's ``into`` a buffer at a time
    (``stepstone.store.parts``)."""

    def pieces(fd: int, st: os.stat_result) -> tuple[bytes, bytes, bytes]:
        look = os.pread(fd, SPLIT_LOOK, 0)
        split = splitter(look)
        if split is None or split.start > len(look) or split.start + split.length > st.st_size:
            return _pread_all(fd, 0, st.st_size), b"", b""
        end = split.start + split.length
        after = _pread_all(fd, end, st.st_size - end)
        if split.into is not None:
            _hand_over(fd, split.start, split.length, split.into)
            return look[: split.start], b"", after
        return look[: split.start], filled(split.length, _filler(fd, split.start)), after

    (before, piece, after), read_etag = _read(path, key, location, pieces)
    return SplitObject(key, before, piece, after, read_etag)


def _pread_all(fd: int, start: int, length: int) -> bytes:
    return filled(length, _filler(fd, start))


def _filler(fd: int, start: int) -> Callable[[memoryview], None]:
    """Fills a view with the file's bytes from ``start``."""

    def fill(view: memoryview) -> None:
        done = 0
        while done < len(view):
            got = os.preadv(fd, [view[done:]], start + done)
            if got == 0:
                raise OSError(errno.EIO, "the file ended before its size")
            done += got

    return fill


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


def _read(
    path: str, key: str, location: str, read: Callable[[int, os.stat_result], T]
) -> tuple[T, str]:
    """What ``read`` makes of the file at ``path``, and its etag."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise NotFound("no such object", location=location, key=key)
            return read(fd, st), etag(st)
        finally:
            os.close(fd)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
        raise NotFound("no such object", location=location, key=key) from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a symlink
            raise NotFound("no such object", location=location, key=key) from exc
        raise store_error(exc, location, key, "cannot read") from exc


def head_object(path: str, key: str, location: str) -> ObjectInfo:
    """The object ``key`` at ``path``'s etag, size and time, from its stat."""
    try:
        st = stat_file(path)
    except OSError as exc:
        raise store_error(exc, location, key, "cannot stat") from exc
    if st is None:
        raise NotFound("no such object", location=location, key=key)
    return object_info(key, st)

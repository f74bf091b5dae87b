"""Flushing to the disk: ``syncfs`` for a whole filesystem, ``fsync`` for a directory.

A FileStore makes a batch of writes durable with two ``syncfs`` calls where
Linux has them (one flush covers every file of the batch), or with an
``fsync`` of each file and each directory it went into (``sync="fsync"``,
and every platform without ``syncfs``). Python has no ``os.syncfs``, so it is
called in libc through ctypes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Callable


def _load_syncfs() -> Callable[[int], int] | None:
    """libc's ``syncfs(fd)``, or None where there is none (not Linux)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        fn = libc.syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_SYNCFS = _load_syncfs()

HAVE_SYNCFS = _SYNCFS is not None


def syncfs(fd: int) -> None:
    """Flush every file and directory of the filesystem holding ``fd``.

    Linux waits for the writes to complete, which gives every file on the
    filesystem the guarantee of an fsync (``man 2 syncfs``), and since 5.8
    it reports the writeback errors seen since ``fd`` was opened. ctypes
    releases the GIL for the call.
    """
    if _SYNCFS is None:
        raise OSError(0, "syncfs is not available on this platform")
    if _SYNCFS(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def fsync_directory(path: str) -> None:
    """Make the entries of the directory at ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

"""What ``stat`` says about a path: whether it holds an object, and the object's etag.

An object is a regular file, and a symlink is never one, whatever it
points at: a write through it would land wherever it points, so every look
here is an ``lstat``. Its etag comes from ``stat`` alone (inode,
mtime in ns, size), so listing never reads a file. For an etag to change on
every write, even when the filesystem reuses an inode and the kernel's
timestamps are coarse, the writer sets the mtime itself, strictly after the
replaced file's (see ``temp_files`` and ``commit``).
"""

from __future__ import annotations

import os
import stat

from ..base import ObjectInfo


def etag(st: os.stat_result) -> str:
    return f'"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"'


def object_info(key: str, st: os.stat_result) -> ObjectInfo:
    return ObjectInfo(key, etag(st), st.st_size, st.st_mtime_ns / 1e9)


def stat_any(path: str) -> os.stat_result | None:
    """Whatever is at ``path`` (file, directory, symlink, ...), or None."""
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def regular(st: os.stat_result | None) -> os.stat_result | None:
    """``st`` if it is a regular file's (an object), else None."""
    return st if st is not None and stat.S_ISREG(st.st_mode) else None


def stat_file(path: str) -> os.stat_result | None:
    """The file's stat, or None when there is no object (missing, a directory, a symlink)."""
    return regular(stat_any(path))

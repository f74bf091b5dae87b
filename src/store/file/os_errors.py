"""What a failed system call means to the caller, as the store's own errors.

The contract promises a ``StoreError`` for every failure, so an ``OSError``
never leaves the FileStore: a name too long for the filesystem is the key's
fault (InvalidKey), a permission or read-only filesystem is the
configuration's (StoreConfigError), anything else is the disk's
(StoreUnavailable). A key that collides with a directory (``a`` beside
``a/b``) is InvalidKey too: a filesystem cannot hold both, as S3 can.
"""

from __future__ import annotations

import errno

from ..errors import InvalidKey, StoreConfigError, StoreError, StoreUnavailable

CONFIG_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS}

CONFLICT_ERRNOS = {errno.ENOTDIR, errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST}
"""What a write meets when a key and a longer key under it collide."""


def store_error(exc: OSError, location: str, key: str | None, doing: str) -> StoreError:
    """The StoreError to raise for ``exc``, met while ``doing`` something to ``key``."""
    message = f"{doing}: {exc.strerror or exc}"
    if exc.errno == errno.ENAMETOOLONG:
        return InvalidKey(
            f"{doing}: a key segment is too long for this filesystem",
            location=location,
            key=key,
        )
    if exc.errno in CONFIG_ERRNOS:
        return StoreConfigError(message, location=location, key=key)
    return StoreUnavailable(message, location=location, key=key)


def key_conflict(location: str, key: str) -> InvalidKey:
    """The error for ``key`` colliding with a file or directory of another key."""
    return InvalidKey(
        "a key and a longer key under it ('a' and 'a/b') cannot both exist in a FileStore",
        location=location,
        key=key,
    )

"""Per-key locks that hold across processes: ``flock`` on a fixed set of lock files.

Every mutation of a key checks its condition and applies under an exclusive
``flock`` on one of LOCK_STRIPES files in ``<root>/.stepstone-tmp/locks/``,
chosen by a hash of the key, so a compare-and-swap in one process cannot
interleave with a write from another. ``flock`` on separately opened files
also excludes threads of the same process. Readers never lock. A lock file
that is a symlink is refused, not followed: opening it would create a file
wherever it points.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os

from ..errors import StoreConfigError

LOCK_STRIPES = 256
"""Lock files per store. Bounded so a store with millions of keys does not
also hold millions of lock files; two keys sharing a stripe only wait on
each other for the few milliseconds of a write."""


class KeyLocks:
    """The lock files in ``directory`` (which must exist) of the store at ``location``."""

    def __init__(self, directory: str, location: str) -> None:
        self._directory = directory
        self._location = location

    def lock(self, key: str) -> int:
        """Take ``key``'s stripe lock; returns the fd whose close releases it.
        (A plain fd, not a context manager: this is on every write's path.)"""
        digest = hashlib.blake2b(key.encode(), digest_size=4).digest()
        stripe = int.from_bytes(digest, "big") % LOCK_STRIPES
        path = os.path.join(self._directory, f"{stripe:03d}.lock")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise StoreConfigError(
                f"the lock file {path} is a symlink: refused, the store writes only under its root",
                location=self._location,
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        return fd

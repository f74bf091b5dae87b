"""Retired inodes: what a FileStore deletes or replaces, kept to become its next temp files.

Why not just unlink? On ext4 without a journal (as on the machine in
docs/performance.md), creating a file scans its block group past every
inode freed in the last minute, reading each one's on-disk record, so a
store that frees inodes as fast as it creates them pays more for each new
file the busier it is, until that scan is most of its CPU
(benchmarks/NOTES.md).
A store that *retires* inodes instead (renames a deleted object, or links a
replaced one, into ``.stepstone-tmp/``) and rewrites them as its next
objects frees nothing in the steady state; and on any filesystem, reusing
an inode is cheaper than freeing one and allocating another.

Rewriting an inode in place is only safe if nobody else can be using it, so
a pool is private to one FileStore object in one process: its spares carry
a random token, nothing else ever opens them, and a forked child starts an
empty pool of its own. A reader that opened the object before it was
retired is protected by the store's read check (see ``reads``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import threading

from .forks import forks

SPARE_SUFFIX = ".spare"

MAX_SPARES = 1024
"""Spare inodes one store keeps at most; beyond that, deletes unlink."""


class SparePool:
    """The spare inodes of one store object (thread-safe)."""

    def __init__(self, directory: str, limit: int = MAX_SPARES) -> None:
        self._directory = directory
        self._limit = limit
        self._lock = threading.Lock()
        self._spares: list[str] = []
        self._generation = -1
        self._names = itertools.count()
        self._prefix = ""

    def _own(self) -> None:
        """(Under the lock.) A new process, after a fork, must not touch the
        parent's spares: the parent may be rewriting them right now."""
        if self._generation != forks():
            self._generation = forks()
            self._spares = []
            self._prefix = os.path.join(self._directory, secrets.token_hex(6) + "-")

    def temp_name(self) -> str:
        """A new temp file name, unique to this store object (cheaper than
        drawing random bytes for each)."""
        with self._lock:
            self._own()
            return f"{self._prefix}{next(self._names)}.tmp"

    def reserve(self) -> str | None:
        """A fresh name to retire an inode under, or None when the pool is full."""
        with self._lock:
            self._own()
            if len(self._spares) >= self._limit:
                return None
            return f"{self._prefix}{next(self._names)}{SPARE_SUFFIX}"

    def add(self, path: str) -> bool:
        """Take an inode at ``path`` (a name from ``reserve``, or a spare
        ``take`` gave out and the writer did not use) into the pool; False if
        the name is not this pool's (not a spare, or from before a fork)."""
        with self._lock:
            self._own()
            if not path.startswith(self._prefix):
                return False
            self._spares.append(path)
            return True

    def take(self) -> str | None:
        """A spare to rewrite, now the caller's alone, or None."""
        with self._lock:
            self._own()
            return self._spares.pop() if self._spares else None

    def clear(self) -> None:
        """Unlink every spare (the store is closing)."""
        with self._lock:
            self._own()
            spares, self._spares = self._spares, []
        for path in spares:
            with contextlib.suppress(OSError):
                os.unlink(path)

    def __len__(self) -> int:
        with self._lock:
            self._own()
            return len(self._spares)

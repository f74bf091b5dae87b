"""Where a key lives under the store's root, and the checks that keep every write inside it.

Keys are validated (no ``..``, no absolute paths, and the reserved temp
directory cannot be named by one), and every path is checked to be under the
root after normalisation and, for writes, after resolving symlinks: a
symlink put in the root by mistake must not lead a write out of it. The
store's own directories (temp files, locks) must be real directories, not
symlinks, wherever those would point.
"""

from __future__ import annotations

import os

from ..errors import InvalidKey, StoreConfigError
from ..keys import validate_key
from .flush import fsync_directory
from .os_errors import key_conflict

INSIDE_CACHE = 4096
"""Directories remembered as resolving inside the root (see ``KeyPaths.check_inside``)."""


def make_own_directory(path: str, location: str) -> None:
    """Create the store's own directory ``path`` (its parent exists), or
    check the one there: a symlink is refused (StoreConfigError), since the
    temp and lock files created in it would land wherever it points."""
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        pass
    except OSError as exc:
        raise StoreConfigError(
            f"cannot create the store directory: {exc.strerror}", location=location
        ) from exc
    if os.path.islink(path) or not os.path.isdir(path):
        raise StoreConfigError(
            f"{path} must be a directory, not a symlink or a file: the store keeps"
            " its temp and lock files there and writes only under its root",
            location=location,
        )


class KeyPaths:
    """The paths of one store's keys, under ``root`` (a resolved, absolute path)."""

    def __init__(self, root: str, location: str, *, fsync_new_directories: bool) -> None:
        """With ``fsync_new_directories`` (fsync mode), each directory made
        for a write is fsynced into its parent; in syncfs mode the batch's
        second sync covers them with the entries in them."""
        self.root = root
        self.location = location
        self._fsync = fsync_new_directories
        self._inside_ok: set[str] = set()

    def of(self, key: str) -> str:
        """The path of ``key``'s file; InvalidKey for a key that is not one."""
        validate_key(key, location=self.location)
        path = os.path.normpath(os.path.join(self.root, key))
        if not path.startswith(self.root + os.sep):
            raise InvalidKey(f"key {key!r} would leave the root", location=self.location)
        return path

    def check_inside(self, directory: str, key: str) -> None:
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

    def makedirs(self, directory: str, key: str) -> None:
        """Create ``directory`` and any missing parents, for a write to ``key``.

        The deepest existing ancestor is checked to lie inside the root before
        anything is created, so a symlink in the root cannot lead a write out.
        """
        missing: list[str] = []
        d = directory
        while not os.path.isdir(d):
            if os.path.lexists(d):
                if os.path.isdir(d):
                    break  # another writer created it between our two looks
                raise key_conflict(self.location, key)
            missing.append(d)
            d = os.path.dirname(d)
        self.check_inside(d, key)
        raced = False
        for d in reversed(missing):
            try:
                os.mkdir(d)
            except FileExistsError:
                if not os.path.isdir(d):
                    raise key_conflict(self.location, key) from None
                raced = True  # another writer made it: perhaps a symlink
            if self._fsync:
                fsync_directory(os.path.dirname(d))
        if raced:
            self.check_inside(directory, key)

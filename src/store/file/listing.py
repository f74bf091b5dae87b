"""Listing: the objects under a prefix, in key byte order, from a walk of the tree.

Listing never reads a file: an object's etag, size and time come from the
``stat`` of its directory entry. ``RESERVED_SEGMENT`` (the temp directory)
is skipped, and so are names no key can have.
"""

from __future__ import annotations

import itertools
import operator
import os
import stat
from collections.abc import Generator, Iterator

from ..base import ObjectInfo
from ..keys import RESERVED_SEGMENT, validate_prefix
from .os_errors import store_error
from .stats import object_info


def objects_under(
    root: str, location: str, prefix: str, start_after: str | None
) -> Generator[ObjectInfo, None, None]:
    """Every object under ``prefix`` whose key sorts after ``start_after``, in
    key order; the prefix is checked now, the tree walked as it is consumed."""
    validate_prefix(prefix, location=location)
    after = start_after.encode() if start_after is not None else None
    return _from_deepest(root, prefix, after)


def _from_deepest(root: str, prefix: str, after: bytes | None) -> Generator[ObjectInfo, None, None]:
    """The walk, begun in the deepest directory the prefix names (``a/b/``
    of ``a/b/c``): listing ``memos/<run>/`` reads that run's directory, not
    the name of every run in ``memos/``. Each directory on the way must be
    one, not a file or a symlink, as the walk from the root would have it
    (the store's own directory is no prefix: ``validate_prefix`` refuses it)."""
    rel = prefix[: prefix.rfind("/") + 1]
    path = root
    for part in rel.split("/")[:-1]:
        path = os.path.join(path, part)
        try:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                return
        except (FileNotFoundError, NotADirectoryError):
            return
    yield from _walk(path, rel, prefix, after)


def next_page(objects: Iterator[ObjectInfo], size: int, location: str) -> list[ObjectInfo]:
    """The next ``size`` objects (fewer at the end) of ``objects``."""
    try:
        return list(itertools.islice(objects, size))
    except OSError as exc:
        raise store_error(exc, location, None, "cannot list") from exc


def list_page(
    root: str, location: str, prefix: str, start_after: str | None, limit: int
) -> list[ObjectInfo]:
    """One page: the first ``limit`` objects under ``prefix`` after ``start_after``."""
    objects = objects_under(root, location, prefix, start_after)
    if limit <= 0:
        return []
    return next_page(objects, limit, location)


def _walk(
    directory: str, rel: str, prefix: str, after: bytes | None
) -> Generator[ObjectInfo, None, None]:
    """Objects under ``directory`` in key byte order.

    Sorting each directory's entries by name, with ``/`` appended to
    directory names, gives global key order: every key under ``d/``
    compares with a sibling exactly as ``d/`` does.
    """
    entries: list[tuple[bytes, os.DirEntry[str], bool]] = []
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
            entries.append((encoded + b"/" if is_dir else encoded, entry, is_dir))
    entries.sort(key=operator.itemgetter(0))
    for _, entry, is_dir in entries:
        name = entry.name
        key = rel + name
        if is_dir:
            sub = key + "/"
            if not (sub.startswith(prefix) or prefix.startswith(sub)):
                continue
            if after is not None and (key + "0").encode() <= after:
                continue  # every key in it sorts before start_after
            yield from _walk(os.path.join(directory, name), sub, prefix, after)
        else:
            if not key.startswith(prefix):
                continue
            if after is not None and key.encode() <= after:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # deleted while we listed
            yield object_info(key, st)

"""Reading the journals of processes that are gone, when a store is opened.

A journal whose ``flock`` nobody holds was left by a process that ended
before it removed it (killed, crashed, or the machine went down). What is
done with it depends on whether the machine restarted since:

- **The same boot**: the process died, the kernel did not. Everything it
  linked is in the page cache, as it was: one flush of the filesystem puts
  it on the disk, and the journal goes.
- **Another boot** (or a system that does not say): a power cut may have
  lost any file or name the journal's entries were waiting for. For each
  key, its latest entry says what should be there; a recovery writes the
  entry's ``recovered`` bytes (the usual way: flushed before named) where
  the key has nothing, or has that entry's own inode without its bytes
  (named, not written). A key holding another object is left alone:
  something wrote it since, and a write made the usual way is never torn.

A key whose object was deleted after its create, while the entry was still
needed, comes back too: nothing on the disk tells it from a create whose
name was lost. That is why the bytes written are ``recovered``, which the
creator chose to say "this may be such an object" (docs/storage.md).
"""

from __future__ import annotations

import fcntl
import logging
import os
import stat
from collections.abc import Callable

from ..errors import StoreError, StoreUnavailable
from .batches import Write
from .commit import Committer
from .journal import CREATE, SUFFIX, JournalEntry, boot_id, read_journal
from .paths import KeyPaths
from .stats import stat_any

log = logging.getLogger("stepstone.store.file")


def recover(
    directory: str, paths: KeyPaths, committer: Committer, flush: Callable[[], None]
) -> None:
    """Take over every journal in ``directory`` that no process holds; see the
    module docstring. ``flush`` makes the whole filesystem durable."""
    taken: list[tuple[str, int]] = []
    try:
        with os.scandir(directory) as found:
            names = sorted(e.name for e in found if e.name.endswith(SUFFIX))
    except OSError:
        return
    try:
        for name in names:
            path = os.path.join(directory, name)
            fd = _take(path)
            if fd is not None:
                taken.append((path, fd))
        if not taken:
            return
        now = boot_id()
        entries: list[JournalEntry] = []
        for _, fd in taken:
            boot, journal = read_journal(fd)
            if now is None or boot != now:
                entries += journal
        if entries and not _restore(entries, paths, committer):
            return  # the journals stay, for the next store opened here
        flush()
        for path, _ in taken:
            os.unlink(path)
    except OSError as exc:
        log.warning("could not recover the journals in %s: %s", directory, exc)
    finally:
        for _, fd in taken:
            os.close(fd)


def _take(path: str) -> int | None:
    """An open, locked descriptor of the journal at ``path``, or None if a
    process holds it (or it went meanwhile)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        now = os.lstat(path)
        if now.st_ino == os.fstat(fd).st_ino:
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _restore(entries: list[JournalEntry], paths: KeyPaths, committer: Committer) -> bool:
    """Write each key's latest create where the disk lost it; False if the
    disk failed a write (one refused for its key is only logged)."""
    latest: dict[str, JournalEntry] = {}
    refused: set[tuple[str, int, int]] = set()
    for entry in entries:
        if entry.kind != CREATE:
            refused.add((entry.key, entry.ino, entry.mtime_ns))
        elif entry.key not in latest or entry.mtime_ns >= latest[entry.key].mtime_ns:
            latest[entry.key] = entry
    writes = [
        Write(entry.key, entry.recovered)
        for entry in latest.values()
        if (entry.key, entry.ino, entry.mtime_ns) not in refused and _lost(entry, paths)
    ]
    if not writes:
        return True
    committer.commit(writes)
    failed = [w for w in writes if w.error is not None]
    for write in failed:
        log.warning("could not recover %s: %s", write.key, write.error)
    log.warning(
        "recovered %d object(s) from the journals of processes that ended with the machine",
        len(writes) - len(failed),
    )
    return not any(isinstance(w.error, StoreUnavailable) for w in failed)


def _lost(entry: JournalEntry, paths: KeyPaths) -> bool:
    """Whether the disk lost what ``entry`` created: nothing at its key, or
    its inode there without its bytes."""
    try:
        path = paths.of(entry.key)
    except StoreError:
        return False
    st = stat_any(path)
    if st is None:
        return True
    if not stat.S_ISREG(st.st_mode) or st.st_ino != entry.ino:
        return False  # another object (or a directory, a symlink): leave it
    if st.st_mtime_ns > entry.mtime_ns:
        return False  # the inode became a later object of this key
    if st.st_mtime_ns < entry.mtime_ns or st.st_size != len(entry.data):
        return True  # its metadata did not reach the disk
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            return os.pread(fd, len(entry.data) + 1, 0) != entry.data
        finally:
            os.close(fd)
    except OSError:
        return True

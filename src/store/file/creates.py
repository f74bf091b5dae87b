"""Creates made durable by the journal: one flush for a whole batch.

What ``put_many_if_absent`` does on a FileStore, a batch at a time:

1. stage each object: its bytes in a new temp file, not flushed;
2. record the batch in the journal (``journal``): every object's key, bytes
   and file identity, flushed with one ``fdatasync``. From here the batch
   survives a power cut: a recovery can write any of it the disk lost;
3. link each temp file into place if its key is free (``commit.link_new``:
   one winner per key, across processes, with no key lock);
4. if a create did not happen (its key was taken, or the link failed),
   record that too, flushed, before answering: a recovery must not make an
   object its caller was told was refused;
5. answer. The files and names reach the disk with the store's next flush
   of the filesystem, which retires the batch's entries.

The journal comes first and the link after, so that no name can reach the
disk without an entry that tells a recovery what it should hold.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from ..base import NewObject
from .batches import Creates, Write
from .commit import attempt, link_new
from .journal import CREATE, REFUSED, Journal, create_entry, refused_entry
from .os_errors import store_error
from .paths import KeyPaths
from .temp_files import TempFiles


@dataclass(frozen=True, slots=True)
class RecoverableObject(NewObject):
    """A create for :meth:`FileStore.put_many_if_absent` that says what the
    object holds if a recovery after a power cut brings it back.

    After a power cut the FileStore brings back every object its journal
    holds that is not on the disk (``recovery``). That includes an object
    deleted within the moment before the cut, while its journal entry was
    still needed; so a caller for whom a deleted object coming back matters
    says, in ``recovered``, that it may be one. Another store takes it as the
    plain :class:`~stepstone.store.base.NewObject` it also is, so a caller
    can hand it to any store, or to a wrapper around a FileStore."""

    recovered: bytes | None = None
    """What a recovery writes back in the object's place (None: ``data``)."""


class Creator:
    """Commits batches of journaled creates to one store's directory."""

    def __init__(self, paths: KeyPaths, temp_files: TempFiles, journal: Journal) -> None:
        self._paths = paths
        self._temp = temp_files
        self._journal = journal
        self._location = paths.location
        self._lock = threading.Lock()  # one batch at a time: the journal's groups link in order

    def commit(self, batches: list[Creates]) -> None:
        """Create every write of ``batches`` whose key is free, with one flush
        (two when a create is refused); see the module docstring."""
        with self._lock:
            self._commit(batches)

    def commit_now(self, batch: Creates) -> bool:
        """Commit ``batch`` in the calling thread unless another batch is being
        committed (then False, and nothing was done)."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            self._commit([batch])
        finally:
            self._lock.release()
        return True

    def _commit(self, batches: list[Creates]) -> None:
        writes = [write for batch in batches for write in batch.writes]
        made: set[str] = set()  # directories made or found this batch
        try:
            for write in writes:
                attempt(write, lambda w: self._stage(w, made), self._location, "cannot write")
            staged = [w for w in writes if w.error is None]
            if not staged:
                return
            bodies = [create_entry(w.key, _stat(w), _data(w), w.recovered) for w in staged]
            try:
                self._journal.record(CREATE, bodies)
            except OSError as exc:
                for write in staged:
                    write.error = store_error(exc, self._location, write.key, "cannot write")
                    write.error.__cause__ = exc
                return
            for write in staged:
                attempt(
                    write, lambda w: link_new(w, self._location), self._location, "cannot write"
                )
            refused = [w for w in staged if w.error is not None]
            if refused:
                try:
                    self._journal.record(REFUSED, [refused_entry(w.key, _stat(w)) for w in refused])
                except OSError as exc:
                    # A recovery could still make them: not refused, then, but
                    # in doubt, as a write whose answer was lost.
                    for write in refused:
                        write.error = store_error(exc, self._location, write.key, "cannot write")
                        write.error.__cause__ = exc
            self._journal.linked([w.path for w in staged if w.error is None])
        finally:
            for write in writes:
                if write.tmp is not None:
                    self._temp.discard(write.tmp)

    def _stage(self, write: Write, made: set[str]) -> None:
        """Write the bytes to a new temp file. (Whether the key is free is the
        link's to say: a look here would cost as much as the link again, for
        the few creates a caller makes of a key already taken.)"""
        write.path = self._paths.of(write.key)
        directory = os.path.dirname(write.path)
        if directory not in made:
            self._paths.makedirs(directory, write.key)
            made.add(directory)
        write.tmp, write.stat = self._temp.write(_data(write), 0, journaled=True)


def _stat(write: Write) -> os.stat_result:
    assert write.stat is not None
    return write.stat


def _data(write: Write) -> bytes:
    """(A create batched through the journal is never of Parts: ``put_parts``
    commits its writes one by one.)"""
    assert isinstance(write.data, bytes)
    return write.data

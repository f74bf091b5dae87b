"""The FileStore class: the ObjectStore contract, put together from the parts beside it.

What is the class's own: blocking file I/O runs on a small thread pool (reads
and listings, and the one thread committing writes), so the event loop never
waits on the disk; writes and reads queue in ``batches`` and are served a
batch at a time; and a store used before a fork starts afresh in the child.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal, TypeVar

from ..base import DEFAULT_PAGE_SIZE, NewObject, ObjectInfo, ObjectStore, StoredObject
from ..errors import NotFound, StoreConfigError, StoreError, StoreUnavailable
from ..keys import RESERVED_SEGMENT
from ..parts import SPLIT_LOOK, Parts, SplitObject, Splitter, split_in_memory
from . import notices
from .batches import Batcher, Creates, Read, ReadMany, Write
from .commit import Committer, locate
from .commit_process import (
    CommitProcess,
    CpuWatch,
    ProcessGone,
    Unsent,
    can_start,
    worth_starting,
)
from .creates import Creator, RecoverableObject
from .flush import HAVE_SYNCFS, fsync_directory, syncfs
from .forks import forks
from .journal import Journal
from .listing import list_page, next_page, objects_under
from .locks import KeyLocks
from .paths import KeyPaths, make_own_directory
from .reads import absent, head_object, read_object, read_split
from .recovery import recover
from .temp_files import TempFiles, sweep

T = TypeVar("T")

MAX_WORKERS = 8
"""Threads doing blocking file I/O for one store: reads and listings, and the
one thread committing writes."""

CHECKPOINT_DELAY = 0.05
"""Seconds a journaled create waits at most for a flush of the filesystem
that retires its entry (see ``journal``): a busy store's own batches flush
sooner; an idle one flushes once for all the creates of that time."""

CREATE_HERE_FLUSH = 0.001
"""Seconds a journal flush may take (on average, lately) for a few creates to
be committed on the caller's thread (``FileStore.put_many_if_absent``)."""

CREATE_HERE_MAX = 8
"""The most creates one call may have to be committed on the caller's thread."""

COMMIT_PROCESS_AFTER = 256
"""Writes a store commits in its own thread before it looks whether to start a
commit process (``commit_in="auto"``), and between two looks: a store that
busy gains from one, and a store used for a moment (a command, a test)
never pays the helper's start."""

COMMIT_PROCESS_START = 60.0
"""Seconds a store with ``commit_in="process"`` waits for its helper to be up."""

SyncMode = Literal["auto", "syncfs", "fsync"]
CommitIn = Literal["auto", "thread", "process"]

log = logging.getLogger("stepstone.store.file")


class FileStore(ObjectStore):
    """An object store in a local directory; see the ``stepstone.store.file`` docstring."""

    def __init__(
        self,
        root: str | Path,
        *,
        max_workers: int = MAX_WORKERS,
        sync: SyncMode = "auto",
        commit_in: CommitIn = "auto",
    ) -> None:
        """``sync`` picks how a batch of writes is made durable: ``"syncfs"``
        (two syncs of the store's filesystem per batch; Linux only), ``"fsync"``
        (each file, then each directory it went into), or ``"auto"``: syncfs
        where the platform has it. Both are equally durable; see docs/storage.md
        for when ``fsync`` is the better choice.

        ``commit_in`` picks where batches of writes are committed: in a
        thread of this process (``"thread"``), in a helper process
        (``"process"``, see ``commit_process``), or ``"auto"``: in a thread,
        until the store has committed ``COMMIT_PROCESS_AFTER`` writes in a
        stretch during which a CPU sat idle (on a machine with two or more),
        then in a helper. Both are equally durable."""
        self.root = os.path.realpath(os.fspath(root))
        self.location = f"file://{self.root}"
        tmp = os.path.join(self.root, RESERVED_SEGMENT)
        locks = os.path.join(tmp, "locks")
        journals = os.path.join(tmp, "journal")
        self._max_workers = max(2, max_workers)
        self._pool: ThreadPoolExecutor | None = None
        if sync not in ("auto", "syncfs", "fsync"):
            raise StoreConfigError(
                f"sync={sync!r}: use 'auto', 'syncfs' or 'fsync'", location=self.location
            )
        if sync == "syncfs" and not HAVE_SYNCFS:
            raise StoreConfigError(
                "sync='syncfs': this platform has no syncfs; use 'fsync'", location=self.location
            )
        self.sync_mode: SyncMode = "syncfs" if sync != "fsync" and HAVE_SYNCFS else "fsync"
        if commit_in not in ("auto", "thread", "process"):
            raise StoreConfigError(
                f"commit_in={commit_in!r}: use 'auto', 'thread' or 'process'",
                location=self.location,
            )
        if commit_in == "process" and not can_start():
            raise StoreConfigError(
                "commit_in='process': this interpreter cannot start a helper process"
                " (a frozen application); use 'thread'",
                location=self.location,
            )
        self.commit_in: CommitIn = commit_in
        try:
            os.makedirs(self.root, exist_ok=True)
        except OSError as exc:
            raise StoreConfigError(
                f"cannot create the store directory: {exc.strerror}", location=self.location
            ) from exc
        make_own_directory(tmp, self.location)
        make_own_directory(locks, self.location)
        make_own_directory(journals, self.location)
        root_fd = None
        if self.sync_mode == "syncfs":
            # Held for the store's life: syncfs reports the writeback errors
            # seen since this descriptor was opened, so a fresh one per sync
            # would miss an error the kernel's flusher hit in between.
            root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
            weakref.finalize(self, os.close, root_fd)
        self._root_fd = root_fd
        fsync = self.sync_mode == "fsync"
        self._paths = KeyPaths(self.root, self.location, fsync_new_directories=fsync)
        self._temp = TempFiles(tmp, fsync=fsync)
        self._journal = Journal(
            journals,
            self.location,
            sync=self._flush_linked,
            start=self._start,
            checkpoint_delay=CHECKPOINT_DELAY,
        )
        self._committer = Committer(
            self._paths,
            self._temp,
            KeyLocks(locks, self.location),
            syncfs_fd=root_fd,
            journal=self._journal,
        )
        self._helper: CommitProcess | None = None
        self._helper_failed = False
        self._committed_here = 0
        self._next_look = COMMIT_PROCESS_AFTER
        self._cpus: CpuWatch | None = None
        self._generation = forks()
        self._queues()
        recover(journals, self._paths, self._committer, self._flush_everything)
        self._temp.sweep()
        sweep(journals)  # (journals a process was killed while making: see ``journal``)

    # -- plumbing ---------------------------------------------------------

    def _forked(self) -> None:
        """In a child forked from the process that used this store, start
        afresh: the parent's threads did not come along, so its pool and its
        queues (perhaps mid-batch) would wait forever."""
        if self._generation != forks():
            self._generation = forks()
            self._pool = None
            self._helper = None  # (the parent's: its pipes closed in this child)
            self._journal.forget()
            self._queues()

    def _queues(self) -> None:
        """New, empty queues for writes, journaled creates and reads (and a new
        creator: a thread of the parent may have held the old one's lock)."""
        self._creator = Creator(self._paths, self._temp, self._journal)
        self._created_this_iteration: asyncio.Task[object] | None = None
        self._writes = Batcher(self._commit, self._start, distinct_keys=True)
        self._creates = Batcher(
            self._creator.commit,
            self._start,
            distinct_keys=False,
            on_idle=self._journal.checkpoint_soon,
        )
        self._reads: Batcher[Read | ReadMany] = Batcher(
            self._serve_reads, self._start, distinct_keys=False
        )

    def _may_create_here(self, count: int) -> bool:
        """Whether ``count`` creates may be committed on the caller's thread
        (``put_many_if_absent``). The first task to create in an iteration of
        the event loop may, again and again; other tasks creating in the same
        iteration (a gather of submits) are queued together, for one flush."""
        task = asyncio.current_task()
        if self._created_this_iteration not in (None, task):
            return False
        flush = self._journal.flush_seconds
        if count > CREATE_HERE_MAX or flush is None or flush > CREATE_HERE_FLUSH:
            return False
        if not self._creates.idle():
            return False
        if self._created_this_iteration is None:
            self._created_this_iteration = task
            asyncio.get_running_loop().call_soon(self._iteration_over)
        return True

    def _iteration_over(self) -> None:
        self._created_this_iteration = None

    def _flush_linked(self, paths: list[str]) -> None:
        """A journal checkpoint: make the creates linked at ``paths`` durable
        (one ``syncfs``; in fsync mode, each file and each directory)."""
        if self._root_fd is not None:
            syncfs(self._root_fd)
            return
        for path in paths:
            with contextlib.suppress(FileNotFoundError):  # deleted since, durably
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        for directory in sorted({os.path.dirname(path) for path in paths}):
            fsync_directory(directory)

    def _flush_everything(self) -> None:
        """Make the whole filesystem durable (taking over a dead process's journal)."""
        if self._root_fd is not None:
            syncfs(self._root_fd)
        else:
            os.sync()

    def _executor(self) -> ThreadPoolExecutor:
        self._forked()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._max_workers, thread_name_prefix="stepstone-file")
        return self._pool

    def _start(self, fn: Callable[[], None]) -> None:
        self._executor().submit(fn)

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor(), functools.partial(fn, *args))

    async def _write(self, write: Write) -> str | None:
        self._forked()
        await self._writes.run(write)
        if write.error is not None:
            raise write.error
        return write.result

    @property
    def committing_in(self) -> Literal["thread", "process"]:
        """Where write batches are committed now: ``"process"`` once a helper
        is up (see ``commit_in``)."""
        helper = self._helper
        return "process" if helper is not None and helper.up else "thread"

    def _commit(self, writes: list[Write]) -> None:
        """Commit a batch of writes: in the helper once it is up, else here."""
        helper = None if _has_parts(writes) else self._ready_helper()
        if helper is not None and self._commit_in_helper(helper, writes):
            return
        self._committer.commit(writes)
        self._committed_here += len(writes)

    def _commit_in_helper(self, helper: CommitProcess, writes: list[Write]) -> bool:
        """Commit a batch in the helper; False if it never got there (commit it here).
        A key that names no file is refused here, before it is sent."""
        valid = locate(writes, self._paths)
        if not valid:
            return True
        mark = self._journal.mark()
        try:
            syncs = helper.commit(valid)
        except Unsent as exc:
            if helper is self._helper:  # (else ``close`` took it away meanwhile)
                self._lose_helper(f"the commit process is gone ({exc})")
            return False
        except ProcessGone as exc:
            self._lose_helper(f"the commit process ended mid-batch ({exc})")
            for write in valid:
                write.error = StoreUnavailable(
                    f"the commit process ended while committing this write ({exc}): it may or"
                    " may not have been made",
                    location=self.location,
                    key=write.key,
                )
            return True
        if syncs:
            self._journal.retire(mark)
        return True

    def _ready_helper(self) -> CommitProcess | None:
        """The helper, if it is up; started here when it is wanted (see ``commit_in``)."""
        helper = self._helper  # (``close``, on the event loop, may take it away meanwhile)
        if helper is None:
            if self._helper_failed or not self._wants_helper():
                return None
            try:
                helper = self._helper = CommitProcess(self.root, self.sync_mode, self.location)
            except OSError as exc:
                self._lose_helper(f"the commit process did not start ({exc})")
                return None
        wait = COMMIT_PROCESS_START if self.commit_in == "process" else 0.0
        try:
            return helper if helper.ready(wait) else None
        except ProcessGone as exc:
            self._lose_helper(f"the commit process did not come up ({exc})")
            return None

    def _wants_helper(self) -> bool:
        """With ``commit_in="auto"``: a look every ``COMMIT_PROCESS_AFTER``
        writes at whether a CPU sat idle meanwhile, for the helper to run on."""
        if self.commit_in != "auto":
            return self.commit_in == "process"
        if self._cpus is None:
            self._cpus = CpuWatch()  # (the first stretch starts at the first batch)
        if self._committed_here < self._next_look:
            return False
        self._next_look = self._committed_here + COMMIT_PROCESS_AFTER
        return worth_starting(self._cpus.idle_since_last_look())

    def _lose_helper(self, why: str) -> None:
        """Commit in this process from now on (no endless restarts), and say why once."""
        helper, self._helper = self._helper, None
        self._helper_failed = True
        if helper is not None:
            helper.close(timeout=0.0)
        log.warning("%s: %s; committing in this process from now on", self.location, why)

    def _serve_reads(self, reads: list[Read | ReadMany]) -> None:
        for read in reads:
            try:
                if isinstance(read, ReadMany):
                    read.results = [self._get_or_none(key) for key in read.keys]
                else:
                    read.result = self._get(read.key)
            except StoreError as exc:
                read.error = exc

    def _get_or_none(self, key: str) -> StoredObject | None:
        try:
            return self._get(key)
        except NotFound:
            return None

    def watch_changes(
        self, prefix: str, on_change: Callable[[str | None], None]
    ) -> Callable[[], None] | None:
        """Notices of objects placed directly under ``prefix`` by any process
        on this machine (:mod:`stepstone.store.file.notices`, inotify); None
        where the platform has none."""
        if not prefix.endswith("/"):
            raise ValueError(f"watch_changes takes a prefix ending in '/', got {prefix!r}")
        directory = os.path.dirname(self._paths.of(prefix + "x"))
        stop: Callable[[], None] | None = notices.watch(directory, prefix, on_change)
        return stop

    async def close(self) -> None:
        """Release the thread pool (a batch being committed finishes first in
        the background) and the spare inodes. The store can be used again."""
        if self._generation == forks():
            await asyncio.get_running_loop().run_in_executor(None, self._journal.close)
        await self._close_helper()
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)
        self._temp.clear_spares()

    async def _close_helper(self) -> None:
        """Close the helper once the batch it may be committing is answered."""
        helper, self._helper = self._helper, None
        if helper is not None and self._generation == forks():
            await asyncio.get_running_loop().run_in_executor(None, helper.close)

    # -- blocking operations ----------------------------------------------

    def _commit_one(self, write: Write) -> str | None:
        """Commit a batch of one, in this thread (the blocking API, for tools)."""
        self._committer.commit([write])
        if write.error is not None:
            raise write.error
        return write.result

    def _get(self, key: str) -> StoredObject:
        return read_object(self._paths.of(key), key, self.location)

    def _head(self, key: str) -> ObjectInfo:
        return head_object(self._paths.of(key), key, self.location)

    def _list(self, prefix: str, start_after: str | None, limit: int) -> list[ObjectInfo]:
        return list_page(self.root, self.location, prefix, start_after, limit)

    # -- the contract -----------------------------------------------------

    async def get(self, key: str) -> StoredObject:
        if absent(self._paths.of(key)):
            raise NotFound("no such object", location=self.location, key=key)
        read = Read(key)
        self._forked()
        await self._reads.run(read)
        if read.error is not None:
            raise read.error
        assert read.result is not None
        return read.result

    async def get_many(self, keys: Sequence[str]) -> list[StoredObject | None]:
        """All ``keys`` read in one trip to the reading thread (none for the
        keys that name nothing)."""
        results: list[StoredObject | None] = [None] * len(keys)
        present = [i for i, key in enumerate(keys) if not absent(self._paths.of(key))]
        if not present:
            return results
        read = ReadMany("", keys=[keys[i] for i in present])
        self._forked()
        await self._reads.run(read)
        if read.error is not None:
            raise read.error
        for i, found in zip(present, read.results, strict=True):
            results[i] = found
        return results

    async def head(self, key: str) -> ObjectInfo:
        return await self._run(self._head, key)

    async def put(self, key: str, data: bytes) -> str:
        return _etag_of(await self._write(Write(key, bytes(data))))

    async def put_if_absent(self, key: str, data: bytes) -> str:
        return _etag_of(await self._write(Write(key, bytes(data), "absent")))

    async def put_many_if_absent(self, objects: Sequence[NewObject]) -> list[str | StoreError]:
        """Every create of the call, and of calls made meanwhile, made durable
        with one flush of this process's journal (``journal``, ``creates``):
        not the two flushes of the filesystem a ``put_if_absent`` waits for.

        A call alone (the first of its iteration of the event loop, with no batch
        under way) with a few creates, on a disk that flushes fast, commits
        them on this thread: handing them to the committing thread and back
        would cost the caller more than the flush does (docs/performance.md,
        "One submit at a time"). It blocks the event loop for that flush, as
        long as a callback that does some work would; a slow disk, a big
        call, or calls that arrive together take the committing thread.
        """
        if not objects:
            return []
        self._forked()
        if self._journal.broken:
            return await super().put_many_if_absent(objects)
        writes = [Write(o.key, bytes(o.data), "absent", recovered=_recovered(o)) for o in objects]
        request = Creates("", writes=writes)
        if self._may_create_here(len(writes)) and self._creator.commit_now(request):
            self._journal.checkpoint_soon()
        else:
            await self._creates.run(request)
        if request.error is not None:
            raise request.error
        return [_answer(write) for write in writes]

    async def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        return _etag_of(await self._write(Write(key, bytes(data), "match", etag)))

    async def put_parts(
        self, key: str, parts: Parts, *, if_absent: bool = False, if_match: str | None = None
    ) -> str:
        """The buffers written to the object's file one after another, never
        joined; committed in this process (a batch sent to the commit process
        would copy them)."""
        if if_absent:
            return _etag_of(await self._write(Write(key, parts, "absent")))
        if if_match is not None:
            return _etag_of(await self._write(Write(key, parts, "match", if_match)))
        return _etag_of(await self._write(Write(key, parts)))

    async def get_split(self, key: str, splitter: Splitter) -> SplitObject:
        """An object at most ``SPLIT_LOOK`` long is read as ``get`` reads it;
        a longer one's large piece is read from the file straight into its
        own allocation."""
        path = self._paths.of(key)
        try:
            size = os.lstat(path).st_size
        except OSError:
            size = 0  # (the read says what is wrong)
        if size <= SPLIT_LOOK:
            stored = await self.get(key)
            return split_in_memory(key, stored.data, stored.etag, splitter)
        # Handed over in a box, not as the executor future's result: a
        # finished future can outlive the read (in a handle of the loop not
        # yet collected), and with it the piece, the value's size again.
        box: list[SplitObject] = []
        await self._run(lambda: box.append(read_split(path, key, self.location, splitter)))
        return box.pop()

    async def delete(self, key: str, *, if_match: str | None = None) -> None:
        if if_match is None:
            await self._write(Write(key, None))
        else:
            await self._write(Write(key, None, "match", if_match))

    async def list(
        self,
        prefix: str = "",
        *,
        start_after: str | None = None,
        limit: int = DEFAULT_PAGE_SIZE,
    ) -> list[ObjectInfo]:
        return await self._run(self._list, prefix, start_after, limit)

    async def scan(
        self,
        prefix: str = "",
        *,
        start_after: str | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> AsyncIterator[ObjectInfo]:
        """Every object under ``prefix`` in key order, from one walk of the
        tree handed over a page at a time. (Listing page after page would
        read and sort a whole directory again for every page: a scan of a
        directory of N files would cost N * N / page_size.)"""
        walk = objects_under(self.root, self.location, prefix, start_after)
        try:
            while True:
                page = await self._run(next_page, walk, max(1, page_size), self.location)
                for info in page:
                    yield info
                if len(page) < page_size:
                    return
        finally:
            # (still running in a pool thread if we were cancelled mid-page:
            # then it is closed when collected)
            with contextlib.suppress(ValueError):
                walk.close()


def _answer(write: Write) -> str | StoreError:
    """A create's etag, or the StoreError that refused it (anything else is a bug: raised)."""
    if write.error is None:
        return _etag_of(write.result)
    if isinstance(write.error, StoreError):
        return write.error
    raise write.error


def _has_parts(writes: list[Write]) -> bool:
    return any(isinstance(write.data, Parts) for write in writes)


def _etag_of(result: str | None) -> str:
    assert result is not None, "a committed put has an etag"
    return result


def _recovered(obj: NewObject) -> bytes | None:
    """What a recovery writes back for ``obj`` (None: its data)."""
    return obj.recovered if isinstance(obj, RecoverableObject) else None

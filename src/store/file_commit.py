"""Group commit for the FileStore: writes from many tasks, made durable together.

A durable write on a local disk costs one or two flushes, and on the VMs and
SSDs this project runs on a flush costs about the same for one file as for a
hundred. So the FileStore does not flush per write: writes queue here, and
one thread at a time takes everything queued and commits it as a batch
(``FileStore._commit``: two ``syncfs`` calls for the whole batch on Linux).
While a batch is on the disk the next one gathers, so the batch size follows
the load by itself: a lone write pays for its own flush, as before; under
load a flush covers as many writes as arrived during the previous one.

This module holds the queue (``Batcher``), what is queued (``Write``), and
the ``syncfs`` call; what a commit does to the files is the FileStore's.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

MAX_BATCH = 256
"""Writes committed together at most: bounds how long a batch holds its locks."""


@dataclass(eq=False, slots=True)
class Write:
    """One mutation of one key, and, once committed, what became of it."""

    key: str
    data: bytes | None  # None: delete the key
    condition: Literal["none", "absent", "match"] = "none"
    etag: str | None = None
    # What the commit found and did, and the answer for the caller:
    path: str = ""
    current: os.stat_result | None = None
    tmp: str | None = None
    stat: os.stat_result | None = None
    result: str | None = None
    error: BaseException | None = field(default=None, repr=False)


# -- syncfs -----------------------------------------------------------------


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
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- the queue ----------------------------------------------------------------

_Waiter = tuple[Write, "asyncio.Future[None]", asyncio.AbstractEventLoop]


class Batcher:
    """Queues writes from any event loop (or thread) and commits them in batches.

    At most one batch is committed at a time per store, on a pool thread
    started when the first write arrives and ending when the queue is empty.
    Two writes to one key never share a batch: the later one waits for the
    next, so it sees the first one's result (as it would have in sequence).
    """

    def __init__(
        self,
        commit: Callable[[list[Write]], None],
        start: Callable[[Callable[[], None]], object],
    ) -> None:
        self._commit = commit
        self._start = start
        self._lock = threading.Lock()
        self._queue: list[_Waiter] = []
        self._draining = False

    async def run(self, write: Write) -> None:
        """Queue ``write`` and return once its batch is committed (its result or
        error is then on it). Cancelling the caller does not unqueue it."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        with self._lock:
            self._queue.append((write, done, loop))
            start, self._draining = not self._draining, True
        if start:
            try:
                self._start(self._drain)
            except BaseException:
                with self._lock:
                    self._draining = False
                raise
        await asyncio.shield(done)

    def _take(self) -> list[_Waiter]:
        with self._lock:
            batch: list[_Waiter] = []
            later: list[_Waiter] = []
            keys: set[str] = set()
            for item in self._queue:
                key = item[0].key
                if key in keys or len(batch) >= MAX_BATCH:
                    later.append(item)
                else:
                    keys.add(key)
                    batch.append(item)
            self._queue = later
            if not batch:
                self._draining = False
            return batch

    def _drain(self) -> None:
        while batch := self._take():
            writes = [write for write, _, _ in batch]
            try:
                self._commit(writes)
            except BaseException as exc:  # a bug or an interrupt: fail the batch, loudly
                for write in writes:
                    if write.error is None and write.result is None:
                        write.error = exc
            by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
            for _, done, loop in batch:
                by_loop.setdefault(loop, []).append(done)
            for loop, futures in by_loop.items():
                # (a closed loop raises RuntimeError: nobody waits there any more)
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(_wake, futures)


def _wake(futures: list[asyncio.Future[None]]) -> None:
    for done in futures:
        if not done.done():
            done.set_result(None)

"""Calls on the database from many tasks, served together on a thread of their own.

A SQLite call takes microseconds; handing it to a thread and hearing back
on the event loop costs more, and a durable commit costs about as much for
one write as for a hundred. So calls queue here, and a thread takes every
call queued and serves them as one batch (``serve``: the writes in one
transaction with one commit), then wakes their callers with one call into
each event loop. While a batch is served the next one gathers, so a batch
grows with the load by itself, and a lone call is served at once.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..callers import serve_all, tell
from ..errors import StoreError

MAX_BATCH = 256
"""Calls served together at most: bounds how long one batch holds the write
lock (other processes wait on it) and its callers."""


@dataclass(eq=False, slots=True)
class SqlCall:
    """``fn(connection, *args)``, and once served what it returned or raised."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    key: str | None = None
    """The object it is about, for errors."""
    result: Any = None
    error: BaseException | None = field(default=None, repr=False)


Serve = Callable[[list[SqlCall]], None]
_Queued = tuple[Sequence[SqlCall], "asyncio.Future[None]", asyncio.AbstractEventLoop]


class SqlBatcher:
    """Serves calls in batches with ``serve``, on a thread started with the
    first call that waits for the next between batches (waking a waiting
    thread costs the event loop less than a pool's ``submit``)."""

    def __init__(self, serve: Serve, name: str) -> None:
        self._serve = serve
        self._name = name
        self._lock = threading.Lock()
        self._wakeup = threading.Lock()  # held while the thread waits; released to wake it
        self._wakeup.acquire()
        self._queue: deque[_Queued] = deque()
        self._thread: threading.Thread | None = None
        self._idle = False
        self._stopping = False

    async def run(self, calls: Sequence[SqlCall]) -> None:
        """Queue ``calls`` (served in order, in one batch) and return once
        they are served. Cancelling the caller does not unqueue them."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        with self._lock:
            self._queue.append((calls, done, loop))
            self._stopping = False
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self._name, daemon=True)
                self._thread.start()
            elif self._idle:
                self._idle = False
                self._wakeup.release()
        await done

    def stop(self) -> threading.Thread | None:
        """Let the thread end once the queue is empty; the thread, to join."""
        with self._lock:
            self._stopping = True
            if self._idle:
                self._idle = False
                self._wakeup.release()
            return self._thread

    def _take(self) -> list[_Queued] | None:
        """The next batch, once there is one; None when the thread is to end."""
        while True:
            with self._lock:
                if self._queue:
                    batch: list[_Queued] = [self._queue.popleft()]
                    count = len(batch[0][0])
                    while self._queue and count + len(self._queue[0][0]) <= MAX_BATCH:
                        batch.append(self._queue.popleft())
                        count += len(batch[-1][0])
                    return batch
                if self._stopping:
                    self._thread = None
                    return None
                self._idle = True
            self._wakeup.acquire()

    def _work(self) -> None:
        while batch := self._take():
            serve_all(self._serve, [call for queued in batch for call in queued[0]])
            tell((done, loop) for _, done, loop in batch)


def call(conn: sqlite3.Connection, one: SqlCall) -> None:
    """Make ``one`` on ``conn``: its result, or the StoreError (or a failed
    stream's ValueError) it met as its error; a database error is raised."""
    try:
        one.result = one.fn(conn, *one.args)
    except (StoreError, ValueError) as exc:
        one.error = exc

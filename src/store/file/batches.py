"""Group commit for the FileStore: writes from many tasks, made durable together.

A durable write on a local disk costs one or two flushes, and on an SSD a
flush costs about as much for one file as for many. So the FileStore does
not flush per write: writes queue here, and one thread at a time takes
everything queued and commits it as a batch (``Committer.commit``: two
``syncfs`` calls for the whole batch on Linux).
While a batch is on the disk the next one gathers, so the batch size follows
the load by itself: a lone write pays for its own flush, as before; under
load a flush covers as many writes as arrived during the previous one.

Reads go through a queue of their own, served one batch at a time by one
thread, for the same reason in the other direction: handing each small read
to a thread pool and back costs the event loop more than the read does, and
a batch wakes the loop once.

This module holds the queue (``Batcher``) and what is queued (``Write``,
``Read``); what a commit does to the files is in ``commit``.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

from ..base import StoredObject
from ..callers import serve_all, tell
from ..parts import Parts

MAX_BATCH = 256
"""Requests served together at most: bounds how long one batch takes."""


@dataclass(eq=False, slots=True)
class Request:
    """One queued operation on one key; the batch sets ``error`` if it failed."""

    key: str
    error: BaseException | None = field(default=None, repr=False, kw_only=True)


@dataclass(eq=False, slots=True)
class Read(Request):
    result: StoredObject | None = None


@dataclass(eq=False, slots=True)
class ReadMany(Request):
    """Reads of ``get_many``, served together; None where a key has no object.
    ``key`` is unused."""

    keys: list[str] = field(default_factory=list)
    results: list[StoredObject | None] = field(default_factory=list)


@dataclass(eq=False, slots=True)
class Write(Request):
    """One mutation of one key, and, once committed, what became of it."""

    data: bytes | Parts | None  # None: delete the key (Parts: a body of several buffers)
    condition: Literal["none", "absent", "match"] = "none"
    etag: str | None = None
    recovered: bytes | None = None  # a journaled create's bytes for a recovery (None: data)
    # What the commit found and did, and the answer for the caller:
    path: str = ""
    tmp: str | None = None
    stat: os.stat_result | None = None
    result: str | None = None  # the new etag


@dataclass(eq=False, slots=True)
class Creates(Request):
    """Creates of ``put_many_if_absent``, made durable together by the journal
    (``creates``); each write gets its own result or error. ``key`` is unused."""

    writes: list[Write] = field(default_factory=list)


# -- the queue ----------------------------------------------------------------

R = TypeVar("R", bound=Request)


class Batcher(Generic[R]):
    """Queues requests from any event loop (or thread) and serves them in batches.

    At most one batch is served at a time per queue, on a pool thread started
    when the first request arrives and ending when the queue is empty. With
    ``distinct_keys``, two requests for one key never share a batch: the later
    one waits for the next, so it sees the first one's effect (as it would
    have in sequence). ``on_idle`` is called on that thread once the queue
    is empty (a request arriving meanwhile starts a thread of its own).
    """

    def __init__(
        self,
        serve: Callable[[list[R]], None],
        start: Callable[[Callable[[], None]], object],
        *,
        distinct_keys: bool,
        on_idle: Callable[[], None] | None = None,
    ) -> None:
        self._serve = serve
        self._start = start
        self._distinct = distinct_keys
        self._on_idle = on_idle
        self._lock = threading.Lock()
        self._queue: list[tuple[R, asyncio.Future[None], asyncio.AbstractEventLoop]] = []
        self._draining = False  # a thread is taking batches
        self._serving = False  # a batch is being served

    async def run(self, request: R) -> None:
        """Queue ``request`` and return once its batch is served (its result or
        error is then on it). Cancelling the caller does not unqueue it."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        with self._lock:
            self._queue.append((request, done, loop))
            start, self._draining = not self._draining, True
        if start:
            try:
                self._start(self._drain)
            except BaseException:
                with self._lock:
                    self._draining = False
                raise
        await done  # (cancelling the caller cancels ``done``; the request goes ahead)

    def idle(self) -> bool:
        """Whether no batch is being served or waiting (a hint: another thread
        may queue a request at once)."""
        return not self._serving and not self._queue

    def _take(self) -> list[tuple[R, asyncio.Future[None], asyncio.AbstractEventLoop]]:
        with self._lock:
            if not self._distinct:
                batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
            else:
                batch, later, keys = [], [], set()
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
            self._serving = bool(batch)
            return batch

    def _drain(self) -> None:
        while batch := self._take():
            serve_all(self._serve, [request for request, _, _ in batch])
            self._serving = False  # (before the callers hear: one resumed finds it idle)
            tell((done, loop) for _, done, loop in batch)
        if self._on_idle is not None:
            self._on_idle()

"""Requests from many tasks, served together: one transaction, one wake of the loop.

A SQLite call is fast (microseconds) next to what it costs to hand it to a
thread and hear back on the event loop, and a durable commit costs about as
much for one write as for a hundred. So requests queue here, and one thread
takes everything queued and serves it as a batch (the writes in one
transaction with one commit); the callers are then woken with one call into
each event loop. While a batch is
served the next one gathers, so the batch size follows the load by itself:
a lone request is served at once, and under load one commit covers what
arrived during the previous one.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

MAX_BATCH = 256
"""Requests served together at most: bounds how long one batch holds the
database's write lock (other processes wait on it) or its callers."""


@dataclass(eq=False, slots=True)
class Request:
    """One queued operation; serving it sets ``error`` if it failed."""

    error: BaseException | None = field(default=None, repr=False, kw_only=True)


R = TypeVar("R", bound=Request)

_Queued = tuple[Sequence[R], "asyncio.Future[None]", asyncio.AbstractEventLoop]


class Batcher(Generic[R]):
    """Queues requests from any event loop and serves them in batches, one
    batch at a time, on a thread of its own (started with the first request,
    waiting for the next one between batches: handing work to a waiting
    thread costs the event loop less than a pool's ``submit``)."""

    def __init__(self, serve: Callable[[list[R]], None], name: str) -> None:
        self._serve = serve
        self._name = name
        self._lock = threading.Lock()
        self._wakeup = threading.Lock()
        """Held while the thread has nothing to do; released to wake it."""
        self._wakeup.acquire()
        self._queue: deque[_Queued[R]] = deque()
        self._thread: threading.Thread | None = None
        self._idle = False  # the thread waits for a request
        self._stopping = False

    async def run(self, requests: Sequence[R]) -> None:
        """Queue ``requests`` (served in order, in one batch) and return once
        they are served: each one's result or error is then on it.
        Cancelling the caller does not unqueue them."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        with self._lock:
            self._queue.append((requests, done, loop))
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

    def _take(self) -> list[_Queued[R]] | None:
        """The next batch, once there is one; None when the thread is to end."""
        while True:
            with self._lock:
                if self._queue:
                    break
                if self._stopping:
                    self._thread = None
                    return None
                self._idle = True
            self._wakeup.acquire()  # (released by the next request, or ``stop``)
        with self._lock:
            batch: list[_Queued[R]] = []
            count = 0
            while self._queue and (not batch or count + len(self._queue[0][0]) <= MAX_BATCH):
                item = self._queue.popleft()
                batch.append(item)
                count += len(item[0])
            return batch

    def _work(self) -> None:
        while batch := self._take():
            requests = [request for queued in batch for request in queued[0]]
            try:
                self._serve(requests)
            except BaseException as exc:  # a bug or an interrupt: fail the batch, loudly
                for request in requests:
                    if request.error is None:
                        request.error = exc
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

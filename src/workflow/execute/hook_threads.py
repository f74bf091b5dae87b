"""The threads plain ``on_settled`` hooks run in: :class:`HookThreads`.

Not the job threads: a hook that never returns (an HTTP call with no
timeout) would keep one of those for good, and after ``concurrency`` such
hooks no synchronous job would start again. Each hook gets a daemon thread
of its own, so one still running when the process ends does not hold the
interpreter at exit; and at most ``limit`` run at once, so hooks that never
return cannot pile up threads without end: a hook past the limit waits for
a place (within its timeout, which its caller keeps).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import threading
from collections.abc import Callable
from typing import Any, TypeVar

R = TypeVar("R")

HOOK_THREADS = 32
"""Plain hooks that run at once in a process (a hook still running past
its timeout keeps its place until it returns)."""


class HookThreads:
    """Daemon threads, named ``<name>-hook``, at most ``limit`` at once;
    safe to call from any event loop."""

    def __init__(self, limit: int = HOOK_THREADS, *, name: str = "stepstone") -> None:
        if limit < 1:
            raise ValueError(f"hooks need at least one thread, got {limit}")
        self._free = limit
        self._name = f"{name}-hook"
        self._lock = threading.Lock()
        self._waiters: collections.deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = (
            collections.deque()
        )

    async def call(self, fn: Callable[..., R], /, *args: Any) -> R:
        """``fn(*args)`` in a thread of its own, with the caller's context
        variables. Cancelling the call stops waiting for it; the thread
        runs on to its end, unobserved."""
        loop = asyncio.get_running_loop()
        await self._take(loop)
        done: asyncio.Future[R] = loop.create_future()
        context = contextvars.copy_context()

        def body() -> None:
            try:
                result = context.run(fn, *args)
            except BaseException as exc:  # handed to the caller
                self._give()
                _deliver(loop, done, None, exc)
            else:
                self._give()
                _deliver(loop, done, result, None)

        try:
            threading.Thread(target=body, name=self._name, daemon=True).start()
        except BaseException:
            self._give()
            raise
        return await done

    async def _take(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            if self._free > 0:
                self._free -= 1
                return
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append((loop, waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            with self._lock:
                try:
                    self._waiters.remove((loop, waiter))
                    handed = False
                except ValueError:
                    handed = True  # a place was handed over as it was cancelled
            if handed:
                self._give()
            raise

    def _give(self) -> None:
        """A place is free: hand it to the first waiter whose loop still runs."""
        with self._lock:
            while self._waiters:
                loop, waiter = self._waiters.popleft()
                try:
                    loop.call_soon_threadsafe(_wake, waiter)
                except RuntimeError:  # its loop is closed
                    continue
                return
            self._free += 1


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _deliver(
    loop: asyncio.AbstractEventLoop,
    done: asyncio.Future[Any],
    result: object,
    error: BaseException | None,
) -> None:
    def settle() -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)

    with contextlib.suppress(RuntimeError):  # the loop closed while the hook ran
        loop.call_soon_threadsafe(settle)

"""The threads synchronous job code runs in: :class:`JobThreads`.

Every synchronous handler runs in one, and so does synchronous work a
handler starts of its own (a job's ``def run``, a plain hook), each call
with its caller's context variables, as :func:`asyncio.to_thread` would. But
on a pool of their own, one thread per unit of the worker's capacity: the
default executor has min(32, cores + 4) threads, which would quietly cap
synchronous work below the worker's ``concurrency`` on a small machine.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

R = TypeVar("R")


class JobThreads:
    """A pool of ``size`` threads, named ``<name>_<n>``, made at the first
    :meth:`call` (so a size changed before then sizes it: :meth:`resize`)
    and again at the first call after a :meth:`shutdown`."""

    def __init__(self, size: int, *, name: str = "stepstone-job") -> None:
        if size < 1:
            raise ValueError(f"a pool has at least one thread, got {size}")
        self._size = size
        self._name = name
        self._pool: ThreadPoolExecutor | None = None

    @property
    def size(self) -> int:
        """How many threads synchronous jobs and steps may use at once."""
        return self._size

    async def call(self, fn: Callable[..., R], /, *args: Any) -> R:
        """``fn(*args)`` in one of the threads, with the caller's context variables."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._size, thread_name_prefix=self._name)
        call = functools.partial(contextvars.copy_context().run, fn, *args)
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def resize(self, size: int) -> None:
        """Have ``size`` threads from the next call on (a worker whose
        capacity changed before it started: the CLI's ``--concurrency``).
        Calls made before finish on the threads they have."""
        if size < 1:
            raise ValueError(f"a pool has at least one thread, got {size}")
        if size == self._size:
            return
        self._size = size
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)

    def shutdown(self, wait: bool = False) -> None:
        """Let the threads go once their calls finish, dropping calls not yet
        started; with ``wait``, return only then. A call after this makes a
        new pool. Threads of calls that were cut short (a timed-out or
        drained synchronous handler) cannot be stopped: without ``wait``
        they finish on their own, unobserved."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=wait, cancel_futures=True)

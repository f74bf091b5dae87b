"""Yields to the event loop for submits: a loop of awaited submits must not
hold the loop.

On files a submit's writes are usually made on the caller's thread, without
waiting, and a coroutine that never waits never lets anything else run: a
loop of awaited submits would hold the loop until its last submit, the jobs
it handed to this process's worker, lease renewals and every other task
waiting behind it. So the submit that ends a stretch of ``YIELD_EVERY``
during which the loop did not run yields to it once before it returns.
Not every submit: on a fast store a yield costs about what a submit does
(docs/performance.md has the figures).
"""

from __future__ import annotations

import asyncio

YIELD_EVERY = 0.001
"""Seconds submits may hold the event loop without yielding to it."""


class LoopYields:
    """Yields to the event loop once submits have held it ``YIELD_EVERY``.
    A stretch starts with a submit while the loop has run since the last one;
    a callback it schedules ends it when the loop runs again."""

    __slots__ = ("_loop", "_since")

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._since = 0.0  # when the stretch on self._loop began

    def begin(self) -> None:
        """A submit starts."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop, self._since = loop, loop.time()
            loop.call_soon(self._ran, loop)

    def _ran(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._loop is loop:
            self._loop = None

    async def end(self) -> None:
        """A submit is done: yield to the loop if the stretch is long enough."""
        loop = self._loop
        if loop is not None and loop.time() - self._since >= YIELD_EVERY:
            await asyncio.sleep(0)

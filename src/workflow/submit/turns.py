"""Event-loop turns for submits: a loop of awaited submits must not hold the loop.

On files a submit's writes are usually made on the caller's thread, without
waiting, and a coroutine that never waits never lets anything else run: a
loop of awaited submits would hold the loop until its last submit, the jobs
it handed to this process's worker, lease renewals and every other task
waiting behind it. So the submit that ends a stretch of ``TURN_EVERY``
during which the loop did not run gives it one turn before it returns.
Not every submit: on a fast store a turn costs about what a submit does
(docs/performance.md has the figures).
"""

from __future__ import annotations

import asyncio

TURN_EVERY = 0.001
"""Seconds submits may hold the event loop without a turn."""


class Turns:
    """Gives the event loop a turn once submits have held it ``TURN_EVERY``.
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
        """A submit is done: give the loop a turn if the stretch is long enough."""
        loop = self._loop
        if loop is not None and loop.time() - self._since >= TURN_EVERY:
            await asyncio.sleep(0)

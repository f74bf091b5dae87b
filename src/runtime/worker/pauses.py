"""How the worker's loop waits: a sleep anything can cut short
(:class:`Wakeup`), the shortest one it takes, and the growing pause after
queue errors.

Pauses are real seconds, never the injected clock's: they are about this
process's liveness and the queue's load, not about when jobs are due.
"""

from __future__ import annotations

import asyncio
import contextlib
import math

MIN_SLEEP = 0.005
"""Shortest idle sleep, so a job due 'now' that a claim did not return (its
kind is at its cap) cannot spin the loop."""
QUEUE_ERROR_BACKOFF = 0.1
"""First pause after a queue error; doubles per consecutive error."""
QUEUE_ERROR_BACKOFF_POLLS = 10.0
"""The pause after queue errors is capped at this many poll intervals."""


def error_pause(errors_before: int, poll_interval: float) -> float:
    """The pause after a queue error that ``errors_before`` errors in a row
    preceded: from the shorter of QUEUE_ERROR_BACKOFF and a poll interval,
    doubling, to at most QUEUE_ERROR_BACKOFF_POLLS poll intervals."""
    exponent = min(max(errors_before, 0), 30)
    cap = poll_interval * QUEUE_ERROR_BACKOFF_POLLS
    return min(min(QUEUE_ERROR_BACKOFF, poll_interval) * 2.0**exponent, cap)


class Wakeup:
    """The loop's sleep on ``loop``, and what ends it early: :meth:`set`,
    safe from any thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._event = asyncio.Event()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def set(self) -> None:
        loop = self._loop
        if loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._event.set()
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._event.set)

    def clear(self) -> None:
        self._event.clear()

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` (inf: with no end), or until :meth:`set`."""
        try:
            async with asyncio.timeout(None if math.isinf(seconds) else seconds):
                await self._event.wait()
        except TimeoutError:
            pass

"""Time, injectable: every decision the runtime makes about time reads a Clock.

Run-at, lease expiry, backoff and retention compare against ``clock.now()``
(epoch seconds), so a test can move time with a FakeClock instead of
sleeping. Waiting itself is still real (asyncio), bounded by poll intervals;
a FakeClock wakes waiting loops when it is advanced, so a test that moves
the clock past a run-at time sees the job run at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from .listeners import Listeners


@runtime_checkable
class Clock(Protocol):
    """Anything with ``now() -> float`` epoch seconds."""

    def now(self) -> float:
        """The time now, in seconds since the epoch."""


class SystemClock:
    """The wall clock."""

    def now(self) -> float:
        """``time.time()``."""
        return time.time()

    def __repr__(self) -> str:
        return "SystemClock()"


class FakeClock:
    """A clock that moves only when told to.

    Loops that wait on time register a wake-up with :meth:`subscribe`; each
    :meth:`advance` or :meth:`set` calls them, so they re-check what is due.
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = float(start)
        self._listeners = Listeners()

    def now(self) -> float:
        """The time this clock was set to, in seconds since the epoch."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the time on by ``seconds`` (not backwards: ``ValueError``), waking
        what waits on it."""
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self.set(self._now + seconds)

    def set(self, when: float) -> None:
        """Set the time to ``when`` (epoch seconds), waking what waits on it."""
        self._now = float(when)
        self._listeners.call()

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` whenever the time changes; returns an unsubscribe function."""
        return self._listeners.add(listener)

    def __repr__(self) -> str:
        return f"FakeClock({self._now!r})"


def subscribe(clock: Clock, listener: Callable[[], None]) -> Callable[[], None]:
    """Register ``listener`` for time changes if the clock supports it (a no-op otherwise)."""
    hook = getattr(clock, "subscribe", None)
    if hook is None:
        return lambda: None
    unsubscribe: Callable[[], None] = hook(listener)
    return unsubscribe

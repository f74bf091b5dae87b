"""Who to call when something happens in this process: work became available
in a queue, a FakeClock's time changed.

A worker subscribes to both so that an idle loop wakes at once instead of at
its next poll. Each subscription returns the function that ends it.
"""

from __future__ import annotations

from collections.abc import Callable


class Listeners:
    """Functions of no arguments, called in the order they were added."""

    def __init__(self) -> None:
        self._listeners: list[Callable[[], None]] = []

    def add(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` from now on; returns the function that stops it."""
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    def call(self, on_error: Callable[[Exception], None] | None = None) -> None:
        """Call each listener (those added or removed meanwhile are not
        affected). What one raises propagates, or goes to ``on_error`` and
        the rest are called."""
        for listener in list(self._listeners):
            if on_error is None:
                listener()
                continue
            try:
                listener()
            except Exception as exc:
                on_error(exc)

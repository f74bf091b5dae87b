"""What ``stepstone show`` and the web view say of a debounced run: its
window as its key's object holds it now (the queue record's wait says
what it was when the run last looked)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from stepstone.limits.shared import SharedObject
from stepstone.records import debounce_windows as rules
from stepstone.records.layout import Layout
from stepstone.runtime.clock import SystemClock
from stepstone.runtime.queue import JobRecord
from stepstone.runtime.store_queue import CorruptRecord
from stepstone.store import ObjectStore
from stepstone.submit.debouncing import debounce_digest


@dataclass(frozen=True, slots=True)
class DebounceShown:
    """A debounced run's window, as ``show`` reads it."""

    object_key: str
    """Where the key's windows are stored."""
    key: str | None
    """The debounce key (None: its object is gone)."""
    window: rules.Window | None
    """The run's window (None: the run took its input, and dropped it)."""
    unreadable: str | None = None
    """Why the key's object would not decode."""

    def describe(self, now: float) -> str:
        """One line for people: until when, after how many submits."""
        if self.unreadable is not None:
            return f"cannot read {self.object_key}: {self.unreadable}"
        window = self.window
        if window is None:
            return "its window is closed: the run took its last submit's input"
        submits = "1 submit" if window.count == 1 else f"{window.count} submits"
        times = f"{submits}, the first at {_when(window.first)}, the last at {_when(window.last)}"
        if window.closed:
            return f"started with its last submit's input ({times})"
        state = "until" if now < window.due else "due since"
        return f"{state} {_when(window.due)} ({times})"


async def read_debounce(
    store: ObjectStore, layout: Layout, queued: JobRecord
) -> DebounceShown | None:
    """The window of ``queued``'s run if it is a debounced run (None if not)."""
    digest = debounce_digest(queued.headers)
    if digest is None:
        return None
    key = layout.debounce(digest)
    reader = SharedObject(
        store, key, SystemClock(), to_fields=rules.to_fields, from_fields=rules.from_fields
    )
    try:
        state = await reader.read()
    except CorruptRecord as exc:
        return DebounceShown(key, None, None, unreadable=str(exc))
    if state is None:
        return DebounceShown(key, None, None)
    return DebounceShown(key, state.key, state.find(queued.id))


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")

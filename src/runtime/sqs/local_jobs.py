"""What this process remembers of job ids, for when there is no id store.

Without an id store nothing outside this process knows which ids are live
or cancelled, so the queue keeps its own bounded memory: the jobs it
enqueued (with their messages) or holds and has not seen settled, for
per-process dedup and ``get``; and the ids cancelled here, so a claim here
drops their messages when they show up. With an id store the markers answer
fleet-wide, and this memory only spares a lookup.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Container

from .message import JobMessage


class LocalJobs:
    """Live and cancelled ids, the oldest forgotten first past ``max_ids``
    (each) or ``max_bytes`` of remembered payloads."""

    def __init__(self, *, max_ids: int, max_bytes: int) -> None:
        self.max_ids = max_ids
        self.max_bytes = max_bytes
        self._live: OrderedDict[str, JobMessage | None] = OrderedDict()
        self._live_bytes = 0
        self._cancelled: OrderedDict[str, None] = OrderedDict()

    def is_live(self, run_id: str) -> bool:
        return run_id in self._live

    def live(self, run_id: str) -> JobMessage | None:
        """The job's message as this process last sent it, if it remembers one."""
        return self._live.get(run_id)

    def remember(self, run_id: str, message: JobMessage | None = None) -> None:
        """The job is live: with ``message``, as that message says; without,
        keep what is known (a delivery of it was received here)."""
        if run_id in self._live:
            if message is None:
                self._live.move_to_end(run_id)
                return
            self.forget(run_id)
        self._live[run_id] = message
        self._live_bytes += _size(message)
        while self._live and (len(self._live) > self.max_ids or self._live_bytes > self.max_bytes):
            self.forget(next(iter(self._live)))

    def forget(self, run_id: str) -> None:
        """The job is settled (or no longer worth remembering)."""
        self._live_bytes -= _size(self._live.pop(run_id, None))

    @property
    def cancelled(self) -> Container[str]:
        """The ids cancelled here (and not enqueued or requeued since)."""
        return self._cancelled.keys()

    def cancel(self, run_id: str) -> None:
        self._cancelled[run_id] = None
        while len(self._cancelled) > self.max_ids:
            self._cancelled.popitem(last=False)
        self.forget(run_id)

    def uncancel(self, run_id: str) -> None:
        """The id is live again (enqueued, or requeued from the dead)."""
        self._cancelled.pop(run_id, None)


def _size(message: JobMessage | None) -> int:
    return 0 if message is None or message.payload is None else len(message.payload)

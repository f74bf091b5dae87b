"""AttemptScope: one attempt's bookkeeping, shared by its JobContext, its
waits, its limits and the attempt runner.

It holds what the attempt needs to record as it goes (the run's records, its
incarnation, the memos an earlier claim left, which steps it has called and
how often) and its progress, written at most once a ``PROGRESS_INTERVAL``
and last before the run's outcome, by compare-and-swap, so an attempt whose
lease another worker took over cannot overwrite the new owner's progress.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from stepstone.errors import NonDeterministicReplay
from stepstone.records.layout import Layout
from stepstone.records.run_records import RunRecords
from stepstone.runtime.clock import Clock
from stepstone.runtime.worker import Attempt
from stepstone.store import ObjectStore
from stepstone.submit.submitter import Submitter

log = logging.getLogger("stepstone")

InThread = Callable[..., Awaitable[Any]]
"""``JobThreads.call``: ``await in_thread(fn, *args)`` runs ``fn(*args)`` in
the job thread pool."""

PROGRESS_INTERVAL = 1.0
"""At most one progress write per run per this many seconds; the last value is
always written before the run settles."""


class EventTurn:
    """Concurrent waits for one event name (``asyncio.gather``) take turns
    deciding, in call order (``lock``), so each takes an event the ones
    before it did not. Once one has suspended the run (``suspended``), the
    rest suspend too rather than take an event: the one that suspended
    would take the same event on the next claim."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.suspended = False


class AttemptScope:
    """One attempt's bookkeeping (see the module docstring)."""

    def __init__(
        self,
        *,
        submitter: Submitter,
        state_of: Callable[[type[Any]], Any],
        in_thread: InThread,
        records: RunRecords,
        attempt: Attempt,
        kind: str,
        incarnation: str,
        memo_keys: set[str] | None,
        headers: Mapping[str, str],
        clock: Clock,
        wakes: bool,
        wait_recheck: float,
    ) -> None:
        self.submitter = submitter
        self.state_of = state_of
        self.in_thread = in_thread
        """Runs a plain function in the job thread pool (a sync step's)."""
        self.records = records
        self.store: ObjectStore = records.store
        self.layout: Layout = records.layout
        self.attempt = attempt
        self.kind = kind
        self.incarnation = incarnation
        self.memo_keys = memo_keys
        self.headers = headers
        self.occurrences: dict[str, int] = {}
        self.position = 0
        """The position of the run's last call so far (its history: steps,
        sleeps, event takes, child submits; :mod:`stepstone.records.calls`)."""
        self.diverged: NonDeterministicReplay | None = None
        """Set once a replay's call differed from the recorded one: the
        attempt fails with it, even if the job caught it."""
        self.children = 0
        self.progress: Any = None
        self.progress_written: Any = None
        self.progress_at = 0.0
        self.progress_task: asyncio.Task[None] | None = None
        self.progress_etag: str | None = None
        """This attempt's last progress write (compare-and-swap on it)."""
        self.progress_fenced = False
        """A later claim of the run has written progress: this attempt writes no more."""
        self.replayed: list[str] = []
        self.clock = clock
        self.wakes = wakes
        """Whether the queue wakes a suspended run early (else waits look again)."""
        self.wait_recheck = wait_recheck
        """Longest a waiting run stays suspended before it looks again."""
        self.consumed_events: set[str] = set()
        """The events this attempt's waits took (recorded, or read back)."""
        self._event_turns: dict[str, EventTurn] = {}

    def event_turn(self, name: str) -> EventTurn:
        """The turns of this attempt's waits for event ``name``."""
        return self._event_turns.setdefault(name, EventTurn())

    @property
    def run_id(self) -> str:
        return self.attempt.delivery.id

    def next_position(self) -> int:
        """The position of the run's next call (1 for its first)."""
        self.position += 1
        return self.position

    async def flush_progress(self) -> None:
        if self.progress_task is not None:
            await asyncio.shield(self.progress_task)
        if self.progress is not None and self.progress != self.progress_written:
            await self.write_progress()

    async def write_progress(self) -> None:
        """Write the last progress value, unless a later claim of the run owns
        the record (then log it once and write no more)."""
        if self.progress_fenced:
            return
        value = self.progress
        delivery = self.attempt.delivery
        etag = await self.records.write_progress(
            self.run_id, self.incarnation, delivery.claims, value, self.progress_etag
        )
        if etag is None:
            self.progress_fenced = True
            log.warning(
                "run %s (%s) attempt %d: another worker has taken the run over; "
                "this attempt's progress is not written",
                self.run_id,
                self.kind,
                delivery.attempt,
                extra=log_extra(self),
            )
            return
        self.progress_etag = etag
        self.progress_written = value

    def write_progress_soon(self) -> None:
        """Write the progress in the background, best effort (see ctx.progress)."""
        self.progress_task = asyncio.get_running_loop().create_task(_write_progress(self))


async def _write_progress(run: AttemptScope) -> None:
    try:
        await run.write_progress()
    except Exception as exc:  # progress is best-effort until the final flush
        log.warning("run %s: progress not written: %s", run.run_id, exc, extra=log_extra(run))


def log_extra(run: AttemptScope) -> dict[str, object]:
    return {"run_id": run.run_id, "kind": run.kind, "attempt": run.attempt.delivery.attempt}

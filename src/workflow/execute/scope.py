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
import bisect
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from stepstone.errors import NonDeterministicReplay
from stepstone.execute.branches import Branch, RunTree
from stepstone.records.layout import Layout
from stepstone.records.run_records import RunRecords
from stepstone.runtime.clock import Clock
from stepstone.runtime.suspension import Suspend
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


class StreamState:
    """What an attempt knows of one of its run's streams: the offsets it
    takes next (None until it knows where the stream ends), and whether the
    run closed the stream (:mod:`stepstone.execute.streams`)."""

    def __init__(self) -> None:
        self.next: int | None = None
        """The offset past every item known: the next offset taken, once
        the offsets in :attr:`free` are."""
        self.free: list[int] = []
        """Offsets before :attr:`next` that hold no item (an earlier attempt
        took them and ended before it wrote there), in order: taken first."""
        self.closed = False
        self.lock = asyncio.Lock()
        """Held while the end of the stream is looked for (once an attempt)."""

    def take(self) -> int:
        """The next offset to write at (once :attr:`next` is known)."""
        assert self.next is not None
        if self.free:
            return self.free.pop(0)
        offset = self.next
        self.next += 1
        return offset

    def give_back(self, offset: int) -> None:
        """``offset`` was taken, and not written at: it is free again."""
        if self.next is not None and offset < self.next and offset not in self.free:
            bisect.insort(self.free, offset)

    def taken(self, offset: int) -> None:
        """An item stands at ``offset`` (and at every offset a write walked
        past to get there: :func:`stepstone.execute.streams._place`)."""
        if offset in self.free:
            self.free.remove(offset)
        if self.next is not None and self.next <= offset:
            self.next = offset + 1


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
        tree: RunTree,
        numbered: bool,
        code_version: str,
        attributes: Mapping[str, str],
        replay_of: str | None,
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
        self.tree = tree
        """The attempt's tasks: where each call stands (:mod:`stepstone.execute.branches`)."""
        self.numbered = numbered
        """Calls are numbered in their branch (runs submitted since branches
        existed); else every call takes the run's next position, in the order
        calls start, as runs recorded before replay as they did."""
        self.code_version = code_version
        """This worker's version of the job type's code, recorded in each memo."""
        self.attributes = dict(attributes)
        """The run's attributes so far: those it was submitted with, then
        those its calls of ``ctx.set_attributes`` set (:mod:`stepstone.execute.attributes`)."""
        self.replay_of = replay_of
        """The incarnation this run replays (``runner.replay``), if any."""
        self.made: set[str] = set()
        """The key segments of the calls of the run's history this attempt made."""
        self.suspensions: list[Suspend] = []
        """Every wait of this attempt that suspended the run."""
        self.diverged: NonDeterministicReplay | None = None
        """Set once a replay's call differed from the recorded one: the
        attempt fails with it, even if the job caught it."""
        self.diverged_at: str | None = None
        """The key segment of the memo of the call it diverged at."""
        self.legacy_children = 0
        """Children submitted so far, for the ids of unkeyed children of runs
        recorded before branches existed."""
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
        self.recorded_takes: dict[str, str | None] = {}
        """The events recorded waits took, by their memos' key segments,
        as read ahead of their replay (:mod:`stepstone.execute.durable_waits`)."""
        self._event_locks: dict[str, asyncio.Lock] = {}
        self._streams: dict[str, StreamState] = {}

    def event_lock(self, name: str) -> asyncio.Lock:
        """Held by this attempt's wait for event ``name`` while it decides:
        concurrent waits for one name (``asyncio.gather``) decide one at a
        time, so each takes an event the ones before it did not."""
        return self._event_locks.setdefault(name, asyncio.Lock())

    def stream_state(self, name: str) -> StreamState:
        """What this attempt knows of the run's stream ``name``."""
        return self._streams.setdefault(name, StreamState())

    @property
    def run_id(self) -> str:
        return self.attempt.delivery.id

    def check_going(self) -> None:
        """Raise what stops a call from being made now: the run's divergence,
        once found; CancelledError once the attempt has ended; and, once a
        wait has suspended the run, that suspension (so a branch that has not
        reached it stops at its next call, and one that caught its own goes
        no further: it resumes when the run does)."""
        if self.diverged is not None:
            raise self.diverged  # (a job that caught it goes no further)
        if self.tree.ending:
            stopped = self.attempt.stopped
            why = f"was stopped: {stopped}" if stopped is not None else "has ended"
            raise asyncio.CancelledError(f"this attempt {why}")
        if self.suspensions:
            suspension = min(self.suspensions, key=lambda suspension: suspension.until)
            raise Suspend(suspension.until, suspension.wait)

    def branch_here(self) -> Branch:
        """The branch the next call belongs to: the running task's, for a run
        that numbers calls by branch (:attr:`numbered`), else the root."""
        return self.tree.here() if self.numbered else self.tree.root

    def suspend(self, suspension: Suspend) -> Suspend:
        """Note that a wait suspends the run (raise what this returns): every
        later call of the attempt suspends it too, and it is given back until
        the earliest wake of them all."""
        self.suspensions.append(suspension)
        return suspension

    def suspension(self) -> Suspend | None:
        """What this attempt suspends the run until (None: it does not)."""
        if not self.suspensions:
            return None
        return min(self.suspensions, key=lambda suspension: suspension.until)

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

"""The outcome watch: how a handle learns that its run has ended.

A runner whose worker records a run's outcome hands the record to
:meth:`OutcomeWatch.stands`, which wakes the handles awaiting it here at
once, or keeps it for a handle its submits returned that asks later (a
batch of submits awaited one by one then neither reads nor waits); a handle
made afterwards by id or key reads the record, which an operator may have
changed since (a retry, a replay). Any other run is someone
else's: its handles poll the outcome record, with backoff, and with a budget
of reads per second shared by every waiting handle, so N handles waiting T
seconds cost O(N) reads, not O(N * T).

A run just submitted from a process that runs no worker (an API server's)
is polled by how long its kind's runs took here
(:mod:`stepstone.handles.poll_timing`).

No poll reads the store while this process will hear of the end without
reading (its worker holds the run, or its queue knows the run still waits
here): a handle on a run this process runs costs no reads however long the
run queues and runs.

A run can also end with no outcome to announce it: its queue record no
longer decodes (it will never be claimed), or it was dead-lettered because
its outcome could not be recorded. So every few polls that find nothing, a
waiting handle looks at the run's queue record too, and raises the one
(``CorruptRecord``, naming its key) or ``JobFailed`` with the dead reason.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from stepstone.errors import JobFailed
from stepstone.handles.handle import Submitted
from stepstone.handles.poll_timing import (
    EXPECTED_FIRST,
    IDLE_FIRST_POLL,
    TimeToOutcome,
    next_poll,
)
from stepstone.records.outcome import Outcome, OutcomeRecord
from stepstone.records.run_records import RunRecords
from stepstone.runtime.decision import FailureKind
from stepstone.runtime.queue import LeaseQueue
from stepstone.runtime.status import JobStatus
from stepstone.store import StoreUnavailable

log = logging.getLogger("stepstone")

RECENT_OUTCOMES = 10_000
"""Outcomes this process's worker recorded that no handle has asked for yet,
kept (newest last) so a handle awaited a moment later needs no read."""
RUNNING_POLL_BUDGET = 200.0
"""Outcome polls a second, about, across all the handles waiting in a runner
whose worker runs."""
RUNNING_FIRST_POLL = 0.5
"""Seconds before a handle's first poll in a runner whose worker runs."""
QUEUE_LOOK_EVERY = 5
"""Polls that found no outcome between two looks at the run's queue record."""


class OutcomeWatch:
    """The handles awaiting outcomes in one runner, and the outcomes its worker recorded.

    ``worker_running()`` says whether this process runs a worker now;
    ``heard_here(run_id)`` whether this process will hear of the run's end
    without reading (its worker holds it, or its queue knows it waits).
    """

    def __init__(
        self,
        records: RunRecords,
        queue: LeaseQueue,
        *,
        worker_running: Callable[[], bool],
        heard_here: Callable[[str], bool],
    ) -> None:
        self._records = records
        self._queue = queue
        self._worker_running = worker_running
        self._heard_here = heard_here
        self._waiters: dict[str, list[asyncio.Future[OutcomeRecord]]] = {}
        self._recent: OrderedDict[str, OutcomeRecord | Exception] = OrderedDict()
        self._broken: Exception | None = None
        self._seen = TimeToOutcome()
        self._restarts: dict[str, int] = {}

    def restarted(self, run_id: str) -> None:
        """The run ended, and was started again here (a replay, a retry of a
        dead run): the outcome a handle holds is no longer its answer."""
        self._recent.pop(run_id, None)
        self._restarts[run_id] = self._restarts.get(run_id, 0) + 1

    def restarts(self, run_id: str) -> int:
        """How many times the run was started again here after it ended."""
        return self._restarts.get(run_id, 0)

    def stands(self, record: OutcomeRecord) -> None:
        """The run's outcome ``record`` stands: wake the handles awaiting it
        here, or keep it for a handle that asks soon."""
        self._answer(record.run_id, record)

    def unrecorded(self, run_id: str, error: Exception) -> None:
        """The run ended but its outcome could not be recorded, for ``error``
        (which says why): its waiters here raise it rather than wait for a
        record that will not come."""
        self._answer(run_id, error)

    def store_broken(self, error: Exception) -> None:
        """This runner's worker stopped: the store cannot be used as it
        answers (``error``, a StoreConfigError saying why). Every handle
        awaiting here raises it, now and from now on, rather than wait for
        outcomes nothing will record."""
        self._broken = error
        waiting, self._waiters = self._waiters, {}
        for futures in waiting.values():
            for future in futures:
                if not future.done():
                    future.set_exception(error)

    def _answer(self, run_id: str, answer: OutcomeRecord | Exception) -> None:
        waiters = self._waiters.pop(run_id, None)
        if not waiters:
            self._recent[run_id] = answer
            if len(self._recent) > RECENT_OUTCOMES:
                self._recent.popitem(last=False)
            return
        for future in waiters:
            if future.done():
                continue
            if isinstance(answer, Exception):
                future.set_exception(answer)
            else:
                future.set_result(answer)

    async def wait(
        self,
        run_id: str,
        output: Any,
        *,
        fresh: bool = False,
        input_hash: str | None = None,
        submitted: Submitted | None = None,
    ) -> Outcome[Any]:
        """The outcome, as soon as there is one: woken by this process's
        worker, else polling the record with backoff. ``fresh``: the run was
        just created by this runner's submit, so its record cannot exist yet;
        with a worker running here, the first look waits instead of reading;
        without one, a run ``submitted`` here is polled by how long its
        kind's runs took (module docstring). ``input_hash``, when known, is checked against
        the record read (a record of another input raises CorruptOutcome)."""
        recent = self._recent.pop(run_id, None)
        if input_hash is None and not fresh:
            # A handle made later (``runner.handle``), not by a submit: the
            # run may have been retried or replayed since its end here (by
            # an operator, in another process), so the record is the answer.
            recent = None
        if isinstance(recent, Exception):
            raise recent
        if self._broken is not None and recent is None:
            raise self._broken
        if recent is not None:
            return recent.typed(output, self._records.payloads)
        running = self._worker_running()
        # Without a worker here, the run is someone else's: look soon and
        # often. With one, most runs are this worker's (no reads needed) and
        # polling only catches runs that peers took, so it starts slower.
        delay = RUNNING_FIRST_POLL if running else IDLE_FIRST_POLL
        skip_read = fresh and running
        # A run submitted here for a worker elsewhere: polled by its kind's.
        timing = submitted if fresh and not running else None
        expected = None if timing is None else self._seen.expected(timing.kind)
        if timing is not None and expected is not None:
            first = timing.at + EXPECTED_FIRST * expected - time.monotonic()
            if first > 0:
                skip_read, delay = True, first
        last_miss: float | None = None
        misses = 0
        loop = asyncio.get_running_loop()
        while True:
            if self._broken is not None:
                raise self._broken
            future: asyncio.Future[OutcomeRecord] = loop.create_future()
            self._waiters.setdefault(run_id, []).append(future)
            try:
                record = None
                running = self._worker_running()
                if not (skip_read or (running and self._heard_here(run_id))):
                    record = await self._poll(run_id, input_hash)
                    misses += record is None
                    if record is None and misses % QUEUE_LOOK_EVERY == 0:
                        record = await self._ended_without_outcome(run_id, input_hash)
                    if record is None:
                        last_miss = time.monotonic()
                    elif timing is not None:
                        self._seen.saw(timing, last_miss, time.monotonic())
                skip_read = False
                if record is None:
                    wait = delay
                    if running:
                        # Spread polls so all handles together read about
                        # RUNNING_POLL_BUDGET outcomes a second.
                        wait = max(delay, len(self._waiters) / RUNNING_POLL_BUDGET)
                    # asyncio.wait leaves the future alone on a timeout and,
                    # unlike wait_for(shield(...)), starts no task per wait.
                    await asyncio.wait((future,), timeout=wait)
                    if future.done() and not future.cancelled():
                        record = future.result()
                if record is not None:
                    return record.typed(output, self._records.payloads)
            finally:
                self._forget(run_id, future)
            elapsed = None if timing is None else time.monotonic() - timing.at
            delay = next_poll(delay, expected, elapsed)

    async def _poll(self, run_id: str, input_hash: str | None) -> OutcomeRecord | None:
        try:
            return await self._records.outcome(run_id, input_hash)
        except StoreUnavailable as exc:
            # Waiting is polling: a read the store failed is one more poll
            # that learned nothing (the caller's timeout bounds it).
            log.debug("run %s: outcome not readable yet: %s", run_id, exc)
            return None

    async def _ended_without_outcome(
        self, run_id: str, input_hash: str | None
    ) -> OutcomeRecord | None:
        """Look at the run's queue record: raise if the run has ended without
        an outcome (its record does not decode: CorruptRecord; it is dead and
        no outcome came: JobFailed); else None (or the outcome, come meanwhile)."""
        try:
            queued = await self._queue.get(run_id)
        except StoreUnavailable:
            return None
        if queued is None or queued.status is not JobStatus.DEAD:
            return None
        # The outcome is written before the dead letter: none now, none ever.
        record = await self._poll(run_id, input_hash)
        if record is not None:
            return record
        reason = queued.dead_reason or "dead-lettered with no outcome recorded"
        kind, _, message = reason.partition(": ")
        if kind not in set(FailureKind):
            kind, message = FailureKind.UNKNOWN, reason
        raise JobFailed(run_id, kind, message)

    def _forget(self, run_id: str, future: asyncio.Future[OutcomeRecord]) -> None:
        waiters = self._waiters.get(run_id)
        if waiters is not None and future in waiters:
            waiters.remove(future)
            if not waiters:
                del self._waiters[run_id]
        future.cancel()

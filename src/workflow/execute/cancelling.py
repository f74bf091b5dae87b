"""Cancelling a run: ``runner.cancel`` and ``handle.cancel()``.

A cancel records the run's outcome as cancelled (create-if-absent: a run
that ended first keeps its outcome), then drops its queue record and wakes
the runs waiting for it (its parent, the runs that joined it). An attempt
running in this process stops at once; one running elsewhere stops within
``cancel_check`` seconds (its worker reads the run's outcome) or at its next
lease renewal. The handles awaiting the run here are told, and the run's
``on_settled`` hooks run here, in the cancelling process.

A cancel takes the run's live children with it (and theirs), unless told to
leave them: each child a run creates is recorded under it before it is
enqueued (:mod:`stepstone.records.family`), and the cancel, once the run's
outcome is recorded, cancels each of those still live, its outcome saying
"cancelled with its parent". A child the run joined (another submitted it)
is not the run's to cancel, and goes on. A child created while the cancel
lists them finds its parent cancelled right after it is created, and is
cancelled by its submit (:mod:`stepstone.submit.submitter`). A cancel cut
short before its children is finished by the next cancel of the run, or
by the retention sweep (:mod:`stepstone.records.cancels`).
"""

from __future__ import annotations

from stepstone.execute.hooks import SettledHooks
from stepstone.handles.watch import OutcomeWatch
from stepstone.records.cancels import cancel_run, each_child, was_cancelled
from stepstone.records.run_records import RunRecords
from stepstone.runtime.clock import Clock
from stepstone.runtime.queue import LeaseQueue
from stepstone.runtime.worker import Worker


class Canceller:
    """Cancels runs kept in ``records`` and ``queue``; ``worker`` is this
    process's (its attempt of a cancelled run stops at once)."""

    def __init__(
        self,
        *,
        records: RunRecords,
        queue: LeaseQueue,
        clock: Clock,
        worker: Worker,
        watch: OutcomeWatch,
        hooks: SettledHooks,
    ) -> None:
        self._records = records
        self._queue = queue
        self._clock = clock
        self._worker = worker
        self._watch = watch
        self._hooks = hooks

    async def cancel(self, run_id: str, *, leave_children: bool = False) -> bool:
        """Cancel the run unless it has finished, and its live children with
        it unless ``leave_children``; False if it had finished (or was never
        submitted). See the module docstring."""
        return await self._cancel(run_id, None, leave_children)

    async def _cancel(self, run_id: str, parent: str | None, leave_children: bool) -> bool:
        """Cancel ``run_id`` (only if ``parent`` created it, when given), then
        its children, and theirs. A run cancelled already (a cancel cut short
        before its children) still takes its live children with it."""
        cancelled = await cancel_run(self._records, self._queue, self._clock, run_id, parent)
        if cancelled is not None:
            record, job_input = cancelled
            self._worker.cancel_running(run_id)
            self._watch.stands(record)
            await self._hooks.run(record, job_input)
        elif leave_children or not await was_cancelled(self._records, run_id, parent):
            return False
        if not leave_children:

            async def child(child_id: str) -> bool:
                return await self._cancel(child_id, run_id, False)

            await each_child(self._records, run_id, child)
        return cancelled is not None

"""RunAnswers: what answers a handle's questions about its run.

A handle asks five things (:class:`~stepstone.handles.handle.Answers`): its
outcome as soon as there is one (the outcome watch), the outcome recorded
now (the run's records), where the run is (its records and queue record), to
cancel it, and a reader of one of its streams. Cancelling stops an attempt
this process runs and calls the run's hooks, which are the execute side's:
it is handed in as a :class:`Cancels`.
"""

from __future__ import annotations

from typing import Any, Protocol

from stepstone.handles.handle import Submitted
from stepstone.handles.state import JobState, read_state
from stepstone.handles.streams import StreamReader
from stepstone.handles.watch import OutcomeWatch
from stepstone.records.layout import check_run_id
from stepstone.records.outcome import Outcome
from stepstone.records.run_records import RunRecords
from stepstone.runtime.queue import LeaseQueue


class Cancels(Protocol):
    """Cancels a run (:class:`stepstone.execute.cancelling.Canceller`)."""

    async def cancel(self, run_id: str, *, leave_children: bool = False) -> bool: ...


class RunAnswers:
    """Answers handles on runs kept in ``records`` and ``queue``."""

    def __init__(
        self, records: RunRecords, queue: LeaseQueue, watch: OutcomeWatch, cancels: Cancels
    ) -> None:
        self._records = records
        self._queue = queue
        self._watch = watch
        self._cancels = cancels

    async def wait(
        self,
        run_id: str,
        output: Any,
        *,
        fresh: bool = False,
        input_hash: str | None = None,
        submitted: Submitted | None = None,
    ) -> Outcome[Any]:
        return await self._watch.wait(
            run_id, output, fresh=fresh, input_hash=input_hash, submitted=submitted
        )

    def restarts(self, run_id: str) -> int:
        return self._watch.restarts(run_id)

    async def outcome(
        self, run_id: str, output: Any, input_hash: str | None = None
    ) -> Outcome[Any] | None:
        record = await self._records.outcome(check_run_id(run_id), input_hash)
        return None if record is None else record.typed(output, self._records.payloads)

    async def status(self, run_id: str) -> JobState | None:
        return await read_state(self._records, self._queue, check_run_id(run_id))

    async def cancel(self, run_id: str, *, leave_children: bool = False) -> bool:
        return await self._cancels.cancel(check_run_id(run_id), leave_children=leave_children)

    def stream(
        self,
        run_id: str,
        name: str,
        output: Any = Any,
        *,
        start: int = 0,
        follow: bool = True,
        poll: float | None = None,
    ) -> StreamReader[Any]:
        return StreamReader(
            self._records,
            self._queue,
            run_id,
            name,
            output,
            start=start,
            follow=follow,
            poll=poll,
        )

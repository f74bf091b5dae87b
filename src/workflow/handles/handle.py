"""JobHandle: a submitted job's id, and the ways to wait for its answer.

The answer is the outcome record, so a handle works from any process: one
that runs the worker is woken the moment its worker records the outcome; any
other polls the record with backoff. The handle holds only the job's id and
whatever answers for it (:class:`Answers`, which the runner provides), so it
is cheap to make and to hold.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from stepstone.records.outcome import Outcome
from stepstone.runtime.queue import JobStatus

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Submitted:
    """A run this runner has just submitted: its job type (``kind``) and when
    (``at``, on ``time.monotonic``'s clock), to time its polls by
    (``stepstone.handles.watch``)."""

    kind: str
    at: float


@dataclass(frozen=True, slots=True)
class JobState:
    """A snapshot of where a job is, from its outcome record, queue record and progress."""

    id: str
    state: JobStatus
    attempts: int
    progress: Any = None
    last_error: str | None = None
    run_at: float | None = None
    """When it is (or was) due: a suspended job's wake time."""
    lease_expires_at: float | None = None
    waiting_for: str | None = None
    """What a suspended job waits for: ``until <time>``, an event's name,
    ``<n> of <m> children``."""

    @property
    def finished(self) -> bool:
        return self.state.finished


class Answers(Protocol):
    """What a handle asks about its job; the runner answers."""

    async def wait(
        self,
        job_id: str,
        output: Any,
        *,
        fresh: bool,
        input_hash: str | None,
        submitted: Submitted | None = None,
    ) -> Outcome[Any]:
        """The outcome, as soon as there is one (``fresh``: just submitted
        here, as ``submitted`` says); an outcome of another ``input_hash``
        raises CorruptOutcome."""

    async def outcome(
        self, job_id: str, output: Any, input_hash: str | None = None
    ) -> Outcome[Any] | None:
        """The outcome from its record only; None while the job runs."""

    async def status(self, job_id: str) -> JobState | None: ...

    async def cancel(self, job_id: str) -> bool: ...


class JobHandle(Generic[T]):
    """Await it for the typed result, or ``join()`` for the outcome without raising.

    A handle from ``submit`` knows its run's input, and takes no outcome
    record of another input for its answer (it raises CorruptOutcome naming
    the object); one from ``runner.handle(id)`` takes what is recorded."""

    def __init__(
        self,
        answers: Answers,
        job_id: str,
        output_type: Any,
        *,
        newly_submitted: bool,
        outcome: Outcome[T] | None = None,
        input_hash: str | None = None,
        kind: str | None = None,
    ) -> None:
        self._answers = answers
        self._output_type = output_type
        self._outcome = outcome
        self._within: Callable[[JobHandle[T]], Awaitable[Outcome[T]]] | None = None
        self._input_hash = input_hash
        self._submitted = (
            Submitted(kind, time.monotonic()) if newly_submitted and kind is not None else None
        )
        self.id = job_id
        self.newly_submitted = newly_submitted

    def wait_within(self, waiter: Callable[[JobHandle[T]], Awaitable[Outcome[T]]]) -> None:
        """Wait for this job through ``waiter`` instead of polling: a parent
        job's context, which suspends the parent until its child has ended."""
        self._within = waiter

    def __repr__(self) -> str:
        return f"<JobHandle {self.id} newly_submitted={self.newly_submitted}>"

    def __await__(self) -> Generator[Any, None, T]:
        return self.result().__await__()

    async def result(self, timeout: float | None = None) -> T:  # noqa: ASYNC109 - the API users expect
        """The job's result; raises JobFailed if it failed, TimeoutError after ``timeout``."""
        outcome = await self.join(timeout=timeout)
        return outcome.unwrap()

    async def join(self, timeout: float | None = None) -> Outcome[T]:  # noqa: ASYNC109
        """Wait for the outcome and return it, success or failure, without raising."""
        if self._outcome is not None:
            return self._outcome
        if self._within is not None:
            self._outcome = await self._within(self)
            return self._outcome
        async with asyncio.timeout(timeout):
            outcome = await self._answers.wait(
                self.id,
                self._output_type,
                fresh=self.newly_submitted,
                input_hash=self._input_hash,
                submitted=self._submitted,
            )
        self._outcome = outcome
        return outcome

    async def fetch_result(self) -> Outcome[T] | None:
        """The outcome from the record only: None while the job runs, or after
        retention removed it."""
        return await self._answers.outcome(self.id, self._output_type, self._input_hash)

    async def poll(self) -> Outcome[T] | None:
        """The outcome without waiting: the one this handle already has, else
        the record's (kept once found); None while the job runs."""
        if self._outcome is None:
            self._outcome = await self._answers.outcome(
                self.id, self._output_type, self._input_hash
            )
        return self._outcome

    async def status(self) -> JobState | None:
        """Where the job is now; None if nothing is known of it."""
        return await self._answers.status(self.id)

    async def cancel(self) -> bool:
        """Cancel the job unless it has already finished; True if this call cancelled it.

        A running attempt learns at its next lease renewal and is stopped; its
        work so far stays memoized."""
        return await self._answers.cancel(self.id)

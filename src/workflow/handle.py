"""JobHandle: a submitted job's id, and the ways to wait for its answer.

The answer is the outcome record, so a handle works from any process: one
that runs the worker is woken the moment its worker records the outcome; any
other polls the record with backoff.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .outcome import Outcome

if TYPE_CHECKING:
    from .runner import JobRunner

T = TypeVar("T")

POLL_FIRST = 0.02
POLL_MAX = 1.0


@dataclass(frozen=True, slots=True)
class JobState:
    """A snapshot of where a job is, from its outcome record, queue record and progress."""

    id: str
    state: str
    """One of ``scheduled``, ``ready``, ``running``, ``dead`` (queue states) or
    ``succeeded``, ``failed``, ``cancelled`` (outcomes)."""
    attempts: int
    progress: Any = None
    last_error: str | None = None
    run_at: float | None = None
    lease_expires_at: float | None = None

    @property
    def finished(self) -> bool:
        return self.state in ("succeeded", "failed", "cancelled")


class JobHandle(Generic[T]):
    """Await it for the typed result, or ``join()`` for the outcome without raising."""

    def __init__(
        self,
        runner: JobRunner,
        job_id: str,
        output_type: Any,
        *,
        newly_submitted: bool,
        outcome: Outcome[T] | None = None,
    ) -> None:
        self._runner = runner
        self._output_type = output_type
        self._outcome = outcome
        self.id = job_id
        self.newly_submitted = newly_submitted

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
        async with asyncio.timeout(timeout):
            outcome = await self._runner._wait_for(
                self.id, self._output_type, fresh=self.newly_submitted
            )
        self._outcome = outcome
        return outcome

    async def fetch_result(self) -> Outcome[T] | None:
        """The outcome from the record only: None while the job runs, or after
        retention removed it."""
        return await self._runner._read_outcome(self.id, self._output_type)

    async def status(self) -> JobState | None:
        """Where the job is now; None if nothing is known of it."""
        return await self._runner.status(self.id)

    async def cancel(self) -> bool:
        """Cancel the job unless it has already finished; True if this call cancelled it.

        A running attempt learns at its next lease renewal and is stopped; its
        work so far stays memoized."""
        return await self._runner.cancel(self.id)

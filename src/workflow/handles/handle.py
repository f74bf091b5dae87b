"""JobHandle: a submitted run's id, and the ways to await its answer.

The answer is the outcome record, so a handle works from any process: one
that runs the worker is woken the moment its worker records the outcome; any
other polls the record (:mod:`stepstone.handles.watch`). The handle holds
only the run's id and what answers for it (:class:`Answers`, which
:mod:`stepstone.handles.answers` provides), so it is cheap to make and to hold.

Four ways to the outcome: ``await handle`` (or ``handle.result(timeout)``)
for the typed result, raising JobFailed; ``handle.join(timeout)`` for the
Outcome, success or failure, without raising; ``handle.poll()`` for the
outcome now, or None while the run goes on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, overload

from stepstone.handles.state import JobState
from stepstone.handles.streams import StreamReader
from stepstone.records.debounce_windows import Joined
from stepstone.records.outcome import Outcome

T = TypeVar("T")
S = TypeVar("S")


@dataclass(frozen=True, slots=True)
class Submitted:
    """A run this runner has just submitted: its ``kind`` and when (``at``, on
    ``time.monotonic``'s clock), to time its polls by
    (:mod:`stepstone.handles.poll_timing`)."""

    kind: str
    at: float


class Answers(Protocol):
    """What a handle asks about its run (:class:`~stepstone.handles.answers.RunAnswers`)."""

    async def wait(
        self,
        run_id: str,
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
        self, run_id: str, output: Any, input_hash: str | None = None
    ) -> Outcome[Any] | None:
        """The outcome from its record only; None while the run goes on."""

    def restarts(self, run_id: str) -> int:
        """How many times this process started the run again after it ended
        (``runner.replay``, ``retry_many``): an outcome a handle took before
        is no longer the run's answer."""

    async def status(self, run_id: str) -> JobState | None: ...

    async def cancel(self, run_id: str, *, leave_children: bool = False) -> bool: ...

    def stream(
        self, run_id: str, name: str, output: Any, *, start: int, follow: bool, poll: float | None
    ) -> StreamReader[Any]:
        """A reader of the run's stream ``name`` (:mod:`stepstone.handles.streams`)."""


class JobHandle(Generic[T]):
    """Await it for the typed result, or ``join()`` for the outcome without raising.

    A handle from ``submit`` knows its run's input, and takes no outcome
    record of another input for its answer (it raises CorruptOutcome naming
    the object); one from ``runner.handle(id)`` takes what is recorded."""

    def __init__(
        self,
        answers: Answers,
        run_id: str,
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
        self._restarts = answers.restarts(run_id)
        """The run's restarts here when ``_outcome`` was taken."""
        self._within: Callable[[JobHandle[T]], Awaitable[Outcome[T]]] | None = None
        self._input_hash = input_hash
        self._submitted = (
            Submitted(kind, time.monotonic()) if newly_submitted and kind is not None else None
        )
        self.id = run_id
        """The run id."""
        self.newly_submitted = newly_submitted
        self._fresh = newly_submitted
        self.debounced: Joined | None = None
        """For a debounced submit: the window it joined (its run, place,
        when it was decided, and the run's due time as it stood then)."""

    def wait_within(self, waiter: Callable[[JobHandle[T]], Awaitable[Outcome[T]]]) -> None:
        """Await this run through ``waiter`` instead of polling: a parent
        run's context, which suspends the parent until its child has ended."""
        self._within = waiter

    def __repr__(self) -> str:
        return f"<JobHandle {self.id} newly_submitted={self.newly_submitted}>"

    def __await__(self) -> Generator[Any, None, T]:
        return self.result().__await__()

    async def result(self, timeout: float | None = None) -> T:  # noqa: ASYNC109 - the API users expect
        """The run's result; raises JobFailed if it failed, TimeoutError after ``timeout``."""
        outcome = await self.join(timeout=timeout)
        return outcome.unwrap()

    async def join(self, timeout: float | None = None) -> Outcome[T]:  # noqa: ASYNC109
        """Wait for the outcome and return it, success or failure, without
        raising. After a replay (or a retry of a dead run) from this runner,
        the run's new outcome."""
        if self._held() is not None:
            assert self._outcome is not None
            return self._outcome
        if self._within is not None:
            self._outcome = await self._within(self)
            return self._outcome
        async with asyncio.timeout(timeout):
            outcome = await self._answers.wait(
                self.id,
                self._output_type,
                fresh=self._fresh,
                input_hash=self._input_hash,
                submitted=self._submitted,
            )
        self._outcome = outcome
        return outcome

    async def poll(self) -> Outcome[T] | None:
        """The outcome without waiting: the one this handle already has, else
        the record's (kept once found); None while the run goes on."""
        if self._held() is None:
            self._outcome = await self._answers.outcome(
                self.id, self._output_type, self._input_hash
            )
        return self._outcome

    def _held(self) -> Outcome[T] | None:
        """The outcome this handle took, unless the run was started again here since."""
        restarts = self._answers.restarts(self.id)
        if restarts != self._restarts:
            self._outcome, self._restarts = None, restarts
            self._fresh = False  # (its new record may stand already: read it)
        return self._outcome

    async def status(self) -> JobState | None:
        """Where the run is now; None if nothing is known of it."""
        return await self._answers.status(self.id)

    @overload
    def stream(
        self, name: str, *, start: int = 0, follow: bool = True, poll: float | None = None
    ) -> StreamReader[Any]: ...

    @overload
    def stream(
        self,
        name: str,
        type: type[S],
        *,
        start: int = 0,
        follow: bool = True,
        poll: float | None = None,
    ) -> StreamReader[S]: ...

    def stream(
        self,
        name: str,
        type: Any = Any,
        *,
        start: int = 0,
        follow: bool = True,
        poll: float | None = None,
    ) -> StreamReader[Any]:
        """The run's stream ``name`` (``ctx.stream(name)`` in its code), to
        read: ``async for value in handle.stream("tokens", str)``. Values
        come in order, each once, decoded as ``type`` (as a step's result
        is); from offset ``start`` (0: the first item). Following (the
        default), it waits for what the run writes next, and ends when the
        run closes the stream or ends; else it ends at the first offset not
        written yet. ``poll``: seconds between two looks while it waits (by
        default by the store: :mod:`stepstone.handles.streams`)."""
        return self._answers.stream(self.id, name, type, start=start, follow=follow, poll=poll)

    async def cancel(self, *, leave_children: bool = False) -> bool:
        """Cancel the run unless it has already finished; True if this call cancelled it.

        A running attempt learns at its next lease renewal and is stopped; its
        work so far stays memoized. The children it created that have not
        finished are cancelled with it, unless ``leave_children``."""
        return await self._answers.cancel(self.id, leave_children=leave_children)

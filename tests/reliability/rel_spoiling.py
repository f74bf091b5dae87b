"""What the tests that spoil a live run's records share: a canary job that
shows the worker stayed up, waiting on a condition with a deadline, how a
run ended, and whether the queue let go of the runs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import ClassVar

from stepstone import (
    CorruptRecord,
    Job,
    JobContext,
    JobHandle,
    JobRunner,
    JobStatus,
    Outcome,
    StepstoneError,
)
from stepstone.testing import wait_until


class Canary(Job[int]):
    """Succeeds with twice its input: submitted before and after the spoiled
    runs, it shows the worker still works."""

    NAME: ClassVar[str] = "spoil.canary"
    n: int

    async def run(self, ctx: JobContext) -> int:
        async def double() -> int:
            return self.n * 2

        return await ctx.step("double", double)


async def until(
    cond: Callable[[], bool | Awaitable[bool]],
    what: str,
    within: float,
) -> None:
    """Return once ``cond`` holds; fail the test after ``within`` seconds."""
    await wait_until(cond, timeout=within, interval=0.01, message=what)


async def all_settled(api: JobRunner, victims: list[JobHandle[int]]) -> bool:
    """No victim is live in the queue: acked, dead, or its record spoiled (it
    can never be claimed again)."""
    for handle in victims:
        try:
            record = await api.queue.get(handle.id)
        except CorruptRecord:
            continue
        if record is not None and record.status is not JobStatus.DEAD:
            return False
    return True


async def end_of(handle: JobHandle[int]) -> Outcome[int] | StepstoneError:
    """How the run ended: its outcome, or the error its handle raised."""
    try:
        return await handle.join()
    except StepstoneError as error:
        return error

"""Operator actions that change runs: retry a dead run, cancel, purge
(replaying a run is :mod:`stepstone.ops.replay`).

Each works on a store and a queue with no job type known, as the reads do
(:mod:`stepstone.ops.reads`), and says what it did or why it could not.
``stepstone retry``/``cancel`` and the web view's buttons both act through
these, and choose the runs of a bulk action by :func:`bulk_choice`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from stepstone.errors import InspectError
from stepstone.ops.listing import RunFilter, RunSummary
from stepstone.ops.reads import (
    READ_CONCURRENCY,
    Inspected,
    Unreadable,
    bounded,
    check_id,
    iter_outcomes,
    lacks,
    read_outcome,
)
from stepstone.records.attempt_log import keep_final_attempt
from stepstone.records.outcome import OutcomeRecord
from stepstone.records.retention import sweep_one
from stepstone.runtime.capabilities import DeadJobRequeue
from stepstone.runtime.errors import QueueError
from stepstone.runtime.status import JobStatus
from stepstone.store import ObjectInfo, StoreError


async def retry(runner: Inspected, run_id: str) -> Unreadable | None:
    """Run a dead job again: remove its failed outcome, then requeue it.

    The claim the run died in, which the outcome describes, is first written
    to the run's attempt history as a record of its own. The outcome goes
    before the requeue because it is the run's answer: a worker that
    claims a keyed job (or a job claimed before) and finds an outcome settles
    without running, and a submit of the same key answers from it. Cut short
    between the two, the job is dead with no outcome; retrying again finishes
    the job. The requeued job keeps its incarnation, so the steps it finished
    before it died replay from their memos instead of running again.

    An outcome that will not decode is removed too (a dead job's run did not
    succeed, so it cannot be an answer worth keeping) and returned, for the
    caller to say so.
    """
    check_id(run_id)
    queue = runner.queue
    if not isinstance(queue, DeadJobRequeue):
        raise lacks(queue, "requeue a dead job")
    queued = await queue.get(run_id)
    if queued is None:
        outcome = await read_outcome(runner, run_id)
        if outcome is None:
            raise InspectError(f"no run {run_id} in {runner.store.location}")
        raise InspectError(
            f"run {run_id} has {_ended(outcome)} and left the queue; only a dead run can be retried"
        )
    if queued.status is not JobStatus.DEAD:
        raise InspectError(
            f"run {run_id} is {queued.status}, not dead; only a dead run can be retried"
        )
    outcome = await read_outcome(runner, run_id)
    if isinstance(outcome, OutcomeRecord) and outcome.status is JobStatus.SUCCEEDED:
        raise InspectError(f"run {run_id} succeeded; its outcome is kept and it is not retried")
    if isinstance(outcome, OutcomeRecord):
        # The outcome describes the claim the run died in: keep that in its history.
        await keep_final_attempt(runner.store, runner.layout, outcome)
    if outcome is not None:
        await runner.store.delete(runner.layout.outcome(run_id))
    if not await queue.requeue(run_id):
        raise InspectError(f"run {run_id} is no longer dead; it was not requeued")
    return outcome if isinstance(outcome, Unreadable) else None


@dataclass(frozen=True, slots=True)
class Bulk:
    """What a bulk action did: the runs it acted on (``verb`` says how), why
    each other one was not, and the records met that would not decode."""

    verb: str
    done: list[str]
    refused: dict[str, str]
    unreadable: list[Unreadable]


async def retry_many(runner: Inspected, run_ids: Iterable[str]) -> Bulk:
    """Retry each dead run as :func:`retry` does, ``READ_CONCURRENCY`` at a
    time. A run that cannot be retried (it is no longer dead, the store
    refuses) is noted with why, and the others go on."""
    return await each(runner, run_ids, "requeued", retry)


async def cancel_many(
    runner: Inspected, run_ids: Iterable[str], *, leave_children: bool = False
) -> Bulk:
    """Cancel each run as :func:`cancel` does (a dead one is discarded from
    the queue), ``READ_CONCURRENCY`` at a time, noting each that could not be."""

    async def one(runner: Inspected, run_id: str) -> None:
        await cancel(runner, run_id, leave_children=leave_children)

    return await each(runner, run_ids, "cancelled", one)


async def each(
    runner: Inspected,
    run_ids: Iterable[str],
    verb: str,
    act: Callable[[Inspected, str], Awaitable[Unreadable | None]],
) -> Bulk:
    """``act`` on each run, ``READ_CONCURRENCY`` at a time: a run it cannot
    act on (an operator's error, the store's, the queue's) is noted with why,
    and the others go on."""
    refused: dict[str, str] = {}

    async def one(run_id: str) -> tuple[str, Unreadable | None]:
        try:
            return run_id, await act(runner, run_id)
        except (InspectError, StoreError, QueueError) as exc:
            refused[run_id] = str(exc)
            return run_id, None

    done = await bounded(one(run_id) for run_id in run_ids)
    return Bulk(
        verb,
        [run_id for run_id, _ in done if run_id not in refused],
        refused,
        [removed for _, removed in done if removed is not None],
    )


BulkVerb = Literal["retry", "cancel", "replay"]
Keep = Callable[[RunSummary], bool]


def bulk_choice(verb: BulkVerb, chosen: RunFilter) -> tuple[RunFilter, Keep]:
    """What a bulk ``verb`` over the runs ``chosen`` lists, and which of the
    rows listed it acts on: ``retry`` the dead ones; ``cancel`` those of the
    status asked for, or else the live ones (a finished run has nothing to
    cancel, and a dead one is discarded only when asked); ``replay`` the
    ended ones (finished or dead: a live run is still making its history).
    Raises InspectError for a status the verb cannot take."""
    if verb == "replay":
        status = chosen.status
        if status is not None and not status.finished and status is not JobStatus.DEAD:
            raise InspectError(f"a {status.value} run is live: only ended runs can be replayed")
        return chosen, _ended_run
    if verb == "retry":
        if chosen.status not in (None, JobStatus.DEAD):
            raise InspectError("only dead runs can be retried: choose the dead ones, or any")
        return dataclasses.replace(chosen, status=JobStatus.DEAD), _any
    if chosen.status is not None and chosen.status.finished:
        raise InspectError(f"a {chosen.status.value} run has finished: there is nothing to cancel")
    return chosen, _any if chosen.status is not None else _live


def _any(row: RunSummary) -> bool:
    return True


def _live(row: RunSummary) -> bool:
    return row.status.queued and row.status is not JobStatus.DEAD


def _ended_run(row: RunSummary) -> bool:
    return not _live(row)


def described(chosen: RunFilter, since: str | None = None) -> str:
    """The runs a filter chooses, as words: ``dead run(s) of kind K submitted
    since T`` (``since``: how the operator wrote the time)."""
    words = f"{chosen.status.value} run(s)" if chosen.status is not None else "run(s)"
    if chosen.kind is not None:
        words += f" of kind {chosen.kind}"
    if chosen.version is not None:
        words += f" of version {chosen.version}"
    if chosen.key_prefix is not None:
        words += f" with a key starting {chosen.key_prefix!r}"
    return words + ("" if since is None else f" submitted since {since}")


def _ended(outcome: OutcomeRecord | Unreadable) -> str:
    """How a run with this outcome ended, for a message."""
    if isinstance(outcome, Unreadable):
        return f"ended with an outcome that cannot be read ({outcome.key}: {outcome.reason})"
    return f"finished ({outcome.status.value})"


async def cancel(runner: Inspected, run_id: str, *, leave_children: bool = False) -> str:
    """Cancel a live job, with its live children unless ``leave_children``,
    or discard a dead one from the queue; returns what was done.

    The outcome is read first: a run that has one has ended (a dead run
    keeps its queue record beside it), and cancelling over an outcome that
    will not decode would have nothing to compare with.
    """
    check_id(run_id)
    outcome = await read_outcome(runner, run_id)
    if outcome is None:
        if await runner.cancel(run_id, leave_children=leave_children):
            return "cancelled"
        outcome = await read_outcome(runner, run_id)  # it ended meanwhile, or never was
    queued = await runner.queue.get(run_id)
    if queued is not None and queued.status is JobStatus.DEAD:
        await runner.queue.cancel(run_id)
        return "discarded"
    if outcome is not None:
        raise InspectError(f"run {run_id} has already {_ended(outcome)}")
    raise InspectError(f"no run {run_id} in {runner.store.location}")


async def purge(
    runner: Inspected,
    older_than: float,
    *,
    dry_run: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
) -> list[str]:
    """Remove finished runs (outcome, memos, progress) whose outcome is more
    than ``older_than`` seconds old by the runner's clock; returns their ids.

    Each goes through :func:`workflow.retention.sweep_one`, what the runner's
    own retention sweep does: the outcome goes last, so a purge cut short
    leaves runs that still answer and a rerun finishes it; the tombstones
    of runs swept earlier that are past the age go too (they are no runs).
    """
    if older_than < 0:
        raise InspectError("the age must not be negative")
    cutoff = runner.clock.now() - older_than
    infos = [info async for info in iter_outcomes(runner, older_than=cutoff)]
    total = len(infos)
    if on_progress is not None:
        on_progress(0, total)
    done = 0
    semaphore = asyncio.Semaphore(READ_CONCURRENCY)

    async def one(info: ObjectInfo) -> str | None:
        nonlocal done
        async with semaphore:
            removed = await sweep_one(runner, info, dry_run=dry_run)
        done += 1
        if on_progress is not None:
            on_progress(done, total)
        return runner.layout.run_id_of_outcome(info.key) if removed else None

    return [run_id for run_id in await asyncio.gather(*(one(i) for i in infos)) if run_id]

"""A batch of submits: ``JobRunner.submit_many``.

Each job is answered as ``submit`` answers it (:mod:`stepstone.submit.submitter`),
but the work is done together: every input is encoded before anything is
written; the keyed jobs' outcomes are read together (``get_many``), before
the enqueue (where the look-first rule wants it) and after it; and the jobs
to enqueue go to the queue in one ``enqueue_many`` (one flush on files).
Then the first error met (say InputMismatch for one job) is raised, the
others submitted; an InputMismatch carries the handles of the jobs that were
(``handles``), so a caller that retries the batch can leave them out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from stepstone.errors import CorruptOutcome, InputMismatch
from stepstone.handles.handle import JobHandle
from stepstone.job import Job, Singleton
from stepstone.records.outcome import OutcomeRecord
from stepstone.runtime.queue import all_or_first_error
from stepstone.submit.options import SubmitOptions
from stepstone.submit.submission import Submission
from stepstone.submit.submitter import SUBMIT_RETRIES, Submitter

T = TypeVar("T")

Answer = JobHandle[Any] | BaseException | None
"""A job's answer so far: its handle, the error it answers with, or None (not yet)."""


async def submit_many(
    submitter: Submitter, jobs: Sequence[Job[Any]], options: SubmitOptions | None = None
) -> list[JobHandle[Any]]:
    """Submit every job of ``jobs`` (each with ``options``) through
    ``submitter``; their handles in order. See the module docstring.
    Debounced jobs, and jobs of a singleton type that does more than queue,
    are submitted one after another, in order (each decides on its key's
    object, seeing the last one's decision)."""
    debounced = options is not None and options.debounce is not None
    if debounced or any(type(job).singleton not in (None, Singleton.QUEUE) for job in jobs):
        return [await submitter.submit(job, options) for job in jobs]
    subs = [Submission.of(job, options, None, None) for job in jobs]
    answers: list[Answer] = [None] * len(subs)
    first = [i for i, s in enumerate(subs) if s.run_id and submitter.look_first.wanted(s.run_id)]
    looked_first = await submitter.outcomes([subs[i] for i in first])
    for i, found in zip(first, looked_first, strict=True):
        answers[i] = _answer_or_none(submitter, subs[i], found)

    fresh = [i for i, answer in enumerate(answers) if answer is None]
    new_jobs = [subs[i].new_job(submitter.max_attempts, submitter.records.payloads) for i in fresh]
    await submitter.index([subs[i] for i in fresh], new_jobs)
    enqueued = dict(zip(fresh, await submitter.queue.enqueue_many(new_jobs), strict=True))

    created = [i for i in fresh if enqueued[i].created and subs[i].keyed]
    looked_after = await submitter.outcomes([subs[i] for i in created])
    looked = dict(zip(created, looked_after, strict=True))
    ended: list[tuple[int, OutcomeRecord | CorruptOutcome]] = []
    for i in fresh:
        if not enqueued[i].created:
            continue
        found = looked.get(i)  # (answered from what was read: nothing to wait for)
        if found is None:
            answers[i] = await _caught(submitter.after(subs[i], enqueued[i], found))
        else:
            ended.append((i, found))
    # Records made for runs found finished, or whose outcome does not read,
    # are taken back together (a request each).
    taken_back = await asyncio.gather(
        *(_caught(submitter.after(subs[i], enqueued[i], found)) for i, found in ended)
    )
    for (i, _), answer in zip(ended, taken_back, strict=True):
        answers[i] = answer
    # Duplicates of a live run join it (or meet its end): one look each.
    joining = [i for i in fresh if not enqueued[i].created]
    joined = await asyncio.gather(
        *(_caught(submitter.after(subs[i], enqueued[i])) for i in joining)
    )
    for i, answer in zip(joining, joined, strict=True):
        answers[i] = answer
    # A run that ended between two looks: go round again, as submit does.
    again = [i for i, answer in enumerate(answers) if answer is None]
    redone = await asyncio.gather(
        *(_caught(submitter.submit_one(subs[i], tries=SUBMIT_RETRIES)) for i in again)
    )
    for i, answer in zip(again, redone, strict=True):
        answers[i] = answer
    error = next((answer for answer in answers if isinstance(answer, BaseException)), None)
    if isinstance(error, InputMismatch):
        handles = [answer if isinstance(answer, JobHandle) else None for answer in answers]
        raise InputMismatch(error.run_id, error.kind, handles=handles) from None
    return all_or_first_error(answers)


def _answer_or_none(
    submitter: Submitter, s: Submission, found: OutcomeRecord | CorruptOutcome | None
) -> Answer:
    """What a keyed job's outcome, read in bulk, answers: a handle, an error
    (the job's answer is that error), or None (enqueue it)."""
    if found is None or isinstance(found, CorruptOutcome):
        return found
    submitter.look_first.met(True)
    try:
        return submitter.answer_from(found, s)
    except InputMismatch as exc:
        return exc


async def _caught(answer: Awaitable[T]) -> T | BaseException:
    """``answer``'s value, or the exception it raised (a job's answer may be an error)."""
    try:
        return await answer
    except Exception as exc:
        return exc

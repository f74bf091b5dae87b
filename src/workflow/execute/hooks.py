"""``on_settled`` hooks: code that runs once a run's outcome is recorded.

Two kinds, called in this order with the run's :class:`~stepstone.Outcome`
(which carries the job's id and NAME): the job type's own
(:meth:`Job.on_settled`, a method, a classmethod or a staticmethod; a method
gets the run's input as ``self``) and the runner's (``JobRunner(on_settled=)``).
Each may be ``async`` or plain; a plain one runs in a thread of its own
(:class:`~stepstone.execute.hook_threads.HookThreads`), so a blocking call in
it (an HTTP request to an alerting service) holds no event loop, and one
that never returns holds none of the job threads nor the process at exit.

**When.** The worker that records a run's outcome calls the hooks after the
record has landed and before it acks (or dead-letters) the queue entry; a
cancel calls them in the process that cancels, once the cancelled outcome
has landed. A run whose outcome is never recorded (it was swept while it
ran, or its record could not be written) calls none.

**At least once.** The queue entry goes only after the hooks have run, so a
worker that crashes (or loses its lease) between the outcome write and the
ack leaves the run to be claimed again: the next worker finds the outcome
recorded, settles the run without running it, and calls the hooks again.
So a hook runs twice when a worker stops after the outcome write and before
the ack, and when two workers settle the same recorded run (one whose lease
lapsed while it recorded, and the one that took the run over). Make hooks
idempotent (key an alert by ``outcome.id``). A cancel calls them once, in
the cancelling process only, and not at all when that runner has none (the
``stepstone cancel`` command has none): a worker that finds a run cancelled
calls none. A dead run retried by an operator
settles again, and its hooks run again for its new outcome.

**Failures are the hook's own.** What a hook raises, or a hook still running
after ``HOOK_TIMEOUT`` seconds, is logged (with the job's id, name and
the error) and changes nothing: the outcome stands and the run is settled.
A hook past its timeout is cancelled (an ``async`` one) and left to finish
alone: the run is settled without waiting for it, even if it goes on
waiting after its cancellation, and a plain one's thread runs on unobserved.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import ValidationError

from stepstone.errors import PayloadUnreadable
from stepstone.execute.hook_threads import HookThreads
from stepstone.job import Job
from stepstone.records.outcome import Outcome, OutcomeRecord
from stepstone.records.payloads import Payloads

log = logging.getLogger("stepstone")

HOOK_TIMEOUT = 60.0
"""Seconds a hook may run before the worker stops waiting for it (and logs
that); the run's lease is renewed meanwhile, and its concurrency slot, if
it holds one, stays taken."""

SettledHook = Callable[[Outcome[Any]], Awaitable[None] | None]
"""A runner-wide hook: ``JobRunner(on_settled=...)``."""


class SettledHooks:
    """The hooks of one runner: its own, and those of the job types it knows.

    ``job_type`` gives the registered job type of a NAME (None: unknown);
    ``threads`` runs a plain hook off the event loop.
    """

    def __init__(
        self,
        runner_hook: SettledHook | None,
        *,
        job_type: Callable[[str], type[Job[Any]] | None],
        threads: HookThreads,
        timeout: float | None = None,
        payloads: Payloads | None = None,
    ) -> None:
        self._runner_hook = runner_hook
        self._payloads = payloads if payloads is not None else Payloads()
        self._job_type = job_type
        self._threads = threads
        self._timeout = HOOK_TIMEOUT if timeout is None else timeout
        self._left: set[asyncio.Task[None]] = set()
        """Async hooks past their timeout, left to finish alone (kept so
        that they are not collected while they run)."""

    async def run(self, record: OutcomeRecord, job_input: bytes | None) -> None:
        """Call the hooks of the run ``record`` answers. ``job_input`` is its
        input JSON (for a hook that is a method), when known. Never raises."""
        job_type = self._job_type(record.kind)
        overridden = job_type is not None and has_hook(job_type)
        if not overridden and self._runner_hook is None:
            return
        payloads = self._payloads
        try:
            outcome = record.typed(Any if job_type is None else job_type.output_type(), payloads)
            if job_input is not None:
                job_input = payloads.open_bytes(job_input)
        except PayloadUnreadable as exc:
            _failed(record, "its result or input does not open", exc)
            return
        except Exception as exc:  # a record older than the type's output: still an outcome
            _failed(record, "its result does not decode as the job's output type", exc)
            outcome = record.typed(Any, payloads)
        if job_type is not None and overridden:
            hook = _job_hook(job_type, job_input, record)
            if hook is not None:
                await self._call(hook, outcome, record, f"{job_type.__qualname__}.on_settled")
        if self._runner_hook is not None:
            await self._call(self._runner_hook, outcome, record, "the runner's on_settled")

    async def _call(
        self, hook: SettledHook, outcome: Outcome[Any], record: OutcomeRecord, which: str
    ) -> None:
        async def call() -> None:
            result = hook(outcome) if _is_async(hook) else await self._threads.call(hook, outcome)
            if inspect.isawaitable(result):
                await result

        task = asyncio.ensure_future(call())
        try:
            await asyncio.wait([task], timeout=self._timeout)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if not task.done():
            # Cancelled, and not waited for: a hook that catches its
            # cancellation and goes on waiting holds nothing of the run.
            task.cancel()
            self._left.add(task)
            task.add_done_callback(self._finished_alone)
            alone = "no longer waiting for it; left to finish alone"
            _failed(record, f"{which} ran past {self._timeout:g}s", alone)
            return
        error = None if task.cancelled() else task.exception()
        if task.cancelled():
            _failed(record, f"{which} was cancelled", "it raised CancelledError")
        elif isinstance(error, Exception):
            _failed(record, f"{which} failed", error)
        elif error is not None:
            raise error

    def _finished_alone(self, task: asyncio.Task[None]) -> None:
        self._left.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: what it raised was logged as its timeout


def has_hook(job_type: type[Job[Any]]) -> bool:
    """Whether the job type defines its own ``on_settled``."""
    return inspect.getattr_static(job_type, "on_settled") is not _BASE_HOOK


_BASE_HOOK = inspect.getattr_static(Job, "on_settled")


def _job_hook(
    job_type: type[Job[Any]], job_input: bytes | None, record: OutcomeRecord
) -> SettledHook | None:
    """The job type's hook, bound: to the run's job (its input decoded) for a
    method, to the class for a classmethod; None when a method's input is
    not there to decode (logged)."""
    if isinstance(inspect.getattr_static(job_type, "on_settled"), classmethod | staticmethod):
        hook: SettledHook = job_type.on_settled  # type: ignore[assignment]
        return hook
    if job_input is None:
        _failed(record, f"{job_type.__qualname__}.on_settled not called", "the input is not known")
        return None
    try:
        job = job_type.model_validate_json(job_input)
    except ValidationError as exc:
        _failed(record, f"{job_type.__qualname__}.on_settled not called", exc)
        return None
    return job.on_settled


def _is_async(hook: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(hook) or inspect.iscoroutinefunction(
        getattr(hook, "__call__", None)  # noqa: B004 - looking for an async __call__
    )


def _failed(record: OutcomeRecord, what: str, error: BaseException | str) -> None:
    reason = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    log.error(
        "run %s (%s): %s: %s",
        record.run_id,
        record.kind,
        what,
        reason,
        exc_info=error if isinstance(error, Exception) and not _expected(error) else None,
        extra={"run_id": record.run_id, "kind": record.kind},
    )


def _expected(error: BaseException) -> bool:
    """Errors whose message says it all: no traceback logged."""
    return isinstance(error, TimeoutError | ValidationError)

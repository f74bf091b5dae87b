"""JobContext: what a running job sees, and memoized steps.

``ctx.step(name, fn, ...)`` is the heart of the engine. A step runs once per
run: its result is written create-if-absent under the run's incarnation, so
the first writer wins (a zombie's late write cannot replace it) and a retry
reads it back instead of running ``fn`` again.

Memos are looked for only when an earlier claim of this run could have left
some (``Delivery.claims > 1``): a first claim reads no memos, it only writes them.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ParamSpec, TypeVar, cast, overload

from stepstone.runtime.worker import Attempt
from stepstone.store import AlreadyExists, ObjectStore

from .codec import codec_for, pack
from .errors import EncodingError
from .handle import JobHandle
from .job import Job
from .layout import Layout, step_key
from .observability import step_scope
from .records import RunRecords
from .submitting import SubmitOptions, Submitter

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")
Out = TypeVar("Out")

log = logging.getLogger("stepstone")

PROGRESS_INTERVAL = 1.0
"""At most one progress write per run per this many seconds; the last value is
always written before the run settles."""


class Run:
    """One attempt's bookkeeping, shared by its JobContext and the executor."""

    def __init__(
        self,
        *,
        submitter: Submitter,
        state_of: Callable[[type[Any]], Any],
        records: RunRecords,
        attempt: Attempt,
        name: str,
        incarnation: str,
        memo_keys: set[str] | None,
        headers: Mapping[str, str],
    ) -> None:
        self.submitter = submitter
        self.state_of = state_of
        self.records = records
        self.store: ObjectStore = records.store
        self.layout: Layout = records.layout
        self.attempt = attempt
        self.name = name
        self.incarnation = incarnation
        self.memo_keys = memo_keys
        self.headers = headers
        self.occurrences: dict[str, int] = {}
        self.children = 0
        self.progress: Any = None
        self.progress_written: Any = None
        self.progress_at = 0.0
        self.progress_task: asyncio.Task[None] | None = None
        self.replayed: list[str] = []

    @property
    def run_id(self) -> str:
        return self.attempt.delivery.id

    async def flush_progress(self) -> None:
        if self.progress_task is not None:
            await asyncio.shield(self.progress_task)
        if self.progress is not None and self.progress != self.progress_written:
            value = self.progress
            await self.records.write_progress(self.run_id, value)
            self.progress_written = value


class LeaseControl:
    """The job's lease, for a handler that knows it needs longer."""

    def __init__(self, attempt: Attempt) -> None:
        self._attempt = attempt

    @property
    def expires_at(self) -> float:
        return self._attempt.lease.expires_at

    async def ensure_at_least(self, seconds: float) -> None:
        """Make sure at least ``seconds`` remain on the lease, renewing now if not.

        Raises ``runtime.errors.LeaseLost`` when another worker has the job."""
        await self._attempt.lease.ensure_at_least(seconds)


class _Memo:
    """One step call: where its memo lives, and the two halves of memoizing it
    (look for a recorded value; record a new one, first writer wins). Split so
    a synchronous job can run the function itself in its own thread between them."""

    def __init__(self, run: Run, name: str, fn: Callable[..., object]) -> None:
        occurrence = run.occurrences.get(name, 0) + 1
        run.occurrences[name] = occurrence
        self.run = run
        self.name = name
        self.segment = step_key(name, occurrence)
        self.key = run.layout.memo(run.run_id, run.incarnation, self.segment)
        self.codec = codec_for(fn)

    async def lookup(self) -> tuple[bool, Any]:
        run = self.run
        if run.memo_keys is None or self.segment not in run.memo_keys:
            return False, None
        recorded = await run.store.get(self.key)
        run.replayed.append(self.segment)
        log.debug(
            "job %s (%s) attempt %d: step %r replayed from its memo",
            run.run_id,
            run.name,
            run.attempt.delivery.attempt,
            self.name,
            extra=log_extra(run),
        )
        return True, self.codec.decode(recorded.data)

    async def record(self, value: object) -> Any:
        run = self.run
        try:
            data = self.codec.encode(value)
        except (TypeError, ValueError) as exc:
            raise EncodingError(
                f"the result cannot be stored: {exc}", job=run.name, step=self.name
            ) from exc
        try:
            await run.store.put_if_absent(self.key, data)
        except AlreadyExists:
            # Another attempt of this run (a zombie, or the attempt this one
            # replaced) recorded the step first: its value is the step's value.
            data = (await run.store.get(self.key)).data
            log.info(
                "job %s (%s) attempt %d: step %r was recorded by another attempt; "
                "continuing with the recorded value",
                run.run_id,
                run.name,
                run.attempt.delivery.attempt,
                self.name,
                extra=log_extra(run),
            )
        return self.codec.decode(data)


class JobContext:
    """Handed to ``Job.run``: steps, child jobs, state, progress, the lease."""

    def __init__(self, run: Run) -> None:
        self._run = run
        self._loop = asyncio.get_running_loop()
        self.lease = LeaseControl(run.attempt)

    @property
    def attempt(self) -> int:
        """1 on the first attempt; counted attempts so far, this one included."""
        return self._run.attempt.delivery.attempt

    @property
    def job_id(self) -> str:
        return self._run.run_id

    @property
    def job_name(self) -> str:
        return self._run.name

    @property
    def headers(self) -> Mapping[str, str]:
        return self._run.headers

    def state(self, kind: type[S]) -> S:
        """The application state of type ``kind`` registered on the runner."""
        return cast(S, self._run.state_of(kind))

    @overload
    async def step(  # an async fn matches both overloads; the first wins
        self,
        name: str,
        fn: Callable[P, Awaitable[R]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> R: ...

    @overload
    async def step(
        self,
        name: str,
        fn: Callable[P, R],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> R: ...

    async def step(
        self,
        name: str,
        fn: Callable[P, Awaitable[R]] | Callable[P, R],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> R:
        """Run ``fn(*args, **kwargs)`` once for this run and return its result.

        On a retry, a step that already finished returns its recorded result
        (with its type, through ``fn``'s return annotation) without running.
        A name used twice in one run is two steps, told apart by call order.
        """
        with step_scope(self._run.run_id, name, self._run.replayed):  # a span with otel
            return await self._step(name, fn, *args, **kwargs)

    async def _step(
        self,
        name: str,
        fn: Callable[P, Awaitable[R]] | Callable[P, R],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> R:
        memo = _Memo(self._run, name, fn)
        found, value = await memo.lookup()
        if found:
            return cast(R, value)
        if inspect.iscoroutinefunction(fn) or _returns_awaitable(fn):
            result = await cast(Callable[P, Awaitable[R]], fn)(*args, **kwargs)
        else:
            result = await asyncio.to_thread(cast(Callable[P, R], fn), *args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
        return cast(R, await memo.record(result))

    async def submit(self, job: Job[Out], options: SubmitOptions | None = None) -> JobHandle[Out]:
        """Submit a child job, once per parent run.

        A child without an idempotency key gets an id derived from this run and
        the call's position, so a parent that retries finds the child it already
        submitted instead of starting another.
        """
        run = self._run
        run.children += 1
        derived = None
        if job.idempotency_key() is None:
            seed = f"{run.run_id}/{run.incarnation}/child/{run.children}"
            derived = hashlib.sha256(seed.encode()).hexdigest()
        return await run.submitter.submit(job, options, run_id=derived)

    def progress(self, value: Any) -> None:
        """Report progress (any MessagePack value); readable through
        ``handle.status()`` and ``stepstone show``. Cheap to call often: writes
        are debounced, and the last value is written before the run settles."""
        run = self._run
        try:
            pack(value)
        except (TypeError, ValueError) as exc:
            raise EncodingError(f"progress value cannot be stored: {exc}", job=run.name) from exc
        run.progress = value
        now = time.monotonic()
        if now - run.progress_at >= PROGRESS_INTERVAL and (
            run.progress_task is None or run.progress_task.done()
        ):
            run.progress_at = now
            run.progress_task = asyncio.get_running_loop().create_task(_write_progress(run))

    @property
    def sync(self) -> SyncContext:
        """The same context for a synchronous ``run`` (which runs in a thread)."""
        return SyncContext(self, self._loop)


class SyncContext:
    """Blocking forms of the context's async methods, for a ``def run`` job."""

    def __init__(self, ctx: JobContext, loop: asyncio.AbstractEventLoop) -> None:
        self._ctx = ctx
        self._loop = loop

    def _call(self, coro: Awaitable[R]) -> R:
        if _in_loop():
            raise RuntimeError("ctx.sync is for synchronous jobs; in async code use await ctx.step")
        return asyncio.run_coroutine_threadsafe(_as_coro(coro), self._loop).result()

    def step(self, name: str, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run ``fn`` in this (the job's) thread, once per run; see JobContext.step."""
        memo = _Memo(self._ctx._run, name, fn)
        found, value = self._call(memo.lookup())
        if found:
            return cast(R, value)
        return cast(R, self._call(memo.record(fn(*args, **kwargs))))

    def submit(self, job: Job[Out], options: SubmitOptions | None = None) -> JobHandle[Out]:
        return self._call(self._ctx.submit(job, options))

    def progress(self, value: Any) -> None:
        self._loop.call_soon_threadsafe(self._ctx.progress, value)

    def ensure_lease(self, seconds: float) -> None:
        self._call(self._ctx.lease.ensure_at_least(seconds))


async def _as_coro(awaitable: Awaitable[R]) -> R:
    return await awaitable


async def _write_progress(run: Run) -> None:
    value = run.progress
    try:
        await run.records.write_progress(run.run_id, value)
        run.progress_written = value
    except Exception as exc:  # progress is best-effort until the final flush
        log.warning("job %s: progress not written: %s", run.run_id, exc, extra=log_extra(run))


def _in_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _returns_awaitable(fn: Callable[..., object]) -> bool:
    call = getattr(fn, "__call__", None)  # noqa: B004 - async callable objects
    return call is not None and inspect.iscoroutinefunction(call)


def log_extra(run: Run) -> dict[str, object]:
    return {"job_id": run.run_id, "job_name": run.name, "attempt": run.attempt.delivery.attempt}

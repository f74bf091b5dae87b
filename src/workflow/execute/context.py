"""JobContext: what a running job sees.

``ctx.step(name, fn, ...)`` is the heart of the engine. A step runs once per
run: its result is recorded as a memo (:mod:`stepstone.execute.memos`), so a retry
reads it back instead of running ``fn`` again. The context also submits
child jobs, reports progress, controls the lease, and waits without holding
a worker (``sleep``, ``wait_for_event``, awaiting children: :mod:`stepstone.execute.durable_waits`).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any, ParamSpec, TypeVar, cast, overload

from stepstone.errors import EncodingError, InputMismatch, InvalidWait
from stepstone.execute import attributes as attributes_
from stepstone.execute import branches, patches
from stepstone.execute import callbacks as callbacks_
from stepstone.execute import durable_waits as waits
from stepstone.execute.callbacks import Callback
from stepstone.execute.memos import Memo
from stepstone.execute.scope import PROGRESS_INTERVAL, AttemptScope
from stepstone.execute.streams import StreamWriter
from stepstone.handles.handle import JobHandle
from stepstone.job import Job
from stepstone.records import fingerprint
from stepstone.records.codec import codec_for, codec_for_type, pack
from stepstone.records.layout import name_key
from stepstone.records.outcome import Outcome
from stepstone.runtime.worker import Attempt
from stepstone.submit.options import SubmitOptions
from stepstone.telemetry.tracing import step_scope

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")
T = TypeVar("T")
Out = TypeVar("Out")

log = logging.getLogger("stepstone")

_RUN_ID = codec_for_type(str)


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


class JobContext:
    """Handed to ``Job.run``: steps, child jobs, state, progress, the lease."""

    def __init__(self, run: AttemptScope) -> None:
        self._run = run
        self._loop = asyncio.get_running_loop()
        self.lease = LeaseControl(run.attempt)

    @property
    def attempt(self) -> int:
        """1 on the first attempt; counted attempts so far, this one included."""
        return self._run.attempt.delivery.attempt

    @property
    def run_id(self) -> str:
        """The id of the run this attempt belongs to (``handle.id``)."""
        return self._run.run_id

    @property
    def kind(self) -> str:
        """The job's kind (its type's NAME)."""
        return self._run.kind

    @property
    def headers(self) -> Mapping[str, str]:
        """The headers the run was submitted with (``SubmitOptions(headers=...)``),
        read-only; the ``stepstone.`` prefix is the engine's."""
        return self._run.headers

    @property
    def attributes(self) -> Mapping[str, str]:
        """The run's attributes: those it was submitted with
        (``SubmitOptions(attributes=...)``) and those it set so far, read-only."""
        return MappingProxyType(self._run.attributes)

    async def set_attributes(self, attributes: Mapping[str, str]) -> None:
        """Give the run ``attributes``, to be found by them
        (``runner.runs(attributes=...)``, ``stepstone ls --attr``); a name it
        has already takes the new value. Recorded like a step, so a retry or
        a replay agrees with the run that set them. Names and values are
        checked as :func:`~stepstone.records.attributes.check_attributes`
        says (InvalidAttribute); a run has at most 16."""
        await attributes_.set_attributes(self._run, attributes)

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
        run = self._run
        with step_scope(run.run_id, run.kind, name, run.replayed):  # a span, a duration
            return await self._step(name, fn, *args, **kwargs)

    async def _step(
        self,
        name: str,
        fn: Callable[P, Awaitable[R]] | Callable[P, R],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> R:
        run = self._run
        memo = Memo(run, name, codec_for(fn), args=fingerprint.of(args, kwargs))
        found, value = await memo.lookup()
        if found:
            return cast(R, value)
        begun = branches.step_begins(run.tree)  # (what it creates is its own)
        try:
            # Handed straight over, held by no name here: a large result the
            # memo gives back decoded is let go before its copy is made.
            return cast(R, await memo.record(await self._called(fn, *args, **kwargs)))
        finally:
            branches.step_ends(run.tree, begun)

    async def _called(
        self,
        fn: Callable[P, Awaitable[R]] | Callable[P, R],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> R:
        """What a step's function returns, a synchronous one run in the job
        thread pool, as a synchronous job's own code runs."""
        if inspect.iscoroutinefunction(fn) or _returns_awaitable(fn):
            return await cast(Callable[P, Awaitable[R]], fn)(*args, **kwargs)
        call = functools.partial(cast(Callable[P, R], fn), *args, **kwargs)
        result = await self._run.in_thread(call)
        if inspect.isawaitable(result):
            return cast(R, await result)
        return cast(R, result)

    async def submit(self, job: Job[Out], options: SubmitOptions | None = None) -> JobHandle[Out]:
        """Submit a child job, once per parent run.

        A child without an idempotency key gets an id derived from this run and
        the call's position, so a parent that retries finds the child it already
        submitted instead of starting another (a replay from a step reuses the
        id it recorded).
        """
        run = self._run
        # The submit takes a place in the run's history (its memo records the
        # child's run id), so a replay that submits where it did something
        # else, or the other way round, is caught before the submit.
        memo = Memo(run, type(job).NAME, _RUN_ID, internal="child")
        run.legacy_children += 1
        # (an unkeyed child's id names its place; in a run recorded before
        # branches existed, its count among the run's children, as it did)
        place = memo.segment if run.numbered else str(run.legacy_children)
        found, recorded = await memo.lookup()
        derived = None
        if job.idempotency_key() is None:
            seed = f"{run.run_id}/{run.incarnation}/child/{place}"
            derived = recorded if found else hashlib.sha256(seed.encode()).hexdigest()
        try:
            handle = await run.submitter.submit(job, options, run_id=derived, parent=run.run_id)
        except InputMismatch as exc:  # (permanent: the parent fails at once, naming both)
            key = job.idempotency_key()
            raise InputMismatch(exc.run_id, exc.kind, key=key, parent=run.run_id) from None
        if not found:
            await memo.record(handle.id)
        handle.wait_within(self._await_child)
        return handle

    async def _await_child(self, handle: JobHandle[Out]) -> Outcome[Out]:
        (outcome,) = await waits.children(self._run, (handle,))
        return outcome

    async def gather(self, *children: JobHandle[Any]) -> list[Any]:
        """The results of ``children`` (handles from :meth:`submit`), in order,
        once every one has ended. Until then this run is suspended: it holds
        no worker, and it resumes when the last of them ends. A failed child
        raises its :class:`~stepstone.JobFailed` here (the first in order), as
        soon as it and every child before it have ended (the others go on);
        use ``await child.join()`` for outcomes without raising."""
        outcomes = await waits.children(self._run, children)
        return [outcome.unwrap() for outcome in outcomes]

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` durably: the run gives back its worker and lease
        and resumes after the wake time, which is recorded like a step, so a
        retry or replay wakes at the same moment. Not an attempt."""
        seconds = waits.seconds_to_wait("sleep", seconds)
        wake_at = waits.wake_time(f"sleep({seconds!r})", self._run.clock.now() + seconds)
        await waits.sleep_until(self._run, wake_at)

    async def sleep_until(self, when: datetime) -> None:
        """Sleep durably until ``when`` (an aware datetime); see :meth:`sleep`."""
        if not isinstance(when, datetime) or when.tzinfo is None:
            raise InvalidWait("sleep_until takes an aware datetime (with a tzinfo)")
        await waits.sleep_until(self._run, when.timestamp())

    @overload
    async def wait_for_event(
        self,
        name: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - a durable timeout, not a cancellation
    ) -> Any: ...

    @overload
    async def wait_for_event(
        self,
        name: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
        type: type[T],
    ) -> T | None: ...

    async def wait_for_event(
        self,
        name: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
        type: Any = Any,
    ) -> Any:
        """The payload of the next event ``name`` sent to this run
        (``runner.send_event``), validated as ``type``; None if ``timeout``
        seconds pass first. Until then the run is suspended, holding no
        worker. An event sent before the run waits is kept for it; each event
        is taken once, by the first wait for its name that has not taken one,
        and a replay sees the same payload."""
        if timeout is not None:
            timeout = waits.seconds_to_wait("wait_for_event's timeout", timeout)
            waits.wake_time(f"a timeout of {timeout!r} s", self._run.clock.now() + timeout)
        return await waits.wait_for_event(self._run, name, timeout, type)

    @overload
    async def callback(
        self,
        name: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - a durable timeout, not a cancellation
    ) -> Callback[Any]: ...

    @overload
    async def callback(
        self,
        name: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
        type: type[T],
    ) -> Callback[T]: ...

    async def callback(
        self,
        name: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
        type: Any = Any,
    ) -> Callback[Any]:
        """A callback for an outside system (a payment provider, a person, a
        partner's webhook) to complete, recorded in the run: hand out its
        ``url`` (a presigned PUT, on S3: ``curl -X PUT --data @body.json
        URL`` completes it, with no credentials and no server) or its ``id``
        (``runner.complete_callback(id, value)``, ``stepstone callback
        complete``), then ``value = await cb``: the run suspends, holding no
        worker, until the callback is completed with a JSON body valid as
        ``type``. After ``timeout`` seconds (None: never), awaiting it raises
        CallbackTimeout. The same id on every replay. See
        :mod:`stepstone.execute.callbacks` and docs/streams.md."""
        _check_name("callback", name)
        if timeout is not None:
            timeout = waits.seconds_to_wait("callback's timeout", timeout)
        return await callbacks_.make(self._run, name, timeout, type)

    async def patched(self, change_id: str) -> bool:
        """Whether this run takes the new path of a code change here: True
        for a run that reaches this point on code that has the change (and
        every replay of it), False for a run whose recorded history already
        went past this point without it (it keeps the old path, which it
        recorded). Write ``if await ctx.patched("charge-in-cents"): <new>
        else: <old>`` and deploy; see :mod:`stepstone.execute.patches` and
        docs/versioning.md."""
        return await patches.patched(self._run, change_id)

    async def deprecate_patch(self, change_id: str) -> None:
        """Say that only the new path of ``change_id`` is left, once no run
        on its old path is (``stepstone ls --patch change-id``): a run that
        took the old path fails here with NonDeterministicReplay."""
        await patches.deprecate_patch(self._run, change_id)

    @overload
    def stream(self, name: str) -> StreamWriter[Any]: ...

    @overload
    def stream(self, name: str, type: type[T]) -> StreamWriter[T]: ...

    def stream(self, name: str, type: Any = None) -> StreamWriter[Any]:
        """The run's stream ``name``, to write values to as the run goes
        (``await ctx.stream("tokens").write(token)``) for readers anywhere
        (``handle.stream("tokens")``, ``runner.stream(run_id, "tokens")``):
        in order, each once, whatever retries and replays the run goes
        through. Values are encoded as step results are, through ``type``
        when given (else through each value's own type). See
        :mod:`stepstone.execute.streams` and docs/streams.md."""
        _check_name("stream", name)
        return StreamWriter(self._run, name, type)

    def idempotency_key(self, step: str) -> str:
        """A key for an outside system's idempotency (a payment provider's
        Idempotency-Key header, an SQS deduplication id): the same on every
        retry and replay of this run, derived from its id, its incarnation
        and ``step``; different for another run, or another step."""
        run = self._run
        seed = f"{run.run_id}/{run.incarnation}/key/{step}"
        return hashlib.sha256(seed.encode()).hexdigest()

    def progress(self, value: Any) -> None:
        """Report progress (any MessagePack value); readable through
        ``handle.status()`` and ``stepstone show``. Cheap to call often: writes
        are debounced, and the last value is written before the run settles."""
        run = self._run
        try:
            pack(value)
        except (TypeError, ValueError) as exc:
            raise EncodingError(f"progress value cannot be stored: {exc}", job=run.kind) from exc
        run.progress = value
        now = time.monotonic()
        if now - run.progress_at >= PROGRESS_INTERVAL and (
            run.progress_task is None or run.progress_task.done()
        ):
            run.progress_at = now
            run.write_progress_soon()

    @property
    def sync(self) -> SyncContext:
        """The same context for a synchronous ``run`` (which runs in a thread)."""
        return SyncContext(self, self._run, self._loop)


class SyncContext:
    """Blocking forms of the context's async methods, for a ``def run`` job.

    Python cannot interrupt the thread a synchronous job runs in, so when the
    worker stops its attempt (the job was cancelled, timed out, was drained
    or lost its lease) each call here that would start something new raises
    ``CancelledError`` instead: the job ends at its next step. A step already
    run still has its result recorded.
    """

    def __init__(
        self, ctx: JobContext, scope: AttemptScope, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._ctx = ctx
        self._scope = scope
        self._loop = loop

    def _call(self, awaitable: Awaitable[R]) -> R:
        """Run ``awaitable`` on the job's loop, unless the attempt was stopped."""
        stopped = self._scope.attempt.stopped
        if stopped is not None:
            _discard(awaitable)
            raise asyncio.CancelledError(f"this attempt was stopped: {stopped}")
        return self._finish(awaitable)

    def _finish(self, awaitable: Awaitable[R]) -> R:
        """Run ``awaitable`` on the job's loop and wait for its result."""
        if _in_loop():
            _discard(awaitable)
            raise RuntimeError("ctx.sync is for synchronous jobs; in async code use await ctx.step")
        return asyncio.run_coroutine_threadsafe(_as_coro(awaitable), self._loop).result()

    def step(self, name: str, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run ``fn`` in this (the job's) thread, once per run; see JobContext.step."""
        memo = Memo(self._scope, name, codec_for(fn), args=fingerprint.of(args, kwargs))
        found, value = self._call(memo.lookup())
        if found:
            return cast(R, value)
        return cast(R, self._finish(memo.record(fn(*args, **kwargs))))

    def submit(self, job: Job[Out], options: SubmitOptions | None = None) -> JobHandle[Out]:
        """Submit a child job, once per parent run; see JobContext.submit."""
        return self._call(self._ctx.submit(job, options))

    def set_attributes(self, attributes: Mapping[str, str]) -> None:
        """Give the run ``attributes``; see JobContext.set_attributes."""
        self._call(self._ctx.set_attributes(attributes))

    def progress(self, value: Any) -> None:
        """Report progress from the job's thread; see JobContext.progress."""
        self._loop.call_soon_threadsafe(self._ctx.progress, value)

    def ensure_lease(self, seconds: float) -> None:
        """Make the lease last at least ``seconds`` more before something long;
        see ``JobContext.lease.ensure_at_least``."""
        self._call(self._ctx.lease.ensure_at_least(seconds))

    def sleep(self, seconds: float) -> None:
        """Sleep durably; see JobContext.sleep."""
        self._call(self._ctx.sleep(seconds))

    def sleep_until(self, when: datetime) -> None:
        """Sleep durably until ``when`` (an aware datetime); see JobContext.sleep_until."""
        self._call(self._ctx.sleep_until(when))

    def wait_for_event(self, name: str, *, timeout: float | None = None, type: Any = Any) -> Any:
        """The next event ``name``, or None at the timeout; see JobContext.wait_for_event."""
        return self._call(self._ctx.wait_for_event(name, timeout=timeout, type=type))

    def result(self, child: JobHandle[Out]) -> Out:
        """A child's result (a handle from ``submit``), suspending this run until it has one."""
        return self._call(child.result())

    def gather(self, *children: JobHandle[Any]) -> list[Any]:
        """The results of ``children``, in order, once all have ended, suspending
        this run meanwhile; see JobContext.gather."""
        return self._call(self._ctx.gather(*children))

    def patched(self, change_id: str) -> bool:
        """See JobContext.patched."""
        return self._call(self._ctx.patched(change_id))

    def deprecate_patch(self, change_id: str) -> None:
        """Only the new path of ``change_id`` is left; see JobContext.deprecate_patch."""
        self._call(self._ctx.deprecate_patch(change_id))

    def idempotency_key(self, step: str) -> str:
        """A key for an outside system's idempotency, the same on every retry and
        replay of this run; see JobContext.idempotency_key."""
        return self._ctx.idempotency_key(step)

    def callback(self, name: str, *, timeout: float | None = None, type: Any = Any) -> SyncCallback:
        """A callback to hand out and wait for, from a synchronous job; see JobContext.callback."""
        return SyncCallback(self, self._call(self._ctx.callback(name, timeout=timeout, type=type)))

    def stream(self, name: str, type: Any = None) -> SyncStreamWriter:
        """The run's stream ``name``, written from a synchronous job; see JobContext.stream."""
        return SyncStreamWriter(self, self._ctx.stream(name, type))


class SyncCallback:
    """A callback of a synchronous job's run: its ``id`` and ``url``, and a
    blocking ``wait`` (see :class:`~stepstone.execute.callbacks.Callback`)."""

    def __init__(self, sync: SyncContext, callback: Callback[Any]) -> None:
        self._sync = sync
        self._callback = callback
        self.name = callback.name
        """The name the run gave it."""
        self.id = callback.id
        """Its id (see Callback.id)."""
        self.url = callback.url
        """Its presigned URL, or None (see Callback.url)."""
        self.expires_at = callback.expires_at
        """When its timeout passes (None: never)."""

    def wait(self) -> Any:
        """The value it is completed with, suspending the run until then."""
        return self._sync._call(self._callback.wait())


class SyncStreamWriter:
    """A stream of a synchronous job's run: blocking ``write`` and ``close``
    (see :class:`~stepstone.execute.streams.StreamWriter`)."""

    def __init__(self, sync: SyncContext, writer: StreamWriter[Any]) -> None:
        self._sync = sync
        self._writer = writer
        self.name = writer.name
        """The stream's name."""

    def write(self, value: Any) -> None:
        """Append ``value`` to the stream, once for this run."""
        self._sync._call(self._writer.write(value))

    def close(self) -> None:
        """End the stream for its readers."""
        self._sync._call(self._writer.close())


def _check_name(what: str, name: object) -> None:
    """Refuse a name that cannot name a stream or a callback (ValueError, at the call)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a {what}'s name is a non-empty str, not {name!r}")
    name_key(name)


async def _as_coro(awaitable: Awaitable[R]) -> R:
    return await awaitable


def _discard(awaitable: Awaitable[object]) -> None:
    """Close a coroutine that will not be awaited (no "never awaited" warning)."""
    if inspect.iscoroutine(awaitable):
        awaitable.close()


def _in_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _returns_awaitable(fn: Callable[..., object]) -> bool:
    call = getattr(fn, "__call__", None)  # noqa: B004 - async callable objects
    return call is not None and inspect.iscoroutinefunction(call)

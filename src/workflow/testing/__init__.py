"""Testing kit for applications built on stepstone; also a pytest plugin.

Installed with stepstone, the plugin is loaded by pytest automatically (the
``pytest11`` entry point) and adds fixtures, all named ``stepstone_*``:

``stepstone_moto_server``
    moto's S3 on a local port for the session (needs ``moto[server,s3]``).
``stepstone_s3_bucket`` / ``stepstone_s3_url`` / ``stepstone_s3_store``
    a fresh, empty bucket per test; its ``s3://`` URL; an ObjectStore on it.
``stepstone_runner``
    a JobRunner on that bucket, started before the test and drained after it.
``stepstone_memory_runner``
    the same in memory, on ``stepstone_clock``: no I/O, time moves when told.
``stepstone_clock``
    a :class:`FakeClock` (also importable from here).
``stepstone_jobs`` / ``stepstone_state`` / ``stepstone_runner_options``
    what the runners register and how they are built. By default they come
    from the ``@pytest.mark.stepstone(jobs=[...], state=[...], **options)``
    marker; override any of them in a conftest to set them for a directory.

and helpers for the tests themselves: :func:`run_job` (submit and wait,
with a deadline that says why it passed), :func:`fail_once` (a step that
fails transiently the first time), :func:`advance` (move a FakeClock and
let the loops it wakes run) and :func:`wait_until` (poll a condition with a
deadline, never sleep and hope; :func:`wait_until_sync` where there is no
event loop). docs/testing.md has a worked example.

Importing this module is cheap: moto and boto3 are imported inside the
fixtures that need them, so a project's test run pays for S3 only in the
tests that use it.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar, cast

import pytest

from stepstone.job import Job
from stepstone.records.outcome import Outcome
from stepstone.runner import JobRunner, SubmitOptions
from stepstone.runtime.clock import FakeClock
from stepstone.runtime.memory_queue import MemoryQueue
from stepstone.store import MemoryStore, ObjectStore
from stepstone.testing.moto import FAKE_AWS_ENV, WriteLock, moto_server

if TYPE_CHECKING:
    from stepstone.handles.state import JobState

F = TypeVar("F", bound=Callable[..., Any])


def _async_fixture(fn: F) -> F:
    """pytest-asyncio's fixture decorator when it is installed, so the async
    fixtures work in its strict mode as well as in auto mode; else pytest's
    (and the project's async plugin must handle them)."""
    try:
        import pytest_asyncio
    except ImportError:  # pragma: no cover
        return cast(F, pytest.fixture(fn))
    return cast(F, pytest_asyncio.fixture(fn))


P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)
Out = TypeVar("Out")

__all__ = [
    "FAKE_AWS_ENV",
    "TEST_RUNNER_DEFAULTS",
    "FakeClock",
    "Flaky",
    "InjectedFailure",
    "WriteLock",
    "advance",
    "fail_once",
    "moto_server",
    "run_job",
    "run_job_outcome",
    "wait_until",
    "wait_until_sync",
]

TEST_RUNNER_DEFAULTS: dict[str, Any] = {
    "poll_interval": 0.05,
    "retry_backoff": 0.0,
    "drain_timeout": 10.0,
}
"""What the runner fixtures change from JobRunner's defaults, for fast tests:
a retry runs at once and an idle worker polls often. The marker's options
and ``stepstone_runner_options`` override these."""

MARKER = "stepstone"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(jobs=[...], state=[...], **runner_options): what stepstone_runner and "
        "stepstone_memory_runner register, and JobRunner keyword arguments",
    )


# -- helpers ---------------------------------------------------------------------------


class InjectedFailure(RuntimeError):
    """The error :func:`fail_once` raises: transient (a plain RuntimeError), so
    the runner retries, unless the job's ``classify`` says otherwise."""


class Flaky(Protocol[P, R_co]):
    """A function that fails its first ``times`` calls; see :func:`fail_once`."""

    calls: int
    """Every call so far, failed or not."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co:
        """Call the function: it raises InjectedFailure while it has failed fewer
        than ``times`` calls, then answers as the wrapped function does."""

    def reset(self) -> None:
        """Fail again from the next call (the count starts over)."""


def fail_once(
    fn: Callable[P, R], *, times: int = 1, error: BaseException | None = None
) -> Flaky[P, R]:
    """``fn``, except that its first ``times`` calls raise ``error``
    (an :class:`InjectedFailure` by default) without running it.

    Use it to prove a job recovers: the step fails, the attempt fails, the
    retry runs the step again, and steps recorded before it replay. Works on
    sync and async functions and keeps ``fn``'s signature and return
    annotation, so ``ctx.step`` stores and rebuilds results as it would for
    ``fn``. Create it once (as a decorator or in the test), not inside
    ``run``: the count lives on the wrapper, and a new wrapper each attempt
    would fail every attempt.
    """
    if times < 0:
        raise ValueError("times must not be negative")
    lock = threading.Lock()
    state = {"calls": 0}

    def should_fail() -> bool:
        with lock:
            state["calls"] += 1
            wrapper.calls = state["calls"]
            return state["calls"] <= times

    def failure() -> BaseException:
        name = getattr(fn, "__qualname__", repr(fn))
        return error if error is not None else InjectedFailure(f"injected failure in {name}")

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
            if should_fail():
                raise failure()
            return await fn(*args, **kwargs)

        wrapper: Any = async_wrapper
    else:

        @functools.wraps(fn)
        def sync_wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
            if should_fail():
                raise failure()
            return fn(*args, **kwargs)

        wrapper = sync_wrapper

    def reset() -> None:
        with lock:
            state["calls"] = 0
            wrapper.calls = 0

    wrapper.calls = 0
    wrapper.reset = reset
    return cast(Flaky[P, R], wrapper)


async def run_job_outcome(
    runner: JobRunner,
    job: Job[Out],
    *,
    timeout: float = 10.0,  # noqa: ASYNC109 - a deadline that fails the test with a reason
    options: SubmitOptions | None = None,
) -> Outcome[Out]:
    """Submit ``job`` and wait for its outcome, success or failure.

    Something must be running the job: the runner itself (``async with
    runner``, or the runner fixtures, which are started for the test) or a
    worker in another process on the same store. After ``timeout`` seconds it
    fails the test saying where the job is (scheduled and waiting for the
    clock? ready and never claimed? how many attempts, and the last error),
    which is usually the reason.
    """
    handle = await runner.submit(job, options)
    try:
        return await handle.join(timeout=timeout)
    except TimeoutError:
        state = await runner.status(handle.id)
        raise AssertionError(_stuck(job, handle.id, timeout, state)) from None


async def run_job(
    runner: JobRunner,
    job: Job[Out],
    *,
    timeout: float = 10.0,  # noqa: ASYNC109 - a deadline that fails the test with a reason
    options: SubmitOptions | None = None,
) -> Out:
    """Submit ``job``, wait for it, return its result; raises
    :class:`~workflow.JobFailed` if it failed. See :func:`run_job_outcome`."""
    outcome = await run_job_outcome(runner, job, timeout=timeout, options=options)
    return outcome.unwrap()


def _stuck(job: Job[Any], run_id: str, timeout: float, state: JobState | None) -> str:
    where = f"run {run_id} ({job.NAME}) did not finish within {timeout}s"
    if state is None:
        return f"{where}; the store knows nothing of it"
    detail = f"{where}; it is {state.status} after {state.attempts} attempt(s)"
    if state.last_error:
        detail += f", last error: {state.last_error}"
    if state.status == "scheduled" and state.run_at is not None:
        detail += f" (due at {state.run_at}: move the clock with advance())"
    elif state.status == "ready":
        detail += " (is a runner started, with the job type registered on it?)"
    return detail


async def advance(clock: FakeClock, seconds: float) -> None:
    """Move ``clock`` forward and give the loops it wakes (the worker's
    run-at wait, the retention sweeper) an iteration of the event loop."""
    clock.advance(seconds)
    for _ in range(3):
        await asyncio.sleep(0)


async def wait_until(
    condition: Callable[[], object | Awaitable[object]],
    *,
    timeout: float = 10.0,  # noqa: ASYNC109 - a deadline that fails the test
    interval: float = 0.005,
    message: str = "",
    progress: Callable[[], object] | None = None,
) -> None:
    """Poll ``condition`` until it returns something true; fail the test at the deadline.

    ``condition`` is a plain function or a coroutine function (its result is
    awaited), called at once and then every ``interval`` seconds. After
    ``timeout`` seconds without a true answer it raises AssertionError,
    naming what was awaited (``message``, or the condition's name) and what
    the condition last returned. Wait on what you expect, never ``sleep``
    and hope: the deadline only matters when the test fails, so make it
    generous (a loaded machine is slow, not wrong). From code with no event
    loop (a thread, a browser test), use :func:`wait_until_sync`.

    ``progress``, for a wait on much work (every job of a batch done): a
    plain function whose answer changes as the work moves on (how many are
    done). The deadline then moves on with it: ``timeout`` is how long the
    wait goes without progress, so a loaded machine that is slow but moving
    passes, and work that stalls fails within ``timeout``.
    """
    wait = _Wait(condition, timeout, message, progress)
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if wait.done(result):
            return
        await asyncio.sleep(interval)


def wait_until_sync(
    condition: Callable[[], object],
    *,
    timeout: float = 10.0,
    interval: float = 0.01,
    message: str = "",
    progress: Callable[[], object] | None = None,
) -> None:
    """:func:`wait_until` for code that has no event loop to await in: it
    blocks the thread between polls. ``condition`` must be a plain function
    (another process or thread changes what it reads)."""
    wait = _Wait(condition, timeout, message, progress)
    while True:
        result = condition()
        if inspect.isawaitable(result):
            if inspect.iscoroutine(result):
                result.close()
            raise TypeError("wait_until_sync takes a plain function; await wait_until instead")
        if wait.done(result):
            return
        time.sleep(interval)


class _Wait:
    """One wait's deadline (moved on by ``progress``), and the failure it ends in."""

    def __init__(
        self,
        condition: Callable[[], object],
        timeout: float,
        message: str,
        progress: Callable[[], object] | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self.started = time.monotonic()
        self.deadline = self.started + timeout
        self.timeout = timeout
        self.what = message or getattr(condition, "__qualname__", "the condition")
        self.progress = progress
        self.seen = None if progress is None else progress()

    def done(self, result: object) -> bool:
        """True when ``result`` is true; raise AssertionError once the deadline passed."""
        if result:
            return True
        now = time.monotonic()
        if self.progress is not None and (seen := self.progress()) != self.seen:
            self.seen = seen
            self.deadline = now + self.timeout
        if now > self.deadline:
            last = "" if result is False or result is None else f" (it last returned {result!r})"
            took = f"{self.timeout:g}s"
            if self.progress is not None:
                took = f"{now - self.started:.1f}s, the last {self.timeout:g}s without progress"
                took += f" (at {self.seen!r})"
            raise AssertionError(f"timed out after {took} waiting for {self.what}{last}")
        return False


# -- fixtures: what to register ---------------------------------------------------------


def _marker_kwargs(request: pytest.FixtureRequest) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    # Closest last, so a test's marker overrides its class's and module's.
    for marker in reversed(list(request.node.iter_markers(MARKER))):
        if marker.args:
            raise pytest.UsageError(
                f"@pytest.mark.{MARKER} takes keyword arguments only: jobs=[...], state=[...], "
                "and JobRunner options"
            )
        merged.update(marker.kwargs)
    return merged


@pytest.fixture
def stepstone_jobs(request: pytest.FixtureRequest) -> list[type[Job[Any]]]:
    """The job types the runner fixtures register: the marker's ``jobs``.
    Override in a conftest to register the same ones for every test there."""
    return list(_marker_kwargs(request).get("jobs", ()))


@pytest.fixture
def stepstone_state(request: pytest.FixtureRequest) -> list[object]:
    """Application state for ``ctx.state(T)``: the marker's ``state``."""
    return list(_marker_kwargs(request).get("state", ()))


@pytest.fixture
def stepstone_runner_options(request: pytest.FixtureRequest) -> dict[str, Any]:
    """JobRunner keyword arguments: :data:`TEST_RUNNER_DEFAULTS` and then the
    marker's other keywords (``concurrency=``, ``max_attempts=``, ...)."""
    options = dict(TEST_RUNNER_DEFAULTS)
    options.update({k: v for k, v in _marker_kwargs(request).items() if k not in ("jobs", "state")})
    return options


@pytest.fixture
def stepstone_clock() -> FakeClock:
    """A FakeClock; the memory runner reads it, so run-at times and backoffs
    pass when the test moves it (:func:`advance`)."""
    return FakeClock()


def _build(
    store: ObjectStore,
    jobs: Iterable[type[Job[Any]]],
    state: Iterable[object],
    options: dict[str, Any],
    fixture: str,
) -> JobRunner:
    jobs = list(jobs)
    if not jobs:
        raise pytest.UsageError(
            f"{fixture} has no job types to run: mark the test "
            f"@pytest.mark.{MARKER}(jobs=[MyJob]) or override the stepstone_jobs fixture"
        )
    return JobRunner(store, jobs=jobs, state=state, **options)


@_async_fixture
async def stepstone_memory_runner(
    stepstone_clock: FakeClock,
    stepstone_jobs: list[type[Job[Any]]],
    stepstone_state: list[object],
    stepstone_runner_options: dict[str, Any],
) -> AsyncIterator[JobRunner]:
    """A running JobRunner in memory (MemoryStore, MemoryQueue) on ``stepstone_clock``."""
    options = dict(stepstone_runner_options)
    options.setdefault("clock", stepstone_clock)
    clock = options["clock"]
    options.setdefault("queue", MemoryQueue(clock=clock))
    store = MemoryStore(clock=clock.now)
    runner = _build(store, stepstone_jobs, stepstone_state, options, "stepstone_memory_runner")
    async with runner:
        yield runner
    await runner.close()


# -- fixtures: S3 on moto ------------------------------------------------------------------


@pytest.fixture(scope="session")
def stepstone_moto_server() -> Iterator[str]:
    """moto's S3 on a free local port for the session (see :func:`moto_server`)."""
    try:
        import moto.moto_server.threaded_moto_server  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"stepstone's S3 fixtures need moto[server,s3] ({exc})")
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture
def stepstone_s3_bucket(stepstone_moto_server: str) -> str:
    """A fresh, empty, uniquely named bucket on the moto server."""
    import boto3

    name = f"stepstone-{uuid.uuid4().hex[:20]}"
    client = boto3.client("s3", endpoint_url=stepstone_moto_server, region_name="us-east-1")
    client.create_bucket(Bucket=name)
    return name


@pytest.fixture
def stepstone_s3_url(stepstone_moto_server: str, stepstone_s3_bucket: str) -> str:
    """``s3://<bucket>/jobs?endpoint_url=...``: what a JobRunner or ``stepstone --store`` takes."""
    return f"s3://{stepstone_s3_bucket}/jobs?endpoint_url={stepstone_moto_server}&region=us-east-1"


@_async_fixture
async def stepstone_s3_store(stepstone_s3_url: str) -> AsyncIterator[ObjectStore]:
    """An ObjectStore on the test's bucket."""
    from stepstone.store import open_store

    store = open_store(stepstone_s3_url)
    yield store
    await store.close()


@_async_fixture
async def stepstone_runner(
    stepstone_s3_store: ObjectStore,
    stepstone_jobs: list[type[Job[Any]]],
    stepstone_state: list[object],
    stepstone_runner_options: dict[str, Any],
) -> AsyncIterator[JobRunner]:
    """A JobRunner on the test's bucket (its StoreQueue too), running for the
    test and drained after it: what production runs, on moto."""
    runner = _build(
        stepstone_s3_store,
        stepstone_jobs,
        stepstone_state,
        stepstone_runner_options,
        "stepstone_runner",
    )
    async with runner:
        yield runner
    await runner.queue.close()

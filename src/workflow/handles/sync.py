"""Using a runner from code that has no event loop: Django and Flask views, scripts.

:meth:`JobRunner.submit_sync` and :meth:`JobRunner.handle_sync` give a
:class:`SyncHandle`, whose methods block the calling thread. The work
itself still runs as coroutines, on one event loop per runner:

- the loop of the runner's worker, when it runs (``async with runner`` in
  another thread: an ASGI server running sync views in threads), so every
  part of the runner keeps to the loop it was started on;
- otherwise a private loop in a daemon thread the runner owns
  (:class:`LoopThread`), started on first use and closed with the runner
  (``runner.close_sync()``, or ``await runner.close()``).

Any number of threads may call at once: each call hands its coroutine to
that loop (``asyncio.run_coroutine_threadsafe``) and waits for its answer,
so the runner's own state is only ever touched from the loop's thread. A
call from inside a running event loop is refused with RuntimeError, since
blocking there would stop that loop (and deadlock, were it the runner's):
async code awaits ``runner.submit``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

from stepstone.handles.handle import JobHandle
from stepstone.handles.state import JobState
from stepstone.records.outcome import Outcome

T = TypeVar("T")
R = TypeVar("R")


class LoopThread:
    """An event loop running in a daemon thread, started on first use."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def loop_if_running(self) -> asyncio.AbstractEventLoop | None:
        """The loop if it has been started (and not stopped since), else None."""
        return self._loop

    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop, started now if it is not yet (safe from any thread)."""
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()
                thread = threading.Thread(
                    target=_serve, args=(loop, ready), name=self._name, daemon=True
                )
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    def run(self, coro: Coroutine[Any, Any, R]) -> R:
        """Run ``coro`` on the loop and wait for its result (see :func:`call_on`)."""
        _refuse_inside_a_loop(coro)  # before a loop is started for nothing
        return call_on(self.loop(), coro)

    def stop(self) -> None:
        """Stop the loop and wait for its thread; the next use starts a new one."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        if thread is not threading.current_thread():
            thread.join()


def _serve(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
    asyncio.set_event_loop(loop)
    loop.call_soon(ready.set)
    try:
        loop.run_forever()
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


def call_on(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, R]) -> R:
    """Run ``coro`` on ``loop`` (another thread's) and block until it is done.

    Raises RuntimeError, before anything runs, when called from a thread
    with a running event loop: blocking it would stop that loop. Ctrl-C or
    any other interruption of the wait cancels the coroutine."""
    _refuse_inside_a_loop(coro)
    future = asyncio.run_coroutine_threadsafe(coro, loop)
    try:
        return future.result()
    except BaseException:
        future.cancel()
        raise


def _refuse_inside_a_loop(coro: Coroutine[Any, Any, Any]) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    coro.close()
    raise RuntimeError(
        "a blocking stepstone call (submit_sync, a SyncHandle) was made inside a running "
        "event loop, which it would stop: await runner.submit(...) and the JobHandle instead"
    )


class SyncHandle(Generic[T]):
    """A :class:`JobHandle` for code without an event loop: the same methods,
    blocking. ``result(timeout)`` is the typed result (raising JobFailed, or
    TimeoutError after ``timeout`` seconds, when the job keeps running)."""

    def __init__(
        self, handle: JobHandle[T], call: Callable[[Coroutine[Any, Any, Any]], Any]
    ) -> None:
        self._handle = handle
        self._call = call
        self.id = handle.id
        self.newly_submitted = handle.newly_submitted

    def __repr__(self) -> str:
        return f"<SyncHandle {self.id} newly_submitted={self.newly_submitted}>"

    def result(self, timeout: float | None = None) -> T:
        """Wait for the job's result; raises JobFailed if it failed (JobCancelled
        if cancelled), TimeoutError after ``timeout`` seconds."""
        result: T = self._call(self._handle.result(timeout))
        return result

    def join(self, timeout: float | None = None) -> Outcome[T]:
        """Wait for the outcome and return it, success or failure, without raising."""
        outcome: Outcome[T] = self._call(self._handle.join(timeout))
        return outcome

    def poll(self) -> Outcome[T] | None:
        """The outcome without waiting; None while the job runs."""
        outcome: Outcome[T] | None = self._call(self._handle.poll())
        return outcome

    def status(self) -> JobState | None:
        """Where the job is now; None if nothing is known of it."""
        state: JobState | None = self._call(self._handle.status())
        return state

    def cancel(self, *, leave_children: bool = False) -> bool:
        """Cancel the job unless it has already finished, with its live
        children unless ``leave_children``; True if this call cancelled it."""
        cancelled: bool = self._call(self._handle.cancel(leave_children=leave_children))
        return cancelled

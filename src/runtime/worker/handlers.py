"""The handlers registered by kind, and how each is called: an async one on
the loop, a plain one in the worker's :class:`~stepstone.runtime.worker.threads.JobThreads`."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from .lease import Attempt
from .threads import JobThreads

Handler = Callable[[Attempt], Awaitable[object]] | Callable[[Attempt], object]
"""An async function (run on the loop) or a plain function (run in a thread)."""


@dataclass(frozen=True)
class Registration:
    """What ``Worker.register`` was told about one kind."""

    handler: Handler
    is_async: bool
    max_in_flight: int | None
    timeout: float | None
    lease: float | None = None
    """This kind's lease, where it needs a longer one than the worker's."""


def is_async(handler: object) -> bool:
    """Whether calling ``handler`` gives an awaitable: a coroutine function,
    a partial of one, or an object with an async ``__call__``."""
    target = handler
    while isinstance(target, functools.partial):
        target = target.func
    return inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(
        getattr(target, "__call__", None)  # noqa: B004 - looking for an async __call__
    )


async def call_handler(registration: Registration, attempt: Attempt, threads: JobThreads) -> object:
    """Run the handler on ``attempt``: on the loop, or in ``threads``."""
    if registration.is_async:
        result = registration.handler(attempt)
        return await result if inspect.isawaitable(result) else result
    result = await threads.call(registration.handler, attempt)
    # A sync callable that hands back an awaitable (a lambda around an
    # async function) still gets it run.
    return await result if inspect.isawaitable(result) else result

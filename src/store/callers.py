"""Serving a batch of requests on a thread, and telling their callers on
their event loops: what the local stores' batches (a FileStore's, a
SqliteStore's) share."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar


class Served(Protocol):
    """A request a batch serves: the batch sets ``error`` when it failed."""

    error: BaseException | None


R = TypeVar("R", bound=Served)


def serve_all(serve: Callable[[list[R]], None], requests: list[R]) -> None:
    """``serve(requests)``; if it raises (a bug, an interrupt), the error is
    every request's that has none, loudly, rather than lost."""
    try:
        serve(requests)
    except BaseException as exc:
        for request in requests:
            if request.error is None:
                request.error = exc


def tell(waiting: Iterable[tuple[asyncio.Future[None], asyncio.AbstractEventLoop]]) -> None:
    """Resolve each caller's future on its own loop, with one call into each
    loop for all of its callers (a closed loop is skipped: nobody waits
    there any more)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
    for done, loop in waiting:
        by_loop.setdefault(loop, []).append(done)
    for loop, futures in by_loop.items():
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_resolve, futures)


def _resolve(futures: list[asyncio.Future[None]]) -> None:
    for done in futures:
        if not done.done():
            done.set_result(None)

"""The finished runs a long-lived view shows: the outcome objects as last
listed, newest written first, listed again in the background as pages ask.

A run id says nothing of when its run ended, so the newest finished runs are
found only by listing every outcome key: a LIST per thousand, and on a
directory store a ``stat`` a key, which at a hundred thousand runs takes
longer than a page may. A view that refreshes every few seconds would pay
that on every refresh. So it lists beside the pages instead: a page starts a
listing (unless one is under way, or the last is younger than ``PACE`` times
what it took, when that was more than a moment), waits a moment for it when
the last was that quick, and takes the last complete one. On a small store
the listing is done in that moment and every page is up to date; on a big
one a page answers at once, with finished runs as they were a few listings'
time ago, and the listing takes at most a ``PACE``-th of the view's time (it
shares the process, and a listing is mostly Python holding the
interpreter). At most one listing runs at a time, and none while no page
asks, so an idle view costs nothing. A run's own page always reads its
records afresh.

A page never waits behind the listing: while one is served
(:meth:`FinishedListing.serving`) the listing pauses between pages of its
scan, so the two do not share the interpreter; it goes on between requests.
A page waits for it only while it is known to be quick (or, before the first
completes, for ``QUICK`` seconds: a small store's first page shows its runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

from stepstone.ops.reads import Inspected, iter_outcomes
from stepstone.store import ObjectInfo
from stepstone.store.errors import StoreError

PACE = 4.0
"""A listing is started no sooner than this many times its last one's
duration after that one began..."""
QUICK = 0.05
"""... unless that one took less than this many seconds: then every page
lists afresh (a small store's pages are always up to date)."""


@dataclass(frozen=True, slots=True)
class Listed:
    """One complete listing of the outcome objects."""

    infos: list[ObjectInfo]
    """Newest written first (by the store's last-modified time)."""
    began: float
    """When the listing began (the runner's clock)."""
    took: float
    """How long it took, in seconds."""


class FinishedListing:
    """The outcome listing of one view (see the module docstring)."""

    def __init__(self, runner: Inspected) -> None:
        self._runner = runner
        self._listed: Listed | None = None
        self._listing: asyncio.Task[None] | None = None
        self._last_start = 0.0
        """When the last complete listing began (``time.monotonic``: pacing
        is no matter of the runner's clock, which a test may hold still)."""
        self.failed: str | None = None
        """Why the last listing failed (None: it did not); the one before stays."""
        self._serving = 0
        """Pages being served, less those waiting here for the listing."""
        self._free = asyncio.Event()
        """Set while no page is being served: the listing may go on."""
        self._free.set()

    @property
    def listed(self) -> Listed | None:
        """The last complete listing, without starting or waiting for one."""
        return self._listed

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """Around serving a page: the listing pauses until none is."""
        self._serve(1)
        try:
            yield
        finally:
            self._serve(-1)

    def _serve(self, change: int) -> None:
        self._serving += change
        if self._serving > 0:
            self._free.clear()
        else:
            self._free.set()

    def start(self) -> None:
        """List now (a view starting: its first page should not wait for it)."""
        if self._listing is None:
            self._listing = asyncio.create_task(self._list())

    async def latest(self, *, wait: float) -> Listed | None:
        """The last complete listing, having waited up to ``wait`` seconds for
        the one under way when the last took no longer (one is started now
        unless one was, or the last is too recent: ``PACE``); None while none
        is complete."""
        last = self._listed
        pace = PACE * last.took if last is not None and last.took >= QUICK else 0.0
        if last is None or time.monotonic() - self._last_start >= pace:
            self.start()
        wait = min(wait, QUICK) if last is None else wait if last.took <= wait else 0.0
        if self._listing is not None and wait > 0:
            self._serve(-1)  # this page waits for it: let it go on meanwhile
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(self._listing), wait)
            finally:
                self._serve(1)
        return self._listed

    async def _list(self) -> None:
        began = self._runner.clock.now()
        start = time.monotonic()
        try:
            infos: list[ObjectInfo] = []
            async for info in iter_outcomes(self._runner):
                infos.append(info)
                if not self._free.is_set():
                    await self._free.wait()
        except StoreError as exc:
            self.failed = str(exc)
        else:
            infos.sort(key=lambda info: info.modified, reverse=True)
            self._listed = Listed(infos, began, time.monotonic() - start)
            self._last_start, self.failed = start, None
        finally:
            self._listing = None

    async def close(self) -> None:
        """Stop a listing under way."""
        if self._listing is not None:
            self._listing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listing

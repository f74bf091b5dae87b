"""Notices of objects placed in a SQLite store, by any process on this machine.

A worker waiting for work would otherwise find a job another process
submitted only at its next listing. So every process that commits a write
which placed an object then sets the database file's times (``ring``: one
system call, after the commit, so whoever hears it can already read what
was committed), and a watcher hears that through inotify on the file's
directory (:mod:`stepstone.store.inotify`), on the event loop. It then asks
the database, on the store's reading thread, which keys under its prefix
were written since the last write it knew of: every write has a number, in
order (``objects.id``), so that is one look at an index, however busy the
database is (:func:`stepstone.store.sqlite.objects.changes`). Looks do not
pile up: the first ring after a quiet spell is looked into at once, and the
rings heard while a look is under way, or within ``LOOK_GAP`` after it, make
one more look when that time is up. (Every commit rings, this process's
own too: on a busy store a watcher would otherwise look after each.)

A notice is a hint: a watch can overflow, other machines' writes (the file
on a network filesystem) ring nothing here, and a platform without inotify
has no watch (``watch_changes`` answers None). The caller goes on listing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable

from .. import inotify
from ..errors import StoreError

log = logging.getLogger("stepstone.store.sqlite")

LOOK_GAP = 0.005
"""Seconds between the end of a watcher's look and its next: what a notice
may wait on a busy store, for at most one look every ``LOOK_GAP``."""

Look = Callable[[str, int | None], Awaitable[tuple[int, list[str] | None]]]
"""Asks the database for the keys placed under a prefix since a write's
number (None: only the last number), and the last number."""


def ring(path: str) -> None:
    """Tell the watchers of the database at ``path`` that objects were placed."""
    with contextlib.suppress(OSError):  # (a hint: a watcher lists anyway)
        os.utime(path)


def watch(
    path: str,
    prefix: str,
    look: Look,
    on_change: Callable[[str | None], None],
    *,
    since: int | None = None,
) -> Callable[[], None] | None:
    """Call ``on_change(key)`` on the running loop for each object placed
    directly under ``prefix`` in the database at ``path`` by any process,
    ``on_change(None)`` when notices were lost; returns the function that
    stops it, or None where this platform offers no watch. ``since``, the
    number of the last write when the caller asked: notices begin there, so
    an object placed while the watch starts is heard too. Without it they
    begin with the watch's first look, a moment after the call, and what is
    placed meanwhile goes unheard (the caller's listing finds it)."""
    watcher = _Watcher(prefix, look, on_change, since)
    name = os.path.basename(path)

    def rung(names: list[str] | None) -> None:
        if names is None or name in names:
            watcher.ring()

    found = inotify.watch(os.path.dirname(path), inotify.TOUCHED, rung)
    if found is None:
        return None
    watcher.start(found)
    return watcher.stop


class _Watcher:
    """One prefix's looks: where it has looked up to, and one look at a time."""

    def __init__(
        self,
        prefix: str,
        look: Look,
        on_change: Callable[[str | None], None],
        since: int | None,
    ) -> None:
        self._prefix = prefix
        self._look = look
        self._on_change = on_change
        self._seen = since
        self._watch: inotify.DirectoryWatch | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self, watch: inotify.DirectoryWatch) -> None:
        self._watch = watch
        self.ring()  # (without ``since``, the first look learns where the numbers are, and no more)

    def ring(self) -> None:
        """A look now; rings heard meanwhile wait in the kernel until it is done."""
        if self._watch is None:
            return
        self._watch.pause()
        self._task = asyncio.get_running_loop().create_task(self._looks())

    def stop(self) -> None:
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.stop()
        if self._task is not None:
            self._task.cancel()

    async def _looks(self) -> None:
        try:
            try:
                top, keys = await self._look(self._prefix, self._seen)
            except StoreError as exc:
                log.debug("could not look for changes under %s: %s", self._prefix, exc)
                if self._seen is not None:
                    self._on_change(None)
            else:
                first, self._seen = self._seen is None, top
                if keys is None and not first:
                    self._on_change(None)
                for key in keys if not first and keys else ():
                    self._on_change(key)
            await asyncio.sleep(LOOK_GAP)
        finally:
            self._task = None
            if self._watch is not None:
                self._watch.resume()

"""Watching a directory for changes, read on the event loop: the ground of
the local stores' change notices (:class:`stepstone.store.base.ChangeNotices`).

Linux tells a process for free when an entry of a directory is created,
moved in, or has its times changed, by any process (inotify). The watch is
read on the event loop (``loop.add_reader``), so no thread waits for it and
nothing is polled. A watch can overflow, and a platform without inotify has
none (``watch`` answers None): a notice is a hint, and whoever hears them
goes on looking by itself, only less in a hurry.

The binding is ``inotify_simple`` (a maintained wrapper of libc's calls
through ctypes, Linux only).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

log = logging.getLogger("stepstone.store")

if sys.platform == "linux":  # pragma: no branch - the one platform with inotify
    try:
        import inotify_simple  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - installed with stepstone on Linux
        inotify_simple = None
else:  # pragma: no cover
    inotify_simple = None

PLACED = "placed"
"""An entry created or moved into the directory."""

TOUCHED = "touched"
"""An entry whose attributes (its times) changed."""


class DirectoryWatch:
    """A directory's watch, read on the event loop while it is not paused."""

    def __init__(self, notify: Any, on_events: Callable[[], None]) -> None:
        self._notify = notify
        self._loop = asyncio.get_running_loop()
        self._on_events = on_events
        self._paused = True
        self.resume()

    def pause(self) -> None:
        """Stop reading: events wait in the kernel (one of a kind while
        unread), for ``resume``."""
        if not self._paused:
            self._paused = True
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._notify.fileno())

    def resume(self) -> None:
        if self._paused:
            self._paused = False
            self._loop.add_reader(self._notify.fileno(), self._on_events)

    def stop(self) -> None:
        self.pause()
        self._notify.close()


def watch(
    directory: str, what: str, on_names: Callable[[list[str] | None], None]
) -> DirectoryWatch | None:
    """Call ``on_names(names)`` on the running loop with the names of the
    files in ``directory`` (made if missing) that were ``what`` (PLACED or
    TOUCHED), a batch of events at a time, and ``on_names(None)`` when events
    were lost; returns the watch, or None where this platform offers none."""
    if inotify_simple is None:
        return None
    flags = inotify_simple.flags
    mask = flags.CREATE | flags.MOVED_TO if what == PLACED else flags.ATTRIB
    os.makedirs(directory, exist_ok=True)
    notify = inotify_simple.INotify(nonblocking=True)
    try:
        notify.add_watch(directory, mask)
    except OSError as exc:
        notify.close()
        log.info("no change notices for %s (%s): listing finds its changes", directory, exc)
        return None

    def readable() -> None:
        try:
            events = list(notify.read(timeout=0))
        except OSError:
            events = []
        if any(event.mask & flags.Q_OVERFLOW for event in events):
            on_names(None)
            return
        names = [e.name for e in events if e.name and not e.mask & flags.ISDIR]
        if names:
            on_names(names)

    return DirectoryWatch(notify, readable)

"""Notices of objects placed in a FileStore, by any process on this machine.

A process that waits for work in a directory store would otherwise find a
new object only by listing again, which costs latency (the wait between
listings) or CPU (listing often). Linux tells for free: an inotify watch on
the directory of a prefix reports each name created or moved into it,
which is how every write of this store lands (a file placed under its
name, or renamed over the old one), by this process, by another, or by a
store's commit helper. The watch is read on the event loop
(``loop.add_reader``), so no thread waits for it and nothing is polled.

A notice is a hint, never the only way work is found: a watch can
overflow (the callback then hears ``None``: something changed, look), a
directory on a network filesystem hears nothing of other machines' writes,
and a platform without inotify has no watch (``watch`` answers None). The
caller goes on listing, only less in a hurry.

The inotify binding is ``inotify_simple`` (a maintained wrapper of libc's
calls through ctypes, Linux only).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

log = logging.getLogger("stepstone.store.file")

if sys.platform == "linux":  # pragma: no branch - the one platform with inotify
    try:
        import inotify_simple  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - installed with stepstone on Linux
        inotify_simple = None
else:  # pragma: no cover
    inotify_simple = None


def watch(directory: str, prefix: str, on_change: Callable[[str | None], None]) -> Any:
    """Call ``on_change(prefix + name)`` on the running loop for each object
    placed in ``directory`` (made if missing), ``on_change(None)`` when
    notices were lost; returns the function that stops it, or None where
    this platform offers no watch."""
    if inotify_simple is None:
        return None
    flags = inotify_simple.flags
    loop = asyncio.get_running_loop()
    os.makedirs(directory, exist_ok=True)
    notify = inotify_simple.INotify(nonblocking=True)
    try:
        notify.add_watch(directory, flags.CREATE | flags.MOVED_TO)
    except OSError as exc:
        notify.close()
        log.info("no change notices for %s (%s): listing finds its changes", directory, exc)
        return None

    def readable() -> None:
        try:
            events = list(notify.read(timeout=0))
        except OSError:
            events = []
        for event in events:
            if event.mask & flags.Q_OVERFLOW:
                on_change(None)
            elif event.name and not event.mask & flags.ISDIR:
                on_change(prefix + event.name)

    loop.add_reader(notify.fileno(), readable)

    def stop() -> None:
        with contextlib.suppress(Exception):
            loop.remove_reader(notify.fileno())
        notify.close()

    return stop

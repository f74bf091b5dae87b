"""Notices of objects placed in a FileStore, by any process on this machine.

Every write of this store lands as a file placed under its name (created,
or renamed over the old one), by this process or another, which an inotify
watch on the prefix's directory hears (:mod:`stepstone.store.inotify`).
"""

from __future__ import annotations

from collections.abc import Callable

from .. import inotify


def watch(
    directory: str, prefix: str, on_change: Callable[[str | None], None]
) -> Callable[[], None] | None:
    """Call ``on_change(prefix + name)`` on the running loop for each object
    placed in ``directory`` (made if missing), ``on_change(None)`` when
    notices were lost; returns the function that stops it, or None where
    this platform offers no watch."""

    def placed(names: list[str] | None) -> None:
        if names is None:
            on_change(None)
            return
        for name in names:
            on_change(prefix + name)

    found = inotify.watch(directory, inotify.PLACED, placed)
    return None if found is None else found.stop

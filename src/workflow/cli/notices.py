"""Warnings during a command, one line each: ``stepstone: warning: ...`` on stderr.

A command that meets a record it cannot read names it and goes on; so does
the library under it (a queue skipping an undecodable record logs a
warning). While a command runs, warnings from either reach stderr through
one handler, in the form of the CLI's own error line, control characters
escaped. ``stepstone worker`` has its own logging instead (``--log-format``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from stepstone.telemetry.escaping import escape_controls

log = logging.getLogger("stepstone.cli")


class NoticeFormatter(logging.Formatter):
    """``stepstone: warning: <message>`` (``error`` for an error record)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return escape_controls(f"stepstone: {record.levelname.lower()}: {record.message}")

    def format(self, record: logging.LogRecord) -> str:
        return escape_controls(super().format(record), newlines=True)


@contextlib.contextmanager
def notices_on_stderr() -> Iterator[None]:
    """Print warnings (and worse) logged while the block runs, one line each."""
    handler = logging.StreamHandler()
    handler.setLevel(logging.WARNING)
    handler.setFormatter(NoticeFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    finally:  # as it was: main() is also called in-process (tests, embedding)
        root.removeHandler(handler)


def warn(message: str) -> None:
    log.warning("%s", message)

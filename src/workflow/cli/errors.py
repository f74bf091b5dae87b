"""CliError: a failure the CLI reports in one line, and the exit status it leaves with.

Commands raise it for what the user can fix (a typo in a path, a target that
is not a JobRunner); ``entry.main`` prints it as ``stepstone: error: ...``
instead of a traceback.
"""

from __future__ import annotations


class CliError(Exception):
    """A failure to report in one line, with the exit status to leave with."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status

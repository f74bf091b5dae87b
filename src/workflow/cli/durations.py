"""Durations as the CLI reads them (:mod:`stepstone.ops.durations`): one it
cannot read is a usage error, reported in one line with exit status 2."""

from __future__ import annotations

from stepstone.cli.errors import CliError
from stepstone.ops import durations


def parse_duration(text: str) -> float:
    """``--older-than``: :func:`stepstone.ops.durations.parse_duration`, or CliError."""
    try:
        return durations.parse_duration(text)
    except ValueError as exc:
        raise CliError(str(exc), 2) from None


def parse_since(text: str, now: float) -> float:
    """``--since``: :func:`stepstone.ops.durations.parse_since`, or CliError."""
    try:
        return durations.parse_since(text, now)
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
